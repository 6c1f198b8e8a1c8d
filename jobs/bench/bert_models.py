"""The ``bert_models`` rows of ``scripts/benchmark.py``: whole BERT encoders at production size
against GluonNLP 0.10, the fastest BERT MXNet 1.9 itself offers.

One GluonNLP 0.10 ``BERTModel`` per size (``bert_12_768_12``: 12 layers x 768, 12 heads;
``bert_24_1024_16``: 24 x 1024, 16 heads; a vocabulary of 30522 tokens, weights N(0, 0.02)),
built offline, saved with ``save_parameters`` and converted with
:func:`gluon_attention.convert.from_gluonnlp` into our
:class:`~gluon_attention.models.encoder.BertEncoder`: both sides hold the same weights. Inference,
batch 8, T = 128 and 384 (every other sequence loses an eighth of T to padding), float32,
forward only, the sequence output waited for. Rows (``impl``):

* ``ours``: ``BertEncoder`` hybridized (static alloc and shape), default ``Kernels()``;
* ``ours_bfloat16``: the same with ``Kernels(matmul_dtype='bfloat16')`` (left out, with a line
  saying why, where MXNet cannot run bfloat16 products);
* ``gluonnlp_0.10_onednn``: the 0.10 model after ``optimize_for(backend='MKLDNN')`` with static
  alloc and shape: its ``DotProductSelfAttentionCell`` (``interleaved_matmul_selfatt_qk`` /
  ``_valatt``) becomes oneDNN's ``_sg_mkldnn_selfatt_qk`` / ``_valatt``, checked in the
  partitioned graph (RuntimeError when absent);
* ``gluonnlp_0.10_int8``: the 0.10 model quantized by ``quantize_net_v2`` with oneDNN's
  ``MKLDNN_QUANTIZE`` pass, calibrated on two other random batches (its QKV projection stays
  float32: see :func:`_int8_runner`);
* ``gluonnlp_0.10``: the 0.10 model hybridized without a backend, at BERT-base T=128 only
  (about 20 times slower than the fused one).

All rows of one shape run interleaved in this process (ours, ours_bfloat16, fused, plain, ours,
...), one warm-up round then ``rounds`` timed ones; BERT-large at T=384 runs one implementation
at a time (its static graphs hold several GB each) and fewer rounds;
time = the median. Rows keep the whole-model keys of :mod:`~jobs.bench.models` (``unit``
features/s) with ``ratio`` against :data:`REFERENCE` only, and add ``model`` (the zoo name) and
``isa`` (the instruction set the products ran on: the CPU's vector level, and AMX or not for
the bfloat16 row). Glossary: B batch, T sequence length, V vocabulary size.
"""
import contextlib
import functools
import gc
import tempfile

import mxnet as mx
import numpy as onp

from gluon_attention.convert import ARCHITECTURES, from_gluonnlp
from gluon_attention.core.kernels import Kernels
from gluon_attention.core.matmul import bfloat16_problem
from gluon_attention.hardware import amx_in_use, cpu_flags
from gluon_attention.models.encoder import BertEncoder

from .attention import interleaved_medians

__all__ = ['CONFIG', 'MODELS', 'LENGTHS', 'REFERENCE', 'INT8', 'FUSED_OPS', 'gluonnlp_bert',
           'fused_op_names', 'bert_inputs', 'isa_of', 'runner_factories', 'runners',
           'bert_model_rows', 'bert_models_table']

CONFIG = 'bert_models'
MODELS = ('bert_12_768_12', 'bert_24_1024_16')
LENGTHS = (128, 384)
BATCH, VOCAB_SIZE = 8, 30522
REFERENCE = 'gluonnlp_0.10_onednn'
PLAIN = 'gluonnlp_0.10'
INT8 = 'gluonnlp_0.10_int8'
FUSED_OPS = ('_sg_mkldnn_selfatt_qk', '_sg_mkldnn_selfatt_valatt')
_SIZE_KEYS = ('num_layers', 'units', 'hidden_size', 'num_heads', 'max_length')


