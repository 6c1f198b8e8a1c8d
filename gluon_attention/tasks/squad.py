"""The SQuAD fine-tuning job behind ``scripts/run_squad.py``: data, training, evaluation, export.

Kept in the package so that the script stays a thin command line and other tools (tests,
benchmarks) reuse the same steps.
"""
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time

import mxnet as mx
import numpy as onp
from mxnet import autograd
from tqdm import tqdm

from .._checks import fail
from ..data import squad
from .._resources import default_model_dir
from ..models.encoder import BertEncoder
from .export import export_block
from ..models.qa import ModelForQAConditional, QAInference, qa_loss
from .common import atomic_write_json, parse_ctx, seed_step
from .training import AdamW, CheckpointManager, linear_warmup_decay, split_batch

__all__ = ['parse_ctx', 'tokenizer_and_model_dir', 'load_data', 'build_model', 'train',
           'predict', 'evaluate', 'write_outputs', 'format_metrics', 'export_and_check']

INPUT_NAMES = ('input_ids', 'token_types', 'valid_length', 'p_mask')
INPUT_DTYPES = ('int32', 'int32', 'int32', 'float32')
# Arguments that define a training run: a checkpoint only resumes a run with the same values.
RUN_KEYS = ('train_file', 'extra_train_file', 'exclude_titles', 'model_dir', 'max_seq_length',
            'doc_stride', 'max_query_length', 'impossible_ratio', 'no_answer_chunk_ratio', 'batch_size', 'lr', 'epochs',
            'max_steps', 'max_train_features', 'warmup_ratio', 'weight_decay', 'max_grad_norm',
            'answerable_weight', 'head_lr_mult', 'plausible_spans', 'null_head_articles', 'freeze_word_embeddings', 'classifier_dropout', 'dropout',
            'attention_dropout', 'seed')


def _path(name):
    """A shipped data set's name -> its path; anything else is a path (read_squad reports a
    missing file with its path)."""
    name = str(name)
    if name in squad.SQUAD_FILES and not os.path.exists(name):
        return str(squad.default_data_path(name))
    return name


def tokenizer_and_model_dir(model_dir, args=None):
    """The tokenizer and model folder; with ``args``, checks that the sequence lengths fit the
    model's learned positions (ValueError otherwise: a longer input would silently read
    clipped positions)."""
    folder = model_dir or str(default_model_dir())
    if args is not None:
        config_file = os.path.join(folder, 'config.json')
        if os.path.exists(config_file):
            with open(config_file, encoding='utf-8') as f:
                positions = json.load(f).get('max_position_embeddings')
            for name in ('max_seq_length', 'eval_max_seq_length'):
                if positions and getattr(args, name) > positions:
                    fail('--{} must be at most the model\'s max_position_embeddings={}'.format(
                        name.replace('_', '-'), positions), **{name: getattr(args, name)})
    return squad.load_tokenizer(folder), folder


def _select_training(features, examples, args):
    """Which training features to keep (deterministic in ``args.seed``).

    Every feature holding its question's answer is kept; features of unanswerable questions are
    kept with probability ``args.impossible_ratio``; chunks of answerable questions that miss the
    answer with probability ``args.no_answer_chunk_ratio``. With ``args.plausible_spans``, only
    the unanswerable-question chunks holding the plausible span count as unanswerable features;
    their other chunks are treated like chunks that miss the answer.
    """
    rng = onp.random.RandomState(args.seed)
    plausible = getattr(args, 'plausible_spans', 0)
    keep = []
    for feature in features:
        draw = rng.rand()
        if not feature.is_impossible:
            keep.append(feature)
        elif examples[feature.example_index].is_impossible and (
                not plausible or feature.start_position > 0):
            if draw < args.impossible_ratio:
                keep.append(feature)
        elif draw < args.no_answer_chunk_ratio:
            keep.append(feature)
    return keep[:args.max_train_features] if args.max_train_features else keep


