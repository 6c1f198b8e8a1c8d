"""BertEncoder forward, float32 against bfloat16 products and PyTorch, interleaved in one run.

    .venv/bin/python scripts/bf16_encoder_speed.py --shape minilm --threads 2
    .venv/bin/python scripts/bf16_encoder_speed.py --shape base --threads 2 --repeats 7 \\
        --torch-python .venv-peer/bin/python

Ways, all with the same random weights (the speed does not depend on them), B=8, T=384 by
default: ``float32`` (hybridized, fused attention where built); ``bfloat16``
(``matmul_dtype='bfloat16'``, the training path: the float32 weights cast on every call);
``bfloat16-graph`` (the exported float32 graph rewritten by ``gluon_attention.core.matmul_graph``:
weights cast once); with ``--torch-python`` (an interpreter with torch and transformers, e.g.
``.venv-peer`` as ``make bench`` creates it) also ``torch-float32`` and ``torch-bfloat16``:
transformers ``BertModel`` loaded from the float32 encoder written as a checkpoint, in eval mode
under ``torch.inference_mode``, the second under ``torch.autocast('cpu', dtype=torch.bfloat16)``
(``scripts/bench_encoder_torch_peer.py``, a persistent process timed in the same rounds). Each
round runs every way once, the order rotating by one way per round; the first round warms up,
untimed. Prints the AMX decision (``gluon_attention.hardware()``) and what the torch peer said
of AMX, then per way the median and spread of its times, its speed against ``float32`` and
against ``torch-bfloat16`` (the time of that way / this way's: > 1 = this way is faster), and
the largest difference of its output from ``float32`` over the valid positions.
Run with ``DNNL_VERBOSE=1 ... --repeats 1`` to see which oneDNN primitive ran on which ISA.
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

# the repository root, for the jobs (jobs/, not part of the installed package)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SHAPES = {'minilm': dict(units=384, hidden_size=1536, num_layers=6, num_heads=12),
          'base': dict(units=768, hidden_size=3072, num_layers=12, num_heads=12)}
OURS = ('float32', 'bfloat16', 'bfloat16-graph')
TORCH_WAYS = {'torch-float32': None, 'torch-bfloat16': 'bfloat16'}     # way: autocast
PEER = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'bench_encoder_torch_peer.py')


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0], allow_abbrev=False)
    p.add_argument('--shape', choices=sorted(SHAPES), default='minilm')
    p.add_argument('--batch', type=int, default=8)
    p.add_argument('--length', type=int, default=384)
    p.add_argument('--repeats', type=int, default=7)
    p.add_argument('--threads', type=int, default=0)
    p.add_argument('--torch-python', default='',
                   help='interpreter with torch and transformers for the torch-float32 and '
                        "torch-bfloat16 ways (default: '': none)")
    p.add_argument('--ways', default='',
                   help='the ways to time, comma-separated, among {} (default: all those that '
                        'can run; with DNNL_VERBOSE=1: one at a time)'.format(
                            ', '.join(OURS + tuple(TORCH_WAYS))))
    args = p.parse_args(argv)
    known = OURS + (tuple(TORCH_WAYS) if args.torch_python else ())
    args.ways = [w.strip() for w in args.ways.split(',') if w.strip()] or list(known)
    if not set(args.ways) <= set(known) or args.repeats < 1:
        p.error('--ways must name some of {} (the torch ways need --torch-python) and '
                '--repeats must be >= 1. Received: --ways={}, --repeats={}'.format(
                    ', '.join(known), ','.join(args.ways), args.repeats))
    return args


def build(args):
    """The three blocks of ours, the inputs, and the float32 block (written for torch)."""
    import mxnet as mx
    import numpy as onp
    from gluon_attention.core.matmul import set_matmul_dtype
    from gluon_attention.core.matmul_graph import Bfloat16Graph
    from gluon_attention.models.encoder import BertEncoder
    mx.npx.set_np()
    rng = onp.random.RandomState(0)
    shape = dict(SHAPES[args.shape], vocab_size=30522, max_length=512)
    ids = mx.np.array(rng.randint(0, 30522, (args.batch, args.length)), dtype='int32')
    types = mx.np.zeros((args.batch, args.length), dtype='int32')
    lengths = mx.np.array(rng.randint(args.length // 2, args.length + 1, args.batch),
                          dtype='int32')
    inputs = (ids, types, lengths)
    blocks = {}
    for name in ('float32', 'bfloat16'):
        blocks[name] = BertEncoder(dropout=0.0, attention_dropout=0.0, **shape)
        blocks[name].initialize(mx.init.Normal(0.02))
        blocks[name].hybridize(static_alloc=True)
        blocks[name](*inputs).wait_to_read()
    for source, target in zip(blocks['float32'].collect_params().values(),
                              blocks['bfloat16'].collect_params().values()):
        target.set_data(source.data())
    set_matmul_dtype(blocks['bfloat16'], 'bfloat16')
    with tempfile.TemporaryDirectory() as folder:
        blocks['float32'].export(folder + '/enc')
        symbol, arg, aux = mx.model.load_checkpoint(folder + '/enc', 0)
    blocks['bfloat16-graph'] = Bfloat16Graph(symbol.tojson(), dict(arg, **aux),
                                             ['data0', 'data1', 'data2'], ['int32'] * 3)
    return blocks, inputs


def torch_peer(args, block, inputs, folder):
    """The encoder peer in ``args.torch_python``, on ``block``'s weights written as a
    checkpoint in ``folder`` and the same inputs."""
    import numpy as onp
    from gluon_attention.models.checkpoint import write_checkpoint
    from jobs.bench.peer import PeerProcess
    write_checkpoint(block, folder)
    arrays = dict(zip(('ids', 'types', 'lengths'), (x.asnumpy() for x in inputs)))
    onp.savez(os.path.join(folder, 'inputs.npz'), **arrays)
    return PeerProcess([args.torch_python, PEER, '--threads', os.environ['OMP_NUM_THREADS'],
                        '--model-dir', folder, '--inputs', os.path.join(folder, 'inputs.npz')],
                       os.path.join(folder, 'peer.stderr'))


def runners(blocks, inputs, peer, folder):
    """{way: run(save) -> (seconds, output (B, T, C) float32 or None)}; ``save``: the torch
    ways return their output too (written by the peer, read back, untimed)."""
    import numpy as onp

    def ours(block):
        def run(save):
            start = time.perf_counter()
            out = block(*inputs).asnumpy()
            return time.perf_counter() - start, out
        return run

    def theirs(way):
        path = os.path.join(folder, way + '.npy')

        def run(save):
            reply = peer.ask(dict({'autocast': TORCH_WAYS[way]}, **({'save': path} if save
                                                                     else {})))
            return reply['seconds'], onp.load(path) if save else None
        return run
    made = {name: ours(block) for name, block in blocks.items()}
    made.update({way: theirs(way) for way in TORCH_WAYS} if peer else {})
    return made


def interleaved(run, ways, repeats):
    """{way: [seconds of each timed round]} and {way: output of the last round}: one warm-up
    round, then ``repeats`` rounds, each running every way once, the order rotating."""
    times, outputs = {w: [] for w in ways}, {}
    for round_ in range(repeats + 1):
        shift = round_ % len(ways)
        for way in ways[shift:] + ways[:shift]:
            seconds, outputs[way] = run[way](round_ == repeats)
            if round_:
                times[way].append(seconds)
    return times, outputs


def summary(times, diffs):
    """One line per way: median, min and max ms, speed against ``float32`` and against
    ``torch-bfloat16`` ('-' where that way did not run), largest difference from float32."""
    medians = {way: statistics.median(values) for way, values in times.items()}
    lines = []
    for way, values in times.items():
        ratios = ['{:.2f}x'.format(medians[ref] / medians[way]) if ref in medians else '-'
                  for ref in ('float32', 'torch-bfloat16')]
        lines.append('{:15s} median {:8.1f} ms  (min {:.1f}, max {:.1f})  vs float32 {:>6s}  '
                     'vs torch-bfloat16 {:>6s}  max |diff| {}'.format(
                         way, 1e3 * medians[way], 1e3 * min(values), 1e3 * max(values),
                         *ratios, '-' if diffs.get(way) is None else '%.3g' % diffs[way]))
    return lines


def main(argv=None):
    args = parse_args(argv)
    import gluon_attention
    print(gluon_attention.hardware(), flush=True)
    blocks, inputs = build(args)
    lengths = inputs[2].asnumpy()
    with tempfile.TemporaryDirectory(prefix='ga-bf16-encoder') as folder:
        peer = None
        if any(way in TORCH_WAYS for way in args.ways):
            peer = torch_peer(args, blocks['float32'], inputs, folder)
            print('torch {}: AMX tiles {}'.format(peer.ready['torch'], {
                True: 'granted', False: 'not granted', None: 'unknown'}[peer.ready['amx']]))
        try:
            times, outputs = interleaved(runners(blocks, inputs, peer, folder), args.ways,
                                         args.repeats)
        finally:
            if peer:
                peer.close()
    reference = outputs.get('float32')
    diffs = {way: max(float(abs(out[i, :n] - reference[i, :n]).max())
                      for i, n in enumerate(lengths))
             for way, out in outputs.items() if reference is not None and out is not None}
    print('\n'.join(summary(times, diffs)))


if __name__ == '__main__':
    from _threads import threads_before_mxnet
    threads_before_mxnet()
    sys.exit(main())
