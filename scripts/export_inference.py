#!/usr/bin/env python
"""Hybridize a gluon_attention block, export symbol + params, reload, and check parity.

Either a library block with fresh parameters (``--block``) or the fine-tuned SQuAD model of a
`run_squad.py` output folder (``--squad-run``). The reload runs in a fresh process with
``SymbolBlock.imports`` (no gluon_attention class involved) on inputs of a batch size and sequence
length different from the ones used at export time, and the outputs are compared.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

BLOCKS = ('multi_head_attention', 'dot_product', 'additive', 'bert_encoder')


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument('--block', choices=BLOCKS, default='multi_head_attention')
    p.add_argument('--squad-run', default=None,
                   help='a run_squad.py --output-dir: export its last checkpoint instead')
    p.add_argument('--output-prefix', default='runs/export/model')
    p.add_argument('--tolerance', type=float, default=1e-5)
    p.add_argument('--threads', type=int, default=0)
    p.add_argument('--seed', type=int, default=0)
    return p.parse_args(argv)


def _inputs(np, block_name, batch, length):
    """Random inputs for a block at a given batch size and length (all positional)."""
    rng = np.random
    if block_name == 'bert_encoder' or block_name == 'squad':
        ids = rng.randint(1000, 2000, size=(batch, length)).astype('int32')
        types = np.zeros((batch, length), dtype='int32')
        valid = np.array([length - i % length for i in range(batch)], dtype='int32')
        if block_name == 'bert_encoder':
            return [ids, types, valid]
        p_mask = (np.arange(length)[None, :] < valid[:, None]).astype('float32')
        return [ids, types, valid, p_mask]
    query = rng.normal(size=(batch, length, 24)).astype('float32')
    memory = rng.normal(size=(batch, length + 3, 24)).astype('float32')
    valid = np.array([length + 3 - i % (length + 3) for i in range(batch)], dtype='int32')
    return [query, memory, memory, valid]


def _build(args, ga, mx):
    if args.squad_run:
        from gluon_attention.models.qa import ModelForQAConditional, QAInference
        from gluon_attention.tasks.training import CheckpointManager
        model = ModelForQAConditional(ga.BertEncoder.from_pretrained())
        entry = CheckpointManager(os.path.join(args.squad_run, 'checkpoints')).latest()
        if entry is None:
            raise SystemExit('no intact checkpoint in {}/checkpoints'.format(args.squad_run))
        model.initialize()
        model.load_parameters(os.path.join(args.squad_run, 'checkpoints',
                                           entry['files']['params']['file']))
        return QAInference(model), 'squad'
    block = {'multi_head_attention': lambda: ga.MultiHeadAttention(24, 4),
             'dot_product': ga.DotProductAttention,
             'additive': lambda: ga.AdditiveAttention(16),
             'bert_encoder': ga.BertEncoder.from_pretrained}[args.block]()
    block.initialize()
    return block, args.block


def main(argv=None):
    args = parse_args(argv)
    from gluon_attention.tasks.common import set_threads
    set_threads(args.threads)
    import mxnet as mx
    import numpy as onp
    import gluon_attention as ga
    from gluon_attention.tasks.export import export_block
    mx.npx.set_np()
    onp.random.seed(args.seed)
    block, name = _build(args, ga, mx)
    block.hybridize(static_alloc=True)
    export_inputs = _inputs(onp, name, 2, 12)
    block(*[mx.np.array(x, dtype=x.dtype) for x in export_inputs])
    names = ['input%d' % i for i in range(len(export_inputs))]
    paths = export_block(block, args.output_prefix, names, [str(x.dtype) for x in export_inputs])
    check_inputs = _inputs(onp, name, 3, 7)                 # another batch size and length
    expected = block(*[mx.np.array(x, dtype=x.dtype) for x in check_inputs])
    expected = [o.asnumpy() for o in (expected if isinstance(expected, (list, tuple))
                                      else [expected])]
    with tempfile.TemporaryDirectory() as tmp:
        onp.savez(os.path.join(tmp, 'in.npz'),
                  **{'batch0/%s' % n: x for n, x in zip(names, check_inputs)})
        subprocess.run([sys.executable, '-m', 'gluon_attention.export', args.output_prefix,
                        os.path.join(tmp, 'in.npz'), os.path.join(tmp, 'out.npz')], check=True)
        with onp.load(os.path.join(tmp, 'out.npz')) as out:
            got = [out['batch0/out%d' % j] for j in range(len(expected))]
    diff = max(float(onp.abs(e.astype('float64') - g).max()) for e, g in zip(expected, got))
    report = dict(paths, block=name, max_abs_diff=diff, tolerance=args.tolerance,
                  ok=diff <= args.tolerance)
    print(json.dumps(report, indent=2))
    return 0 if report['ok'] else 1


if __name__ == '__main__':
    sys.exit(main())