def load_data(args, tokenizer):
    """Training features, evaluation examples and evaluation features."""
    exclude = [t for t in args.exclude_titles.split(',') if t]
    train = squad.read_squad(_path(args.train_file))       # read once: titles and examples
    absent = set(exclude) - {e.title for e in train}
    examples = [e for e in train if e.title not in set(exclude)]
    if args.extra_train_file:
        examples += squad.read_squad(_path(args.extra_train_file), exclude_titles=exclude)
    if absent:
        print('note: --exclude-titles names articles not in --train-file: {}'.format(
            ', '.join(sorted(absent))))
    if not args.version_2_with_negative:
        examples = [e for e in examples if not e.is_impossible]
    unique = {}
    for example in examples:        # the v1.1 and v2.0 files share answerable questions
        unique.setdefault((example.question.strip(), example.context), example)
    examples = list(unique.values())
    stats = {}
    features = squad.convert_examples_to_features(
        examples, tokenizer, args.max_seq_length, args.doc_stride, args.max_query_length,
        is_training=True, stats=stats, plausible_spans=bool(getattr(args, 'plausible_spans', 0)))
    features = _select_training(features, examples, args)
    if getattr(args, 'null_head_articles', 'all') == 'with-impossible':
        # Articles without a single impossible question (all of SQuAD 1.1) would teach the
        # answerable head the topic of the article instead of the question: train it only on
        # articles that hold both kinds of question.
        mixed = {e.title for e in examples if e.is_impossible}
        for feature in features:
            if examples[feature.example_index].title not in mixed:
                feature.answerable_loss_weight = 0.0
    eval_examples = squad.read_squad(_path(args.eval_file))
    shared = {e.title for e in examples} & {e.title for e in eval_examples}
    if shared:
        print('warning: {} article(s) are in both the training and the evaluation data: {} '
              '(check --exclude-titles)'.format(len(shared), ', '.join(sorted(shared)[:5])),
              file=sys.stderr)
    if args.max_eval_examples:
        eval_examples = eval_examples[:args.max_eval_examples]
    eval_stride = min(128, args.eval_max_seq_length - args.max_query_length - 3)
    eval_features = squad.convert_examples_to_features(
        eval_examples, tokenizer, args.eval_max_seq_length, eval_stride, args.max_query_length,
        is_training=False)
    print('train: {} examples -> {} features kept ({} gold-span mismatches skipped); eval: {} '
          'questions -> {} features'.format(len(examples), len(features), stats.get('skipped', 0),
                                            len(eval_examples), len(eval_features)))
    return features, eval_examples, eval_features


def build_model(model_dir, args, contexts):
    # ctx decides whether 'auto' picks the fused (CPU-only) attention kernel
    backbone = BertEncoder.from_pretrained(model_dir, ctx=contexts, dropout=args.dropout,
                                           attention_dropout=args.attention_dropout)
    model = ModelForQAConditional(backbone, units=backbone.config['units'],
                                  dropout=args.classifier_dropout)
    for head in (model.start_scores, model.end_scores, model.answerable_scores):
        head.initialize(mx.init.Normal(0.02), ctx=contexts)
    backbone.collect_params().reset_ctx(contexts)
    if args.freeze_word_embeddings:
        backbone.word_embed.weight.grad_req = 'null'
    model.hybridize(static_alloc=True)
    return model


def _schedule(features, args):
    """Batches of feature indices for the whole run: shuffled per epoch, each batch drawn from
    a pool of similar lengths so little is padded."""
    if not features:
        fail('expected at least one training feature (check --train-file, --extra-train-file '
             'and the keep ratios)', num_features=0)
    total = args.max_steps or int(onp.ceil(args.epochs * len(features) / args.batch_size))
    lengths = onp.array([f.valid_length for f in features])
    batches, epoch = [], 0
    while len(batches) < total:
        rng = onp.random.RandomState(args.seed + epoch)
        order = rng.permutation(len(features))
        pool = args.batch_size * 16
        epoch_batches = []
        for lo in range(0, len(order), pool):
            part = order[lo:lo + pool]
            part = part[onp.argsort(lengths[part], kind='stable')]
            epoch_batches += [part[i:i + args.batch_size]
                              for i in range(0, len(part), args.batch_size)]
        batches += [epoch_batches[i] for i in rng.permutation(len(epoch_batches))]
        epoch += 1
    return batches[:total]