@contextlib.contextmanager
def _legacy():
    """0.10 blocks run outside numpy mode."""
    with mx.util.np_array(False), mx.util.np_shape(False):
        yield


def _build_010(model_name, sizes, vocab_size):
    """A 0.10 ``BERTModel`` (sequence output only), not initialised; build it in legacy mode."""
    from gluonnlp.model import bert as gbert  # pylint: disable=import-outside-toplevel
    config = ARCHITECTURES[model_name]
    encoder = gbert.BERTEncoder(dropout=0.0, layer_norm_eps=config['layer_norm_eps'],
                                activation=config['activation'], **sizes)
    return gbert.BERTModel(encoder, vocab_size=vocab_size, token_type_vocab_size=2,
                           units=sizes['units'], embed_size=sizes['units'], use_pooler=False,
                           use_decoder=False, use_classifier=False)


def gluonnlp_bert(model_name, sizes, vocab_size, folder, seed=0):
    """A 0.10 ``BERTModel`` of the zoo family ``model_name`` at ``sizes`` (dict of
    ``num_layers``, ``units``, ``hidden_size``, ``num_heads``, ``max_length``), V =
    ``vocab_size``, weights N(0, 0.02) from ``seed``, saved as ``folder``/net.params with its
    vocabulary and converted into ``folder``/ours. Returns the two paths."""
    import gluonnlp as nlp  # pylint: disable=import-outside-toplevel
    words = ['w%d' % i for i in range(vocab_size - 5)]          # + 5 special tokens
    params, vocab_file, ours = ('%s/%s' % (folder, n) for n in ('net.params', 'net.vocab', 'ours'))
    with _legacy():
        vocab = nlp.vocab.BERTVocab(nlp.data.count_tokens(words))
        net = _build_010(model_name, sizes, len(vocab))
        mx.random.seed(seed)
        net.initialize(mx.init.Normal(0.02))
        ids = mx.nd.ones((1, 4))
        net(ids, ids, mx.nd.array([4]))                          # deferred shapes
        net.save_parameters(params)
    with open(vocab_file, 'w', encoding='utf-8') as out:
        out.write(vocab.to_json())
    from_gluonnlp(params, model_name, vocab_file, ours, sizes=sizes)
    return params, ours


def fused_op_names(net):
    """The oneDNN self-attention operators in ``net``'s partitioned graph (after
    ``optimize_for``), sorted."""
    graph = net._cached_graph[1].tojson()  # pylint: disable=protected-access
    return sorted({name for name in FUSED_OPS if '"%s"' % name in graph})


