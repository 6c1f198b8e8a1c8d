"""The PyTorch side of `compare_transformers.py theirs`: BertForQuestionAnswering, same batches.

Runs in the interpreter that has torch and transformers (``.venv-peer``, as ``make bench`` builds
it); ``compare_transformers.py theirs`` starts it after writing ``<run-dir>/batches.npz``. It
reads the feature file (arrays and ``meta``: the model folder, the recipes) and the batches, and
writes ``<run-dir>/dev_outputs.npz`` (``start_logits``, ``end_logits``: (F, T) float32, the
dev features' logits) and ``<run-dir>/peer.json`` (training and dev seconds, the batch digest).

``BertForQuestionAnswering.from_pretrained`` loads the encoder folder (a new ``qa_outputs``
layer, initialised after ``torch.manual_seed(seed)``) with the recipe's dropout rates; its loss is
the mean of the start and end cross-entropies. Each step's batch is the features of
``batches.npz``, padded to the longest one rounded up to a multiple of 8, as our loop pads.
Recipe ``ours`` is our optimisation exactly: our AdamW (epsilon added to the square root of the
uncorrected second moment, decoupled decay ``lr * wd * w``, none on biases and LayerNorm
weights), linear warm-up over ``int(steps * warmup_ratio)`` steps (at least 1) then linear decay
to 0, the gradient norm clipped, word embeddings frozen. Recipe ``theirs`` is the transformers
example's: ``torch.optim.AdamW`` and ``get_linear_schedule_with_warmup`` (warm-up
``ceil(steps * warmup_ratio)`` steps).
"""
import argparse
import hashlib
import json
import math
import os
import sys
import time

import numpy as onp

DIGEST_KEYS = ('input_ids', 'token_types', 'valid_length', 'start_position', 'end_position')


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0], allow_abbrev=False)
    p.add_argument('--features', required=True, help='the feature file')
    p.add_argument('--run-dir', required=True, help='holds batches.npz; outputs go there')
    p.add_argument('--recipe', choices=('ours', 'theirs'), required=True)
    p.add_argument('--seed', type=int, required=True)
    p.add_argument('--threads', type=int, default=1)
    return p.parse_args(argv)


def our_rate(step, total, lr, warmup_ratio):
    """Our schedule: linear warm-up to ``lr`` over ``max(1, int(total * warmup_ratio))`` steps
    (step 0 already at ``lr / warmup``), then linear decay reaching 0 after the last step."""
    warmup = max(1, int(total * warmup_ratio))
    if step < warmup:
        return lr * (step + 1) / warmup
    return lr * max(0.0, (total - step) / max(1, total - warmup))


def _no_decay(name):
    return name.endswith('bias') or 'LayerNorm' in name


def our_optimizer(torch, named, recipe, total):
    """update(step): our AdamW step at our schedule's rate (betas 0.9, 0.999)."""
    moments = {name: (torch.zeros_like(p), torch.zeros_like(p)) for name, p in named}
    eps = recipe['adam_epsilon']

    @torch.no_grad()
    def update(step):
        lr = our_rate(step, total, recipe['lr'], recipe['warmup_ratio'])
        t = step + 1
        scale = math.sqrt(1 - 0.999 ** t) / (1 - 0.9 ** t)
        for name, param in named:
            m, v = moments[name]
            m.mul_(0.9).add_(param.grad, alpha=0.1)
            v.mul_(0.999).addcmul_(param.grad, param.grad, value=0.001)
            decay = 0.0 if _no_decay(name) else recipe['weight_decay']
            param.sub_(lr * (scale * m / (v.sqrt() + eps) + decay * param))
        return lr
    return update


def example_optimizer(torch, named, recipe, total):
    """update(step): the transformers example's AdamW and linear schedule."""
    from transformers import get_linear_schedule_with_warmup
    groups = [{'params': [p for n, p in named if _no_decay(n) == skip],
               'weight_decay': 0.0 if skip else recipe['weight_decay']} for skip in (False, True)]
    optimizer = torch.optim.AdamW(groups, lr=recipe['lr'], eps=recipe['adam_epsilon'])
    scheduler = get_linear_schedule_with_warmup(
        optimizer, math.ceil(total * recipe['warmup_ratio']), total)

    def update(step):
        lr = scheduler.get_last_lr()[0]
        optimizer.step()
        scheduler.step()
        return lr
    return update


def build_model(torch, meta, recipe, seed):
    from transformers import BertForQuestionAnswering
    torch.manual_seed(seed)
    model = BertForQuestionAnswering.from_pretrained(
        meta['model_dir'], hidden_dropout_prob=recipe['dropout'],
        attention_probs_dropout_prob=recipe['attention_dropout'])
    frozen = []
    if recipe['freeze_layers']:
        frozen = [model.bert.embeddings] + list(model.bert.encoder.layer[:recipe['freeze_layers']])
    elif recipe['freeze_word_embeddings']:
        frozen = [model.bert.embeddings.word_embeddings]
    for block in frozen:
        block.requires_grad_(False)
    return model