def _fingerprint(args):
    config = {k: getattr(args, k) for k in RUN_KEYS}
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]


def _forward_loss(model, part, args, scale):
    start, end, answerable = model(*[part[k] for k in INPUT_NAMES], part['start_position'])
    loss = qa_loss(start, end, answerable, part['start_position'], part['end_position'],
                   part['is_impossible'], args.answerable_weight,
                   part['answerable_loss_weight'])
    return loss * scale


def train(model, features, args, contexts):
    """Train (or resume).

    Returns (steps of the whole run, steps run by this call, training seconds of the whole run):
    the seconds are summed over resumed calls through the checkpoints' metadata.
    """
    started = time.time()
    batches = _schedule(features, args)
    first = squad.batchify([features[i] for i in batches[0][:len(contexts)]], round_to=8)
    for part in split_batch(first, contexts):        # materialise deferred shapes
        _forward_loss(model, part, args, 1.0)
    heads = set()
    for head in (model.start_scores, model.end_scores, model.answerable_scores):
        heads |= set(head.collect_params().values())
    params = [p for p in model.collect_params().values() if p.grad_req != 'null']
    optimizer = AdamW(params, weight_decay=args.weight_decay,
                      lr_mult=[args.head_lr_mult if p in heads else 1.0 for p in params])
    manager = CheckpointManager(os.path.join(args.output_dir, 'checkpoints'))
    fingerprint, begin, earlier_seconds = _fingerprint(args), 0, 0.0
    entry = manager.latest()
    if entry is not None and entry['meta'].get('fingerprint') == fingerprint:
        manager.restore(entry, model, optimizer, contexts)
        begin = entry['step']
        earlier_seconds = float(entry['meta'].get('train_seconds', 0.0))
        print('resuming from step {} of {}'.format(begin, len(batches)))
        if begin == len(batches):
            return len(batches), 0, earlier_seconds
    elif entry is not None:
        print('checkpoints in {} belong to another configuration; starting afresh'.format(
            manager.folder))
    progress = tqdm(range(begin, len(batches)), initial=begin, total=len(batches),
                    desc='train', unit='step', dynamic_ncols=True)
    loop_start, features_done = time.time(), 0
    for step in progress:
        seed_step(args.seed, step)
        arrays = squad.batchify([features[i] for i in batches[step]], round_to=8)
        size = len(batches[step])
        with autograd.record():
            losses = [_forward_loss(model, part, args, len(part['input_ids']) / size)
                      for part in split_batch(arrays, contexts)]
        autograd.backward(losses)
        lr = linear_warmup_decay(step, len(batches), args.lr, args.warmup_ratio)
        optimizer.step(lr, args.max_grad_norm)
        features_done += size
        if step % 10 == 0 or step + 1 == len(batches):
            progress.set_postfix(loss='{:.3f}'.format(sum(float(l) for l in losses)),
                                 lr='{:.1e}'.format(lr), feats_s='{:.1f}'.format(
                                     features_done / max(time.time() - loop_start, 1e-9)))
        if (step + 1) % args.checkpoint_every == 0 or step + 1 == len(batches):
            seconds = round(earlier_seconds + time.time() - started, 1)
            manager.save(step + 1, model, optimizer, {'fingerprint': fingerprint,
                                                      'train_seconds': seconds})
    return len(batches), len(batches) - begin, seconds    # the last step always saves


def _eval_batches(features, batch_size):
    order = onp.argsort([f.valid_length for f in features], kind='stable')
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]


def predict(model, features, args, ctx):
    """Run the inference graph; returns the block and per-feature 5-tuples of NumPy outputs."""
    inference = QAInference(model, args.start_top_n, args.end_top_n)
    inference.hybridize(static_alloc=True)
    outputs = [None] * len(features)
    for index in tqdm(_eval_batches(features, args.eval_batch_size), desc='eval', unit='batch'):
        arrays = squad.batchify([features[i] for i in index], round_to=8)
        batch = [mx.np.array(arrays[k], dtype=arrays[k].dtype, ctx=ctx) for k in INPUT_NAMES]
        result = [o.asnumpy() for o in inference(*batch)]
        for row, i in enumerate(index):
            outputs[i] = tuple(r[row] for r in result)
    return inference, outputs


