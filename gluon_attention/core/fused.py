"""Fused multi-head attention: one C++ kernel (CPU, float32) instead of a chain of operators.

:func:`fused_dot_attn` computes the context of
:func:`~gluon_attention.core.functional.multi_head_dot_attn` with key-padding lengths, without ever
holding the (B, K, L_q, L_m) scores or weights: for each (batch, head), panels of query rows
meet blocks of keys with an online softmax over the valid keys only, the scores staying in a
per-thread buffer; the backward pass recomputes each block's weights from the saved
log-sum-exp (the FlashAttention scheme, Dao et al. 2022, arXiv:2205.14135). The matrix
products run on register tiles for the CPU's instruction set: AVX-512 (F/BW/DQ/VL) where the
CPU has it, AVX2/FMA otherwise, chosen once when the library loads (:func:`isa` says which;
``GA_FUSED_ISA=avx2`` forces the AVX2 path, e.g. to compare them).

The kernel is an MXNet 1.9.1 *custom operator library* (``mx.library.load``), operator
``ga_fused_attention``, compiled from ``gluon_attention/core/csrc/`` (the operator, one kernel
file per instruction set, each with its own compiler flags) against the headers shipped in the
``mxnet`` wheel by ``make venv`` (``python -m gluon_attention fused-build``; see
:mod:`gluon_attention.core.fused_build`). Importing
:mod:`gluon_attention` loads it when it has been built; :func:`available` says whether it is.
Graphs exported with it name that operator: load them after ``import gluon_attention`` (or
``mx.library.load(gluon_attention.fused.library_path())``). The same library holds the
row-wise operators of :mod:`gluon_attention.core.fused_rowwise` (:data:`LIBRARY_OPS` lists
them all).

Limits: CPU only, float32 only, no dropout on the weights, key-padding lengths only (no general
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
import ctypes
import math
import os

import mxnet as mx

from .. import _checks
from . import layout as _layout
from ._ops import get_F
from .fused_build import build, library_path

__all__ = ['fused_dot_attn', 'available', 'library_path', 'build', 'load', 'load_error',
           'resolve', 'check_fused_inputs', 'refuse_off_cpu', 'isa', 'cpu_features',
           'LIBRARY_OPS']

OP_NAME = 'ga_fused_attention'
# Every operator of the library (the row-wise ones: gluon_attention.core.fused_rowwise); a graph
# naming any of them needs the library loaded before it is read.
LIBRARY_OPS = (OP_NAME, 'ga_add_layer_norm', 'ga_bias_gelu')
ISA_ENV = 'GA_FUSED_ISA'
_ISA_CHOICES = ('auto', 'avx512', 'avx2')
_STATE = {'loaded': False, 'error': None}


def _query(path):
    """(kernels chosen, CPU instruction sets) from the library, through ctypes."""
    lib = ctypes.CDLL(str(path))
    for name in ('ga_fused_isa', 'ga_fused_cpu_features'):
        getattr(lib, name).restype = ctypes.c_char_p
    return lib.ga_fused_isa().decode(), lib.ga_fused_cpu_features().decode()


def _isa_problem(chosen, features):
    """Why the kernels cannot run here (None when they can)."""
    wanted = os.environ.get(ISA_ENV, '') or 'auto'
    if wanted not in _ISA_CHOICES:
        return '{} must be one of {}. Received: {}={!r}'.format(
            ISA_ENV, ', '.join(_ISA_CHOICES), ISA_ENV, wanted)
    if not chosen:
        return ('the fused attention kernel needs a CPU with AVX2 and FMA{} (this one has: {}). '
                'Received: {}={}'.format(', and AVX-512 F/BW/DQ/VL for avx512'
                                         if wanted == 'avx512' else '',
                                         features or 'none of them', ISA_ENV, wanted))
    return None


def load():
    """Load the kernel library into MXNet once; returns True when the operator is usable.

    The instruction set is chosen here, once per process: AVX-512 where the CPU has it, else
    AVX2/FMA; ``GA_FUSED_ISA=avx2`` (or ``avx512``) forces one. Never raises: when the library
    is missing (not built) or cannot be loaded, returns False and :func:`load_error` says why.
    """
    if _STATE['loaded']:
        return True
    path = library_path()
    if not path.exists():
        _STATE['error'] = ('the fused attention kernel is not built: run `make venv` or '
                           '`python -m gluon_attention fused-build`')
        return False
    try:
        chosen, features = _query(path)
    except (OSError, AttributeError) as err:
        _STATE['error'] = 'loading {} failed: {}'.format(path, err)
        return False
    problem = _isa_problem(chosen, features)
    if problem:
        _STATE['error'] = problem
        return False
    try:
        mx.library.load(str(path), verbose=False)
    except mx.base.MXNetError as err:
        _STATE['error'] = 'loading {} failed: {}'.format(path, str(err).splitlines()[0])
        return False
    _STATE.update(loaded=True, error=None, isa=chosen, features=features)
    return True


def isa():
    """The instruction set the kernel runs on: ``'avx512'`` or ``'avx2'`` (None when it is not
    loadable, see :func:`load_error`). Chosen once per process, when the library is loaded."""
    return _STATE['isa'] if load() else None


def cpu_features():
    """The instruction sets relevant to the kernel that this CPU has (avx2, fma, avx512f, ...,
    amx-tile), as the loaded library found them; None when it is not loadable."""
    return _STATE['features'] if load() else None


def load_error():
    """Why :func:`load` returned False (None when the kernel is loaded)."""
    return _STATE['error']


def available():
    """Whether :func:`fused_dot_attn` can run here (library built and loadable)."""
    return load()


def resolve(option, attention_dropout=0.0, ctx=None):
    """A ``fused_attention`` option (True, False or 'auto') -> bool.

    'auto' is True when the kernel is available, ``attention_dropout`` is 0 and ``ctx`` (a
    Context or a list of them; default the current context) is a CPU.
    """
    if isinstance(option, str) and option == 'auto':
        if ctx is None:
            ctx = mx.context.current_context()
        contexts = ctx if isinstance(ctx, (list, tuple)) else [ctx]
        return (not attention_dropout and all(c.device_type == 'cpu' for c in contexts)
                and available())
    return _checks.check_bool('fused_attention', option)


def check_fused_inputs(query, key, value, valid_length=None, scaled=True,
                       query_head_units=None, layout='NKT', **_):
    """The argument checks of :func:`fused_dot_attn` (a fused ``MultiHeadAttentionCell`` runs
    them on its arrays too); nothing that needs values runs on symbols."""
    _checks.check_bool('scaled', scaled)
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


def refuse_off_cpu(what, alternative, **arrays):
    """ValueError '<what> runs on CPU only: <alternative>' when one of the named ``arrays`` is
    an array on another device (symbols and None pass)."""
    for name, x in arrays.items():
        if isinstance(x, mx.nd.NDArray) and x.ctx.device_type != 'cpu':
            _checks.fail('{} runs on CPU only: {}'.format(what, alternative),
                         **{name + '.ctx': x.ctx})


@_checks.validated_by(check_fused_inputs)
def fused_dot_attn(query, key, value, valid_length=None, scaled=True, query_head_units=None,
                   layout='NKT'):
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
        _checks.fail('inside a graph, fused_dot_attn needs query_head_units for the scale',
                     query_head_units=None)
    scale = 1.0 / math.sqrt(query_head_units) if scaled else 1.0
    F = get_F(query)
    inputs = [query.as_nd_ndarray(), key.as_nd_ndarray(), value.as_nd_ndarray()]
    if valid_length is not None:          # (B,) or (B, L_q), read by the kernel as float32
        inputs.append(valid_length.astype('float32').as_nd_ndarray())
    out = getattr(F, OP_NAME)(*inputs, layout=layout, scale=repr(float(scale)),
                              with_length=int(valid_length is not None))
    return out[0].as_np_ndarray()

