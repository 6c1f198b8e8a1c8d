"""Fused multi-head attention: one C++ kernel (CPU, float32) instead of a chain of operators.

:func:`_fused_dot_attn` (the ``'fused'`` backend of :func:`gluon_attention.attention`)
computes the context of
:func:`~gluon_attention.core.functional.multi_head_dot_attn` with key-padding lengths, without ever
holding the (B, K, L_q, L_m) scores or weights: for each (batch, head), panels of query rows
meet blocks of keys with an online softmax over the valid keys only, the scores staying in a
per-thread buffer; the backward pass recomputes each block's weights from the saved
log-sum-exp (the FlashAttention scheme, Dao et al. 2022, arXiv:2205.14135). The matrix
products run on register tiles for the CPU's instruction set: AVX-512 (F/BW/DQ/VL) where the
CPU has it, AVX2/FMA otherwise, chosen once when the library loads (:func:`isa` says which;
``GA_FUSED_ISA=avx2`` forces the AVX2 path, e.g. to compare them). The work of a call
(``OMP_NUM_THREADS`` workers, else one per hardware thread) runs on the OpenMP thread pool of the
calling thread, the runtime MXNet's own oneDNN products use (one set of threads: none started
per call, none competing with the OpenMP workers that spin after each product);
``GA_THREAD_POOL=std``, read at each call, starts threads for the call instead (the same
numbers, bit for bit).

The kernel is an MXNet 1.9.1 *custom operator library* (``mx.library.load``), operator
``ga_fused_attention``, compiled from ``gluon_attention/core/csrc/`` (the operator, one kernel
file per instruction set, each with its own compiler flags) against the headers shipped in the
``mxnet`` wheel by ``make venv`` (``python -m gluon_attention fused-build``; see
:mod:`gluon_attention.core.fused_build`). Importing
:mod:`gluon_attention` loads it when it has been built; :func:`available` says whether it is.
Graphs exported with it name that operator: load them after ``import gluon_attention`` (or
``mx.library.load(gluon_attention.fused.library_path())``). The same library holds the
row-wise operators of :mod:`gluon_attention.core.fused_rowwise` (:data:`LIBRARY_OPS` lists
those a graph may name) and the AdamW update of :mod:`gluon_attention.core.fused_adamw`. Loading the library and probing the CPU: :mod:`gluon_attention.core.fused_library`
(re-exported here).

bfloat16: ``matmul_dtype='bfloat16'`` (``Kernels(attention='fused', matmul_dtype='bfloat16')``)
runs the forward pass's two products in bfloat16 on AMX tiles with float32 accumulation and a
float32 softmax, where :func:`amx_problem` is None (the CPU has AMX-BF16 and Linux granted this
process the tile state); the float32 kernel elsewhere. The backward pass is always float32.

Limits: CPU only, float32 inputs and outputs only, no dropout on the weights, key-padding lengths only (no general
mask, no edge scores); weights and raw scores are not returned. Everything else uses the
composed path. Precision: the backward pass rebuilds the weights as exp(score - log-sum-exp),
so with scores of magnitude S the gradients carry a relative error of about S * 6e-8 (float32
rounding of the difference). Measured against the float64 oracle on random inputs (both
instruction-set paths alike): about 6e-7 at ordinary scales, 1-2e-5 with the inputs scaled x30
(scores around 1e3) and 6-8e-4 of the largest gradient with them scaled x1000; the composed
path, which stores the weights, stays closer there. Underflow: exp results below 2^-126 are
rounded to subnormal numbers on both instruction-set paths (gradual underflow, as the float64
oracle rounded to float32); the kernel does not change the thread's MXCSR, so a caller that set
flush-to-zero gets zeros there, on both paths alike.

Glossary: B batch, K heads, L_q query length, L_m memory length, C_k / C_v per-head sizes.
"""
import math

import mxnet as mx

from .. import _checks
from .._deprecated import module_getattr
from . import layout as _layout
from ._ops import get_F
from .fused_build import build, library_path
from .fused_library import (ISA_ENV, LIBRARY_OPS, OP_NAME, _isa_problem,  # noqa: F401
                            amx_problem, available, bf16_convert_isa, cpu_features, isa,
                            load, load_error, refuse_off_cpu, runs_on)

__all__ = ['available', 'runs_on', 'library_path', 'build', 'load', 'load_error',
           'check_fused_inputs', 'refuse_off_cpu', 'isa', 'cpu_features', 'amx_problem',
           'bf16_convert_isa',
           'OP_NAME', 'LIBRARY_OPS', 'MATMUL_DTYPES']

#: The ``matmul_dtype`` choices of the kernel's two products.
MATMUL_DTYPES = ('float32', 'bfloat16')


def _resolve(option, attention_dropout=0.0, ctx=None):
    """The deprecated ``resolve``: a ``fused_attention`` option (True, False or 'auto') -> bool
    ('auto': as ``Kernels(attention='auto').resolve(ctx, attention_dropout)``)."""
    if isinstance(option, str) and option == 'auto':
        return not attention_dropout and runs_on(ctx)
    return _checks.check_bool('fused_attention', option)