def evaluate(examples, features, outputs, args):
    """Decode spans and score them with the official SQuAD 2.0 definitions."""
    predictions, final, null_odds, nbest = squad.decode_predictions(
        examples, features, outputs, args.n_best_size, args.max_answer_length,
        args.null_score_diff_threshold)
    metrics = squad.squad_evaluate(examples, final, na_probs=null_odds)
    always = squad.squad_evaluate(examples, predictions, na_probs=null_odds)
    for key in ('best_exact', 'best_exact_thresh', 'best_f1', 'best_f1_thresh'):
        metrics['full_range_' + key] = always.get(key)
    for key in ('HasAns_exact', 'HasAns_f1'):
        metrics['always_answer_' + key] = always.get(key)
    return {'metrics': metrics, 'final_predictions': final, 'null_odds': null_odds,
            'nbest': nbest}


def write_outputs(folder, results):
    metrics = dict(results['metrics'])
    for key in ('train_seconds', 'train_features_per_second', 'eval_seconds', 'train_steps'):
        metrics[key] = results[key]
    atomic_write_json(os.path.join(folder, 'predictions.json'), results['final_predictions'])
    atomic_write_json(os.path.join(folder, 'null_odds.json'), results['null_odds'])
    atomic_write_json(os.path.join(folder, 'nbest_predictions.json'), results['nbest'])
    atomic_write_json(os.path.join(folder, 'metrics.json'), metrics)
    results['metrics'] = metrics


def format_metrics(metrics):
    keys = ('exact', 'f1', 'HasAns_f1', 'NoAns_f1', 'best_f1', 'best_f1_thresh',
            'full_range_best_f1', 'always_answer_HasAns_f1', 'total')
    return '\n'.join('{:>26s}: {}'.format(k, metrics.get(k)) for k in keys)


def export_and_check(inference, examples, features, outputs, args, final_predictions):
    """Export the inference graph, rerun it in a fresh process, compare the predictions."""
    prefix = os.path.join(args.output_dir, 'export', 'qa')
    export_block(inference, prefix, INPUT_NAMES, INPUT_DTYPES)
    batches = _eval_batches(features, args.eval_batch_size)
    arrays = {}
    for b, index in enumerate(batches):
        batch = squad.batchify([features[i] for i in index], round_to=8)
        arrays.update({'batch%d/%s' % (b, k): batch[k] for k in INPUT_NAMES})
    with tempfile.TemporaryDirectory() as tmp:
        onp.savez(os.path.join(tmp, 'inputs.npz'), **arrays)
        subprocess.run([sys.executable, '-m', 'gluon_attention.export', prefix,
                        os.path.join(tmp, 'inputs.npz'), os.path.join(tmp, 'outputs.npz')],
                       check=True)
        with onp.load(os.path.join(tmp, 'outputs.npz')) as data:
            reloaded = [None] * len(features)
            for b, index in enumerate(batches):
                result = [data['batch%d/out%d' % (b, j)] for j in range(5)]
                for row, i in enumerate(index):
                    reloaded[i] = tuple(r[row] for r in result)
    diff = max(float(onp.abs(onp.asarray(a, 'float64') - onp.asarray(b, 'float64')).max())
               for x, y in zip(outputs, reloaded) for a, b in zip(x, y))
    _, final, _, _ = squad.decode_predictions(examples, features, reloaded, args.n_best_size,
                                              args.max_answer_length,
                                              args.null_score_diff_threshold)
    same = sum(final[k] == final_predictions[k] for k in final_predictions)
    check = {'identical': same, 'total': len(final_predictions), 'max_abs_diff': diff,
             'status': 'ok' if same == len(final_predictions) else 'MISMATCH',
             'prefix': prefix}
    atomic_write_json(os.path.join(args.output_dir, 'export', 'check.json'), check)
    return check
