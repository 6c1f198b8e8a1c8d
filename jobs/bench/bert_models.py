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
  ``MKLDNN_QUANTIZE`` pass as 0.10's own scripts do (:func:`~jobs.bench.gluonnlp010.quantize_010`:
  every dense layer and self-attention product, weights per output channel, 0.10's calibration
  collector), calibrated on two other random batches (see :func:`_int8_runner`);
* ``gluonnlp_0.10``: the 0.10 model hybridized without a backend, at BERT-base T=128 only;
* at BERT-base, given ``onnx`` (:mod:`~jobs.bench.bert_onnx`): ``ours_exported`` (our exported
  QA graph, encoder + conditional head under random heads), ``ours_int8`` (its ONNX file
  optimized and quantized as ``run_squad.py quantize`` does), ``onnxruntime_hf_optimized`` and
  ``onnxruntime_hf_int8`` (the Hugging Face ``BertModel`` export of the same weights and head,
  fused by ONNX Runtime's transformer optimizer, and quantized), on the same batch with a
  ``p_mask``.

Each (model, T) runs in a process of its own (:mod:`~jobs.bench.bert_worker`); its rows run
interleaved there (ours, ours_bfloat16, fused, plain, ours, ...), one warm-up round then
``rounds`` timed ones; BERT-large at T=384 runs one implementation at a time (its static graphs
hold several GB each) and fewer rounds; time = the median. Rows keep the whole-model keys of
:mod:`~jobs.bench.models` (``unit`` features/s) with ``ratio`` against the rows of
:data:`RATIO_PEERS` present in the same run, and add ``model`` (the zoo name) and ``isa`` (the
instruction set the products ran on: the CPU's vector level, VNNI for INT8 rows, AMX or not for
bfloat16 rows). The training step (``bert_models_train``, :mod:`~jobs.bench.bert_train`) and
the INT8 question answering (``bert_models_qa_int8``, :mod:`~jobs.bench.qa_int8`) give rows of
the same form, in the same table (:func:`bert_models_table`). Glossary: B batch, T sequence
length, V vocabulary size.
"""
import functools
import gc
import json
import os
import subprocess
import sys
import tempfile

import mxnet as mx
import numpy as onp

from gluon_attention.convert import ARCHITECTURES
from gluon_attention.core.kernels import Kernels
from gluon_attention.hardware import amx_in_use, cpu_flags
from gluon_attention.models.encoder import BertEncoder

from .attention import interleaved_medians
from .gluonnlp010 import (FUSED_OPS, SIZE_KEYS, fuse_010, gluonnlp_bert, legacy, legacy_runner,
                          load_010, nd_inputs, quantize_010)

__all__ = ['CONFIG', 'MODELS', 'LENGTHS', 'REFERENCE', 'PLAIN', 'INT8', 'HF_FUSED', 'FUSED_OPS',
           'RATIO_PEERS', 'ROWS_LINE', 'ROOT', 'gluonnlp_bert', 'bert_inputs', 'isa_of',
           'runner_factories', 'runners', 'shape_medians', 'rows_of', 'run_worker',
           'bert_model_rows', 'bert_models_table']

CONFIG = 'bert_models'
MODELS = ('bert_12_768_12', 'bert_24_1024_16')
LENGTHS = (128, 384)
BATCH, VOCAB_SIZE = 8, 30522
REFERENCE = 'gluonnlp_0.10_onednn'
PLAIN = 'gluonnlp_0.10'
INT8 = 'gluonnlp_0.10_int8'
HF_FUSED = 'onnxruntime_hf_optimized'
# the rows every row is compared with, where they ran beside it
RATIO_PEERS = (REFERENCE, PLAIN, INT8, HF_FUSED)
ROWS_LINE = 'bert_models rows: '       # how jobs.bench.bert_worker prints its rows
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


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


def _gluonnlp_runner(model_name, sizes, vocab_size, params, inputs, fused):
    """0.10's model loaded from ``params``, fused by oneDNN (``fused``) or plainly hybridized."""
    net = load_010(model_name, sizes, vocab_size, params)
    arrays = nd_inputs(inputs)
    if fused:
        fuse_010(net, arrays)
    else:
        with legacy():
            net.hybridize(static_alloc=True, static_shape=True)
    return legacy_runner(net, arrays)


def _int8_runner(model_name, sizes, vocab_size, params, inputs, calibration_batches=2):
    """0.10's model quantized by :func:`~jobs.bench.gluonnlp010.quantize_010`, calibrated on
    ``calibration_batches`` other random batches of the same shape."""
    calibration = [onp.concatenate(x) for x in zip(*[
        bert_inputs(inputs[0].shape[1], vocab_size, seed=1 + i, batch=len(inputs[0]))
        for i in range(calibration_batches)])]
    quantized, _ = quantize_010(load_010(model_name, sizes, vocab_size, params), calibration,
                                len(inputs[0]))
    return legacy_runner(quantized, nd_inputs(inputs))


def isa_of(impl):
    """The instruction set the products of row ``impl`` run on (from /proc/cpuinfo and
    :func:`gluon_attention.hardware.amx_in_use`, which decides for MXNet's oneDNN; PyTorch's
    oneDNN uses AMX wherever the CPU has it)."""
    flags = cpu_flags()
    vector = 'avx512' if 'avx512f' in flags else 'avx2' if 'avx2' in flags else 'sse'
    if 'int8' in impl:
        return vector + ('+vnni' if 'avx512_vnni' in flags else '') + (
            ' (amx allowed)' if impl == INT8 and amx_in_use() else '')
    if impl.endswith('bfloat16'):
        if amx_in_use() if not impl.startswith('torch') else 'amx_bf16' in flags:
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


def shape_medians(factories, rounds, one_at_a_time=False):
    """{impl: median seconds} of the runners the ``factories`` make: built together and timed
    interleaved, or (``one_at_a_time``) built, timed and freed in turn."""
    if one_at_a_time:
        return _one_at_a_time(factories, rounds)
    return interleaved_medians({name: make() for name, make in factories.items()}, rounds)


def rows_of(config, model_name, shape, mode, medians, amount, unit, quality=None):
    """The rows of one shape from {impl: median seconds}: ``amount`` features or questions per
    timed call, ratios against the :data:`RATIO_PEERS` present, ``quality`` {impl: (answers
    kept, F1)} where measured."""
    quality = quality or {}
    return [dict(config=config, model=model_name, shape=list(shape), mode=mode, impl=impl,
                 median_s=seconds, gflops=None, peak_mb=None, throughput=amount / seconds,
                 unit=unit, isa=isa_of(impl),
                 ratio={p: medians[p] / seconds for p in RATIO_PEERS
                        if p in medians and p != impl},
                 answers_kept=quality.get(impl, (None, None))[0],
                 f1=quality.get(impl, (None, None))[1])
            for impl, seconds in medians.items()]


def run_worker(spec):
    """The rows of the (model, T) of ``spec`` (a dict: ``model``, ``size``, ``vocab_size``,
    ``folder``, ``length``, ``rounds``, ``int8``, ``onnx``, ``one_at_a_time``), timed in a child
    process (``python -m jobs.bench.bert_worker SPEC``, from the repository root); its other
    printed lines are printed here. RuntimeError when it fails."""
    done = subprocess.run([sys.executable, '-m', 'jobs.bench.bert_worker', json.dumps(spec)],
                          cwd=ROOT, capture_output=True, text=True)
    lines = done.stdout.splitlines()
    rows = [json.loads(line[len(ROWS_LINE):]) for line in lines if line.startswith(ROWS_LINE)]
    for line in lines:
        if not line.startswith(ROWS_LINE):
            print(line, flush=True)
    if done.returncode or not rows:
        raise RuntimeError('bert_models {} T={} failed (exit status {}): {}'.format(
            spec['model'], spec['length'], done.returncode, done.stderr[-1500:]))
    return rows[-1]


def bert_model_rows(rounds=2, large_long_rounds=None, models=MODELS, lengths=LENGTHS, sizes=None,
                    vocab_size=VOCAB_SIZE, int8=True, on_rows=None, onnx=None):
    """Rows of the ``bert_models`` configuration (see the module docstring), each (model, T)
    timed in a process of its own (:func:`run_worker`; the two lengths
    of a model share its converted weights).

    ``large_long_rounds``: timed rounds of BERT-large at T=384 (None: ``rounds`` - 1, at least
    1); ``sizes``: {zoo name: sizes} replacing the zoo's (tests); ``on_rows(rows)`` is called after
    each (model, T); ``int8``: whether the 0.10 INT8 rows run; ``onnx``: None, or the keyword
    arguments of :func:`jobs.bench.bert_onnx.onnx_factories` after the first four (``threads``,
    ``torch_python``, ``peer_script``) for the exported and ONNX Runtime rows at BERT-base.
    RuntimeError when a process fails (its error output quoted).
    """
    rows = []
    for model_name in models:
        size = (sizes or {}).get(model_name) or {
            k: ARCHITECTURES[model_name][k] for k in SIZE_KEYS}
        with tempfile.TemporaryDirectory(prefix='ga-bert-models') as folder:
            for length in lengths:
                long_large = model_name == MODELS[1] and length == LENGTHS[1]
                rows += run_worker(dict(
                    model=model_name, size=size, vocab_size=vocab_size, folder=folder,
                    length=length, int8=int8, onnx=onnx, one_at_a_time=long_large,
                    rounds=(large_long_rounds or max(1, rounds - 1)) if long_large else rounds))
                if on_rows:
                    on_rows(rows)
    return rows


CONFIGS = (CONFIG, 'bert_models_train', 'bert_models_qa_int8')
_TITLES = ('vs 0.10 float32', 'vs 0.10 INT8', 'vs ORT HF fused')


def bert_models_table(rows):
    """Markdown lines of the rows of :data:`CONFIGS` (empty when there are none)."""
    rows = [r for r in rows if r['config'] in CONFIGS]
    if not rows:
        return []
    lines = ['', '| model | mode | B x T | implementation | instruction set | median s | '
             'throughput | ' + ' | '.join(_TITLES) + ' | answers kept | F1 |',
             '|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|']
    for row in rows:
        ratio = row['ratio']
        ratios = [ratio.get(REFERENCE, ratio.get(PLAIN)), ratio.get(INT8), ratio.get(HF_FUSED)]
        kept, f1 = row.get('answers_kept'), row.get('f1')
        cells = [row['model'], row['mode'], '{} x {}'.format(*row['shape']), row['impl'],
                 row['isa'], '%.3f' % row['median_s'],
                 '%.2f %s' % (row['throughput'], row['unit'])]
        cells += ['-' if r is None else '%.2fx' % r for r in ratios]
        cells += ['-' if kept is None else '%.1f%%' % (100 * kept),
                  '-' if f1 is None else '%.2f' % f1]
        lines.append('| ' + ' | '.join(cells) + ' |')
    return lines