def check_fused_inputs(query, key, value, valid_length=None, scaled=True,
                       query_head_units=None, layout='NKT', matmul_dtype='float32', **_):
    """The argument checks of :func:`_fused_dot_attn` (a fused ``MultiHeadAttentionCell`` runs
    them on its arrays too); nothing that needs values runs on symbols."""
    _checks.check_bool('scaled', scaled)
    _checks.check_choice('matmul_dtype', matmul_dtype, MATMUL_DTYPES)
    _checks.check_positive_int('query_head_units', query_head_units, allow_none=True)
    _layout.check_per_head_inputs(query, key, value, layout, valid_length=valid_length,
                                  query_head_units=query_head_units, scaled=scaled)
    if _checks.is_symbol(query):
        return
    for name, x in (('query', query), ('key', key), ('value', value)):
        if not isinstance(x, mx.np.ndarray):
            _checks.fail_type('{} must be an mx.np array (use .as_np_ndarray() on a legacy '
                              'mx.nd array)'.format(name), **{name: type(x).__name__})
        if x.dtype != 'float32':
            _checks.fail_type('{} must be float32 for the fused kernel (backend \'fused\'; '
                              "use backend='composed' or multi_head_dot_attn for other "
                              'dtypes)'.format(name),
                              **{name + '.dtype': str(x.dtype.__name__ if isinstance(
                                  x.dtype, type) else x.dtype)})
        refuse_off_cpu("the fused kernel (backend 'fused')", "use backend='composed' (or "
                       'multi_head_dot_attn) for arrays on other devices', **{name: x})

@_checks.validated_by(check_fused_inputs)
def _fused_dot_attn(query, key, value, valid_length=None, scaled=True, query_head_units=None,
                   layout='NKT', matmul_dtype='float32'):
    """Multi-head scaled dot-product attention in one fused kernel; returns the context only.

    The same numbers as ``multi_head_dot_attn(query, key, value, valid_length=valid_length,
    scaled=scaled, query_head_units=query_head_units, layout=layout)[0]`` (forward and
    gradients of query, key and value, within float32 rounding), without materialising the
    (B, K, L_q, L_m) scores or weights: memory O(B*K*L*C) plus a per-thread block buffer.

    Parameters
    ----------
    query : float32 (B, K, L_q, C_k) ``NKT`` | (B, L_q, K, C_k) ``NTK`` | (L_q, B, K, C_k) ``TNK``
    key : float32 (B, K, L_m, C_k) | (B, L_m, K, C_k) | (L_m, B, K, C_k)
    value : float32 (B, K, L_m, C_v) | (B, L_m, K, C_v) | (L_m, B, K, C_v)
    valid_length : integer (or integral float) array (B,) or (B, L_q), or None
        Query row i of sequence b attends memory positions j < valid_length[b] (or
        valid_length[b, i]); keys past it are never read. A length of 0 gives a zero context
        row with zero gradients. None: every key. Lengths, not a 0/1 mask: refused as by
        :func:`gluon_attention.multi_head_dot_attn`.
    scaled : bool
        Multiply the scores by 1/sqrt(``query_head_units``) (default: the query's C_k).
    query_head_units : int or None
        C_k for the scale; needed inside a graph only if C_k is not the query's last dimension.
    layout : {'NKT', 'NTK', 'TNK'}
    matmul_dtype : {'float32', 'bfloat16'}
        'bfloat16': the forward pass rounds query, key and value to bfloat16 and runs its two
        products (Q K^T, then the weights, rounded to bfloat16, times V) on AMX tiles with
        float32 accumulation, the softmax in float32, where :func:`amx_problem` is None; the
        float32 kernel elsewhere and for at most 4 query rows. Same masking (masked weights
        exactly 0, rows of length 0 zero); each context entry within about 2^-8 of the
        weighted sum of the value's magnitudes (the weights' rounding) of the float64 result
        on bfloat16-rounded inputs. The backward pass is the float32 kernel's, from the saved
        log-sum-exp and context of this forward pass.

    Returns
    -------
    context : float32 (B, L_q, K*C_v) for NKT/NTK, (L_q, B, K*C_v) for TNK; merged head-major.
        Empty when L_q = 0.

    Raises
    ------
    RuntimeError
        The kernel library is not built or not loadable (:func:`available` is False).
    TypeError
        An input that is not an ``mx.np`` float32 array, a non-bool ``scaled``.
    ValueError
        Bad layout, mismatched shapes, B = 0 or L_m = 0, a ``valid_length`` of the wrong
        shape or outside [0, L_m], a non-positive ``query_head_units`` or C_k, or a non-CPU
        context (imperatively, before the kernel runs).
    """
    if not load():
        raise RuntimeError(load_error())
    if query_head_units is None and not _checks.is_symbol(query):
        query_head_units = query.shape[-1]
    if scaled and query_head_units is None:
        _checks.fail('inside a graph, the fused kernel needs query_head_units for the scale',
                     query_head_units=None)
    scale = 1.0 / math.sqrt(query_head_units) if scaled else 1.0
    F = get_F(query)
    inputs = [query.as_nd_ndarray(), key.as_nd_ndarray(), value.as_nd_ndarray()]
    if valid_length is not None:          # (B,) or (B, L_q), read by the kernel as float32
        inputs.append(valid_length.astype('float32').as_nd_ndarray())
    attrs = {'matmul_dtype': matmul_dtype} if matmul_dtype != 'float32' else {}
    out = getattr(F, OP_NAME)(*inputs, layout=layout, scale=repr(float(scale)),
                              with_length=int(valid_length is not None), **attrs)
    return out[0].as_np_ndarray()



__getattr__ = module_getattr(__name__, {
    'fused_dot_attn': ("gluon_attention.attention(..., backend='fused')",
                       lambda: _fused_dot_attn),
    'resolve': ("Kernels(attention=...).resolve(ctx, attention_dropout).attention == 'fused'",
                lambda: _resolve)})
