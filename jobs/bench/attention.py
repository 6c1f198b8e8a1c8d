"""Benchmark helpers for ``scripts/benchmark.py``: configurations, implementations, timing.

Every implementation is a zero-argument callable running one forward (``mode='fwd'``) or one
forward+backward (``'fwdbwd'``) pass to completion. Inputs are float32 with a valid-length
mask leaving some padding. Glossary: B batch, K heads, L_q / L_m lengths, C per-head size.
"""
import os
import statistics
import time

import mxnet as mx
import numpy as onp
from mxnet import autograd, np, npx

from gluon_attention.core import fused
from gluon_attention.core.backends import attention
from gluon_attention.core.cells import MultiHeadAttentionCell
from gluon_attention.core.functional import multi_head_dot_attn
from gluon_attention.core.kernels import Kernels
from gluon_attention.core.matmul import bfloat16_problem

__all__ = ['CONFIGS', 'LONG_CONFIGS', 'attention_gflop', 'make_inputs', 'factories',
           'implementations',
           'gemm_limit_gflops', 'interleaved_medians', 'peak_memory_bytes']

# name: (B, K, L_q, L_m, C)
CONFIGS = {'bert128': (8, 12, 128, 128, 64), 'bert384': (8, 12, 384, 384, 64),
           'long2048': (1, 12, 2048, 2048, 64), 'long4096': (1, 12, 4096, 4096, 64),
           'decode': (32, 8, 1, 512, 64)}
LONG_CONFIGS = ('long2048', 'long4096')
# Rows timed one implementation at a time (not interleaved): their static graphs (3-8 GB each
# at long4096) do not fit together in 24 GB.
ONE_AT_A_TIME = {('long4096', 'fwd'), ('long4096', 'fwdbwd')}
CHUNK_SIZE = 512


def attention_gflop(config, mode):
    """4*B*K*L_q*L_m*C for the forward pass (two GEMMs), three times that with the backward."""
    b, k, lq, lm, c = CONFIGS[config]
    return 4e-9 * b * k * lq * lm * c * (3 if mode == 'fwdbwd' else 1)


