"""BertEncoder forward, float32 against bfloat16 products, interleaved in one process.

    .venv/bin/python scripts/bf16_encoder_speed.py --shape minilm --threads 2
    .venv/bin/python scripts/bf16_encoder_speed.py --shape base --threads 2 --repeats 7

Three ways, the same random weights (the speed does not depend on them), B=8, T=384 by default:
``float32`` (hybridized, fused attention where built); ``bfloat16`` (``matmul_dtype='bfloat16'``,
the training path: the float32 weights cast on every call); ``bfloat16-graph`` (the exported
float32 graph rewritten by ``gluon_attention.core.matmul_graph``: weights cast once). Prints the
AMX decision (``gluon_attention.hardware()``), the median and spread of each way's times, the
ratios to float32 and the largest difference of each bfloat16 output from float32.
Run with ``DNNL_VERBOSE=1 ... --repeats 1`` to see which oneDNN primitive ran on which ISA.
"""
import argparse
import statistics
import sys
import tempfile
import time

SHAPES = {'minilm': dict(units=384, hidden_size=1536, num_layers=6, num_heads=12),
          'base': dict(units=768, hidden_size=3072, num_layers=12, num_heads=12)}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0], allow_abbrev=False)
    p.add_argument('--shape', choices=sorted(SHAPES), default='minilm')
    p.add_argument('--batch', type=int, default=8)
    p.add_argument('--length', type=int, default=384)
    p.add_argument('--repeats', type=int, default=7)
    p.add_argument('--threads', type=int, default=0)
    p.add_argument('--ways', default='float32,bfloat16,bfloat16-graph',
                   help='the ways to time, comma-separated (with DNNL_VERBOSE=1: one at a time)')
    return p.parse_args(argv)


def build(args):
    """The three callables and the inputs."""
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


def main(argv=None):
    args = parse_args(argv)
    import gluon_attention
    print(gluon_attention.hardware(), flush=True)
    blocks, inputs = build(args)
    blocks = {n: b for n, b in blocks.items() if n in args.ways.split(',')}
    times, outputs = {n: [] for n in blocks}, {}
    for _ in range(args.repeats + 1):               # the first round warms up, untimed
        for name, block in blocks.items():
            start = time.perf_counter()
            outputs[name] = block(*inputs).asnumpy()
            times[name].append(time.perf_counter() - start)
    base = statistics.median(times[next(iter(times))][1:] or times[next(iter(times))])
    for name, values in times.items():
        values = values[1:] if len(values) > 1 else values
        print('{:15s} median {:8.1f} ms  (min {:.1f}, max {:.1f})  first/this {:.2f}x  '
              'max |diff| {:.3g}'.format(name, 1e3 * statistics.median(values), 1e3 * min(values),
                                         1e3 * max(values), base / statistics.median(values),
                                         abs(outputs[name] - outputs[next(iter(times))]).max()))


if __name__ == '__main__':
    from _threads import threads_before_mxnet
    threads_before_mxnet()
    sys.exit(main())
