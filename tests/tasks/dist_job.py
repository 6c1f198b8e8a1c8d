"""A tiny training job on the data-parallel engine, for the distributed tests.

A 1-layer BertEncoder (D=16) under the conditional QA head, every dropout 0, trained on random
features with :func:`jobs.engine.loop.train_steps`. Run in-process through
:func:`run`, or as the worker command of ``scripts/launch.py``::

    python tests/tasks/dist_job.py --kvstore dist_sync --output-dir OUT

Rank 0 writes ``OUT/final.params`` and ``OUT/result.json``. ``--die-after-step S --die-rank R``
makes worker R kill itself (SIGKILL) after step S, as a crash would.
"""
import argparse
import json
import os
import signal
import sys

import mxnet as mx
import numpy as onp

from gluon_attention import BertEncoder, ModelForQAConditional, qa_loss
from jobs.engine.common import parse_ctx
from jobs.engine.distributed import DataParallel
from jobs.engine.loop import StepConfig, train_steps

NUM_EXAMPLES, LENGTH, QUESTION = 40, 12, 4
INPUTS = ('input_ids', 'token_types', 'valid_length', 'p_mask', 'start_position')


def make_features(seed):
    """Random QA features (N, T): question tokens 1..4, context after, [CLS] selectable."""
    rng = onp.random.RandomState(seed)
    valid = rng.randint(QUESTION + 3, LENGTH + 1, size=NUM_EXAMPLES)
    ids = rng.randint(1, 30, size=(NUM_EXAMPLES, LENGTH))
    position = onp.arange(LENGTH)
    p_mask = ((position > QUESTION) & (position < valid[:, None])) | (position == 0)
    impossible = rng.rand(NUM_EXAMPLES) < 0.3
    start = onp.where(impossible, 0, rng.randint(QUESTION + 1, valid - 1))
    end = onp.where(impossible, 0, onp.minimum(start + rng.randint(0, 2, NUM_EXAMPLES), valid - 1))
    return {'input_ids': (ids * (position < valid[:, None])).astype('int32'),
            'token_types': (position > QUESTION).astype('int32') + onp.zeros_like(ids, 'int32'),
            'valid_length': valid.astype('int32'), 'p_mask': p_mask.astype('float32'),
            'start_position': start.astype('int32'), 'end_position': end.astype('int32'),
            'is_impossible': impossible.astype('int32'),
            'answerable_loss_weight': rng.uniform(0.5, 1.5, NUM_EXAMPLES).astype('float32')}


def build_model(seed, contexts, features=None):
    """The tiny model, its head shapes materialised by one forward pass on ``features``."""
    mx.random.seed(seed)
    backbone = BertEncoder(vocab_size=30, units=16, hidden_size=32, num_layers=1, num_heads=2,
                           max_length=16, dropout=0.0, attention_dropout=0.0)
    model = ModelForQAConditional(backbone, units=16, dropout=0.0)
    model.initialize(mx.init.Normal(0.02), ctx=contexts)
    model.hybridize()
    features = make_features(seed) if features is None else features
    model(*[mx.np.array(features[k][:1], ctx=contexts[0]) for k in INPUTS])
    model.answerable_scores[-1].weight.lr_mult = 3.0       # a per-parameter multiplier
    return model


def schedule(seed, steps, batch_size):
    """Global batches: reshuffled every pass over the features."""
    order = onp.concatenate([onp.random.RandomState(seed + p).permutation(NUM_EXAMPLES)
                             for p in range(steps * batch_size // NUM_EXAMPLES + 1)])
    return [order[s * batch_size:(s + 1) * batch_size] for s in range(steps)]


def loss_fn(model):
    def summed(part):
        logits = model(*[part[k] for k in INPUTS])
        loss = qa_loss(*logits, part['start_position'], part['end_position'],
                       part['is_impossible'], 1.0, part['answerable_loss_weight'])
        return loss * len(part['input_ids'])
    return summed


def run(options):
    """Train; returns (model, engine, first step run). ``options`` as :func:`parse`."""
    contexts = parse_ctx(options.ctx)
    features = make_features(options.seed)
    model = build_model(options.seed, contexts, features)
    engine = DataParallel(model.collect_params(), kvstore=options.kvstore,
                          optimizer_params={'learning_rate': options.lr, 'wd': 0.01})
    config = StepConfig(seed=options.seed, lr=options.lr, warmup_ratio=0.25,
                        max_grad_norm=options.max_grad_norm,
                        grad_accum_steps=options.grad_accum_steps,
                        checkpoint_every=options.checkpoint_every)

    def on_step(result):
        print('step {} loss {:.4f} norm {:.4f}'.format(result.step, result.loss,
                                                       result.grad_norm), flush=True)
        if result.step == options.die_after_step and engine.rank == options.die_rank:
            os.kill(os.getpid(), signal.SIGKILL)

    first, _ = train_steps(
        model, engine, loss_fn(model), schedule(options.seed, options.steps, options.batch_size),
        lambda ids: {k: v[ids] for k, v in features.items()}, config,
        checkpoint_dir=options.output_dir and os.path.join(options.output_dir, 'checkpoints'),
        on_step=on_step)
    return model, engine, first


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    for flag, default in (('--ctx', 'cpu'), ('--kvstore', 'device'), ('--output-dir', ''),
                          ('--seed', 3), ('--steps', 6), ('--batch-size', 8), ('--lr', 3e-3),
                          ('--max-grad-norm', 0.5), ('--grad-accum-steps', 1),
                          ('--checkpoint-every', 2), ('--die-after-step', -1),
                          ('--die-rank', -1)):
        parser.add_argument(flag, type=type(default), default=default)
    return parser.parse_args(argv)


def main(argv=None):
    options = parse(argv)
    model, engine, first = run(options)
    if engine.is_chief:
        model.save_parameters(os.path.join(options.output_dir, 'final.params'))
        with open(os.path.join(options.output_dir, 'result.json'), 'w') as handle:
            json.dump({'resumed_from': first, 'num_workers': engine.num_workers}, handle)


if __name__ == '__main__':
    mx.npx.set_np()
    sys.exit(main())