def valid_lengths(config):
    """Memory lengths (B,): every other sequence loses an eighth of L_m to padding."""
    b, _, _, lm, _ = CONFIGS[config]
    return onp.array([lm - (lm // 8) * (i % 2) for i in range(b)], dtype='int32')


def make_inputs(config, seed=0):
    """(query, key, value) in NKT as numpy float32, and the (B,) valid lengths."""
    b, k, lq, lm, c = CONFIGS[config]
    rng = onp.random.RandomState(seed)
    q, key, v = (rng.normal(size=s).astype('float32') for s in
                 ((b, k, lq, c), (b, k, lm, c), (b, k, lm, c)))
    return q, key, v, valid_lengths(config)


def _run(func, inputs, mode):
    """One pass of ``func(*inputs)`` (its first output), waited for; backward with ones."""
    if mode == 'fwd':
        out = func(*inputs)
        out = out[0] if isinstance(out, (list, tuple)) else out
        out.wait_to_read()
        return
    with autograd.record():
        out = func(*inputs)
        out = out[0] if isinstance(out, (list, tuple)) else out
    out.backward()
    mx.nd.waitall()


def _ours(config, mode, layout=None, chunked=False, lengths_input=False, fused_kernel=False,
          matmul_dtype='float32'):
    q, k, v, lengths = make_inputs(config)
    perm = {'NKT': (0, 1, 2, 3), 'NTK': (0, 2, 1, 3), 'TNK': (2, 0, 1, 3)}[layout or 'NKT']
    q, k, v = (np.array(x.transpose(perm).copy()) for x in (q, k, v))
    for x in (q, k, v):
        x.attach_grad()
    lm = CONFIGS[config][3]
    mask = np.array(onp.arange(lm)[None, None, :] < lengths[:, None, None])   # (B, 1, L_m)
    if chunked:
        vl = np.array(lengths)
        return lambda: _run(lambda *t: attention(*t, valid_length=vl, chunk_size=CHUNK_SIZE,
                                                 backend='chunked')[0], (q, k, v), mode)
    if layout is None:
        return lambda: _run(lambda *t: multi_head_dot_attn(*t, mask)[0], (q, k, v), mode)
    heads, units = CONFIGS[config][1], CONFIGS[config][1] * CONFIGS[config][4]
    cell = MultiHeadAttentionCell(units, heads, layout=layout, kernels=Kernels(
        'fused' if fused_kernel else 'composed', matmul_dtype=matmul_dtype))
    cell.hybridize(static_alloc=True, static_shape=True)
    if lengths_input or fused_kernel:    # the same key padding given as (B,) valid lengths
        vl = np.array(lengths, dtype='int32')
        return lambda: _run(lambda *t: cell(*t, None, None, vl), (q, k, v), mode)
    return lambda: _run(cell, (q, k, v, mask), mode)


def _nkt_arrays(config):
    """(query, key, value) as NKT mx.np arrays with gradients attached."""
    arrays = [np.array(x) for x in make_inputs(config)[:3]]
    for x in arrays:
        x.attach_grad()
    return arrays


def _batch_dot_ceiling(config, mode):
    """The two attention GEMMs alone (no scaling, masking or softmax)."""
    q, k, v = _nkt_arrays(config)

    def two_gemms(q, k, v):
        return npx.batch_dot(npx.batch_dot(q, k, transpose_b=True), v)
    return lambda: _run(two_gemms, (q, k, v), mode)


def _softmax_floor(config, mode):
    """The two GEMMs with the (oneDNN) softmax between them: no scale, no mask, no other
    output. What any exact composition of MXNet operators must at least spend."""
    q, k, v = _nkt_arrays(config)

    def floor(q, k, v):
        return npx.batch_dot(npx.softmax(npx.batch_dot(q, k, transpose_b=True), axis=-1), v)
    return lambda: _run(floor, (q, k, v), mode)


def _gluonnlp(config, mode, multi_head):
    from gluonnlp.model import attention_cell  # optional peer
    b, heads, lq, lm, c = CONFIGS[config]
    q, k, v, lengths = make_inputs(config)
    with mx.util.np_array(False), mx.util.np_shape(False):
        mask = (onp.arange(lm)[None, None, :] < lengths[:, None, None]) * onp.ones((1, lq, 1))
        if multi_head:        # (B, L, K*C) inputs; the cell adds its own q/k/v projections
            q, k, v = (x.transpose(0, 2, 1, 3).reshape(b, -1, heads * c) for x in (q, k, v))
            cell = attention_cell.MultiHeadAttentionCell(
                attention_cell.DotProductAttentionCell(scaled=True), heads * c, heads * c,
                heads * c, heads)
        else:                 # heads folded into the batch: (B*K, L, C)
            q, k, v = (x.reshape(b * heads, -1, c) for x in (q, k, v))
            mask = onp.repeat(mask, heads, axis=0)
            cell = attention_cell.DotProductAttentionCell(scaled=True)
        cell.initialize()
        cell.hybridize(static_alloc=True, static_shape=True)
        arrays = [mx.nd.array(x) for x in (q, k, v, mask.astype('float32'))]
        for x in arrays[:3]:
            x.attach_grad()

    def step():
        with mx.util.np_array(False), mx.util.np_shape(False):
            _run(cell, arrays, mode)
    return step


def factories(config, mode, gluonnlp=True):
    """{name: factory}; each factory builds inputs and returns the zero-argument callable."""
    made = {}
    # The long configurations keep one layout (the layouts measured alike at bert384) so that
    # a full run with a separate memory process per row stays under an hour on 2 cores.
    long = config in LONG_CONFIGS
    if not long:
        made['ours_fn_NKT'] = lambda: _ours(config, mode)
    for layout in ('NKT',) if long else ('NKT', 'NTK', 'TNK'):
        made['ours_cell_' + layout] = lambda layout=layout: _ours(config, mode, layout)
        made['ours_cell_%s_vl' % layout] = lambda layout=layout: _ours(
            config, mode, layout, lengths_input=True)
    if fused.available():     # the fused kernel: hybridized cell, (B,) lengths
        for layout in ('NKT',) if long else ('NKT', 'NTK', 'TNK'):
            made['ours_fused_' + layout] = lambda layout=layout: _ours(
                config, mode, layout, fused_kernel=True)
        if bfloat16_problem() is None:   # forward on AMX tiles where fused.amx_problem() is None
            made['ours_fused_bfloat16_NKT'] = lambda: _ours(
                config, mode, 'NKT', fused_kernel=True, matmul_dtype='bfloat16')
    if long:
        made['ours_chunked%d' % CHUNK_SIZE] = lambda: _ours(config, mode, chunked=True)
    if gluonnlp:
        made['gluonnlp_dot'] = lambda: _gluonnlp(config, mode, multi_head=False)
        made['gluonnlp_mh+proj'] = lambda: _gluonnlp(config, mode, multi_head=True)
    made['batch_dot_ceiling'] = lambda: _batch_dot_ceiling(config, mode)
    made['gemm_softmax_floor'] = lambda: _softmax_floor(config, mode)
    return made


def implementations(config, mode, gluonnlp=True):
    """{name: zero-argument callable} for the MXNet-side implementations of one row."""
    return {name: make() for name, make in factories(config, mode, gluonnlp).items()}


def gemm_limit_gflops(size=4096, repeats=5):
    """Median GFLOP/s of one ``npx.fully_connected`` size x size GEMM (oneDNN sgemm)."""
    rng = onp.random.RandomState(0)
    x, w = (np.array(rng.normal(size=(size, size)).astype('float32')) for _ in range(2))

    def gemm():
        npx.fully_connected(x, w, num_hidden=size, no_bias=True).wait_to_read()
    gemm()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        gemm()
        times.append(time.perf_counter() - start)
    return 2e-9 * size ** 3 / statistics.median(times)


def interleaved_medians(impls, repeats, external=None, warmup=1):
    """Run A B C ... A B C ..., ``repeats`` rounds after ``warmup``; median seconds per name.

    ``external`` maps names to callables returning their own measured seconds (another
    process, e.g. PyTorch), interleaved in the same rounds.
    """
    external = external or {}
    times = {name: [] for name in list(impls) + list(external)}
    for round_ in range(warmup + repeats):
        for name, func in impls.items():
            start = time.perf_counter()
            func()
            if round_ >= warmup:
                times[name].append(time.perf_counter() - start)
        for name, func in external.items():
            seconds = func()
            if round_ >= warmup and seconds is not None:
                times[name].append(seconds)
    return {name: statistics.median(t) for name, t in times.items() if t}


def _status_bytes(field):
    """``VmRSS`` or ``VmHWM`` (peak RSS of this process image; unlike ``ru_maxrss`` it is not
    inherited from the parent across fork + exec) from /proc/self/status, in bytes."""
    with open('/proc/self/status') as status:
        for line in status:
            if line.startswith(field + ':'):
                return int(line.split()[1]) * 1024
    raise RuntimeError('no {} in /proc/self/status'.format(field))


def peak_memory_bytes(name, config, mode):
    """Peak RSS growth (bytes) of one pass of implementation ``name``, in this process.

    Run it in a fresh process per implementation: the high-water mark is process-wide.
    """
    func = factories(config, mode, gluonnlp=name.startswith('gluonnlp'))[name]()
    mx.nd.waitall()
    before = _status_bytes('VmRSS')
    func()
    return _status_bytes('VmHWM') - before