def bert_inputs(length, vocab_size, seed=0, batch=BATCH):
    """Ids and token types int32 (B, T) (the second half of each sequence type 1), valid
    lengths int32 (B,): every other sequence loses T // 8 to padding."""
    rng = onp.random.RandomState(seed)
    ids = rng.randint(5, vocab_size, (batch, length)).astype(onp.int32)
    types = onp.zeros_like(ids)
    types[:, length // 2:] = 1
    valid = onp.array([length - (length // 8) * (i % 2) for i in range(batch)], onp.int32)
    return ids, types, valid


def _ours_runner(folder, inputs, kernels):
    encoder = BertEncoder.from_pretrained(folder, dropout=0.0, attention_dropout=0.0,
                                          kernels=kernels)
    encoder.hybridize(static_alloc=True, static_shape=True)
    arrays = [mx.np.array(x, dtype='int32') for x in inputs]

    def run():
        out = encoder(*arrays)
        out.wait_to_read()
        return out
    return run


def _legacy_runner(net, arrays):
    """A callable running the 0.10 block ``net`` on ``arrays`` (mx.nd) outside numpy mode."""
    def run():
        with _legacy():
            out = net(*arrays)
            out.wait_to_read()
        return out
    return run


def _gluonnlp_runner(model_name, sizes, vocab_size, params, inputs, fused):
    """0.10's model loaded from ``params``, fused by oneDNN (``fused``) or plainly hybridized."""
    with _legacy():
        net = _build_010(model_name, sizes, vocab_size)
        net.load_parameters(params)
        arrays = [mx.nd.array(x, dtype='float32') for x in inputs]
        if fused:
            net.optimize_for(*arrays, backend='MKLDNN', static_alloc=True, static_shape=True)
            found = fused_op_names(net)
            if found != sorted(FUSED_OPS):
                raise RuntimeError('optimize_for(backend=MKLDNN) did not fuse the 0.10 '
                                   'self-attention: found {}'.format(found))
        else:
            net.hybridize(static_alloc=True, static_shape=True)
    return _legacy_runner(net, arrays)


def _int8_runner(model_name, sizes, vocab_size, params, inputs, calibration_batches=2):
    """0.10's model quantized by ``quantize_net_v2`` (oneDNN's ``MKLDNN_QUANTIZE`` pass on a
    CPU), calibrated (naive min/max) on ``calibration_batches`` other random batches of the
    same shape. The QKV projection stays float32 (``exclude_layers_match``): 0.10 builds its
    interleaved QKV weight in the graph (reshape + concat of three parameters) and MXNet
    1.9.1's quantized graph then fails type inference (uint8 provided, int8 inferred)."""
    with _legacy():
        net = _build_010(model_name, sizes, vocab_size)
        net.load_parameters(params)
        net.hybridize(static_alloc=True, static_shape=True)
        arrays = [mx.nd.array(x, dtype='float32') for x in inputs]
        net(*arrays)
        calibration = [onp.concatenate(x) for x in zip(*[
            bert_inputs(inputs[0].shape[1], vocab_size, seed=1 + i, batch=len(inputs[0]))
            for i in range(calibration_batches)])]
        data = mx.io.NDArrayIter({'data%d' % i: mx.nd.array(x, dtype='float32')
                                  for i, x in enumerate(calibration)}, batch_size=len(inputs[0]))
        quantized = mx.contrib.quantization.quantize_net_v2(
            net, quantized_dtype='auto', calib_mode='naive', calib_data=data,
            data_shapes=data.provide_data, num_calib_examples=len(calibration[0]),
            exclude_layers_match=['dotproductselfattentioncell0_fullyconnected'])
        quantized.hybridize(static_alloc=True, static_shape=True)
    return _legacy_runner(quantized, arrays)


def isa_of(impl):
    """The instruction set the products of row ``impl`` run on (from /proc/cpuinfo and
    :func:`gluon_attention.hardware.amx_in_use`)."""
    flags = cpu_flags()
    vector = 'avx512' if 'avx512f' in flags else 'avx2' if 'avx2' in flags else 'sse'
    if impl == INT8:
        return vector + ('+vnni' if 'avx512_vnni' in flags else '') + (
            ' (amx allowed)' if amx_in_use() else '')
    if impl.endswith('bfloat16'):
        if amx_in_use():
            return vector + '+amx'
        return vector + ('+avx512_bf16 (no amx)' if 'avx512_bf16' in flags else
                         ' (no bfloat16 instructions)')
    return vector


def runner_factories(model_name, sizes, vocab_size, paths, length, bfloat16, int8=True):
    """{impl: zero-argument factory of the zero-argument callable of :func:`runners`}."""
    params, folder = paths
    inputs = bert_inputs(length, vocab_size)
    ours = {'ours': Kernels()}
    if bfloat16:
        ours['ours_bfloat16'] = Kernels(matmul_dtype='bfloat16')
    made = {name: functools.partial(_ours_runner, folder, inputs, kernels)
            for name, kernels in ours.items()}
    theirs = functools.partial(_gluonnlp_runner, model_name, sizes, vocab_size, params, inputs)
    made[REFERENCE] = functools.partial(theirs, True)
    if int8:
        made[INT8] = functools.partial(_int8_runner, model_name, sizes, vocab_size, params,
                                       inputs)
    if model_name == MODELS[0] and length == LENGTHS[0]:
        made[PLAIN] = functools.partial(theirs, False)
    return made


def runners(model_name, sizes, vocab_size, paths, length, bfloat16, int8=True):
    """{impl: zero-argument callable returning the sequence output (B, T, D) float32, ours
    mx.np, 0.10's mx.nd} of one (model, T)."""
    return {name: make() for name, make in runner_factories(
        model_name, sizes, vocab_size, paths, length, bfloat16, int8).items()}


def _one_at_a_time(factories, rounds):
    """Median seconds by name, each implementation built, timed and freed in turn: BERT-large's
    static graphs at T=384 hold several GB each (built together with those of T=128 not yet
    freed, they took 20 GB and the process was killed for memory on a 24 GB machine)."""
    medians = {}
    for name, make in factories.items():
        medians.update(interleaved_medians({name: make()}, rounds))
        gc.collect()
    return medians


def _rows(model_name, length, medians, batch):
    return [dict(config=CONFIG, model=model_name, shape=[batch, length], mode='infer',
                 impl=impl, median_s=seconds, gflops=None, peak_mb=None,
                 throughput=batch / seconds, unit='features/s', isa=isa_of(impl),
                 ratio={REFERENCE: medians[REFERENCE] / seconds} if impl != REFERENCE else {},
                 answers_kept=None, f1=None)
            for impl, seconds in medians.items()]


def bert_model_rows(rounds=2, large_long_rounds=None, models=MODELS, lengths=LENGTHS, sizes=None,
                    vocab_size=VOCAB_SIZE, int8=True, on_rows=None):
    """Rows of the ``bert_models`` configuration (see the module docstring).

    ``large_long_rounds``: timed rounds of BERT-large at T=384 (None: ``rounds`` - 1, at least
    1); ``sizes``: {zoo name: sizes} replacing the zoo's (tests); ``on_rows(rows)`` is called after
    each (model, T); ``int8``: whether the 0.10 INT8 rows run. ImportError without gluonnlp;
    RuntimeError when oneDNN does not fuse.
    """
    problem = bfloat16_problem()
    if problem is not None:
        print('bert_models: no ours_bfloat16 rows: {}'.format(problem))
    rows = []
    large_long_rounds = large_long_rounds or max(1, rounds - 1)
    for model_name in models:
        size = (sizes or {}).get(model_name) or {
            k: ARCHITECTURES[model_name][k] for k in _SIZE_KEYS}
        with tempfile.TemporaryDirectory() as folder:
            paths = gluonnlp_bert(model_name, size, vocab_size, folder)
            for length in lengths:
                made = runner_factories(model_name, size, vocab_size, paths, length,
                                        problem is None, int8)
                if model_name == MODELS[1] and length == LENGTHS[1]:
                    medians = _one_at_a_time(made, large_long_rounds)
                else:
                    medians = interleaved_medians({k: f() for k, f in made.items()}, rounds)
                rows += _rows(model_name, length, medians, BATCH)
                gc.collect()           # the graphs of this (model, T): reference cycles
                print('bert_models {} T={} done'.format(model_name, length), flush=True)
                if on_rows:
                    on_rows(rows)
    return rows


def bert_models_table(rows):
    """Markdown lines of the ``bert_models`` rows (empty when there are none)."""
    rows = [r for r in rows if r['config'] == CONFIG]
    if not rows:
        return []
    lines = ['', '| model | B x T | implementation | instruction set | median s | features/s '
             '| vs 0.10 + oneDNN fusion |', '|---|---|---|---|---:|---:|---:|']
    for row in rows:
        ratio = row['ratio'].get(REFERENCE)
        lines.append('| {} | {} x {} | {} | {} | {:.3f} | {:.2f} | {} |'.format(
            row['model'], row['shape'][0], row['shape'][1], row['impl'], row['isa'],
            row['median_s'], row['throughput'], '1.00x' if ratio is None else
            '%.2fx' % ratio))
    return lines