def tensors(torch, arrays, prefix, ids):
    """The step's batch: the features ``ids`` cut to their longest length rounded up to 8."""
    lengths = arrays[prefix + 'valid_length'][ids]
    width = -(-int(lengths.max()) // 8) * 8
    batch = {key: arrays[prefix + key][ids][:, :width].astype('int64')
             for key in ('input_ids', 'token_types')}
    batch['attention_mask'] = (onp.arange(width)[None] < lengths[:, None]).astype('int64')
    batch.update({key: arrays[prefix + key][ids].astype('int64') for key in
                  ('valid_length', 'start_position', 'end_position') if prefix + key in arrays})
    return {key: torch.from_numpy(value) for key, value in batch.items()}


def train(torch, model, arrays, batches, update, recipe):
    """Run the steps; returns (seconds, sha256 of the fed arrays)."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    digest, every = hashlib.sha256(), max(1, len(batches) // 20)
    model.train()
    started = time.perf_counter()
    for step, ids in enumerate(batches):
        batch = tensors(torch, arrays, 'train/', ids)
        for key in DIGEST_KEYS:
            digest.update(batch[key].to(torch.int32).numpy().tobytes())
        loss = model(input_ids=batch['input_ids'], attention_mask=batch['attention_mask'],
                     token_type_ids=batch['token_types'], start_positions=batch['start_position'],
                     end_positions=batch['end_position']).loss
        loss.backward()
        if recipe['max_grad_norm']:
            torch.nn.utils.clip_grad_norm_([p for _, p in named], recipe['max_grad_norm'])
        lr = update(step)
        model.zero_grad(set_to_none=True)
        if (step + 1) % every == 0 or step + 1 == len(batches):
            seconds = time.perf_counter() - started
            done = sum(len(b) for b in batches[:step + 1])
            print('step {}/{}  loss {:.4f}  lr {:.2e}  {:.2f} features/s'.format(
                step + 1, len(batches), loss.item(), lr, done / seconds), flush=True)
    return time.perf_counter() - started, digest.hexdigest()


def dev_logits(torch, model, arrays, batch_size=32):
    """(start, end) logits (F, T) of every dev feature, batches of similar lengths."""
    count, width = arrays['dev/input_ids'].shape
    start, end = (onp.zeros((count, width), onp.float32) for _ in range(2))
    order = onp.argsort(arrays['dev/valid_length'], kind='stable')
    model.eval()
    with torch.inference_mode():
        for lo in range(0, count, batch_size):
            ids = order[lo:lo + batch_size]
            batch = tensors(torch, arrays, 'dev/', ids)
            out = model(input_ids=batch['input_ids'], attention_mask=batch['attention_mask'],
                        token_type_ids=batch['token_types'])
            start[ids, :out.start_logits.shape[1]] = out.start_logits.numpy()
            end[ids, :out.end_logits.shape[1]] = out.end_logits.numpy()
    return start, end


def main(argv=None):
    args = parse_args(argv)
    import torch
    import transformers
    torch.set_num_threads(args.threads)
    with onp.load(args.features) as data:
        meta = json.loads(str(data['meta']))
        arrays = {k: data[k] for k in data.files if k.startswith(('train/', 'dev/'))}
    with onp.load(os.path.join(args.run_dir, 'batches.npz')) as saved:
        offsets, index = saved['offsets'], saved['index']
    batches = [index[a:b] for a, b in zip(offsets[:-1], offsets[1:])]
    recipe = meta['recipes'][args.recipe]
    model = build_model(torch, meta, recipe, args.seed)
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    update = (our_optimizer if args.recipe == 'ours' else example_optimizer)(
        torch, named, recipe, len(batches))
    seconds, digest = train(torch, model, arrays, batches, update, recipe)
    began = time.perf_counter()
    start, end = dev_logits(torch, model, arrays)
    dev_seconds = time.perf_counter() - began
    onp.savez(os.path.join(args.run_dir, 'dev_outputs.npz'), start_logits=start, end_logits=end)
    report = {'framework': 'torch {}, transformers {}'.format(torch.__version__,
                                                             transformers.__version__),
              'train_seconds': round(seconds, 1), 'dev_seconds': round(dev_seconds, 1),
              'dev_features': len(start), 'batch_digest': digest,
              'torch_threads': torch.get_num_threads()}
    with open(os.path.join(args.run_dir, 'peer.json'), 'w', encoding='utf-8') as handle:
        json.dump(report, handle, indent=2)
    return 0


if __name__ == '__main__':
    sys.exit(main())
