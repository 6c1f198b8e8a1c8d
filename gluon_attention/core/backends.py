"""Attention backends: three interchangeable implementations of multi-head dot-product attention
behind one public function, :func:`attention`, with one signature and one return structure;
blocks choose one once, when they are built (:class:`~gluon_attention.core.kernels.Kernels`).

:func:`attention` is ::

    attention(query, key, value, mask=None, edge_scores=None, valid_length=None, dropout=0.0,
              scaled=True, normalized=False, eps=1e-6, query_head_units=None, layout='NKT',
              use_einsum=False, chunk_size=512, backend='composed') -> (context, weights or None)

with the arguments and the context of :func:`~gluon_attention.core.functional.
multi_head_dot_attn`; ``weights`` are the (B, K, L_q, L_m) attention weights (after dropout)
where the backend holds them whole, ``None`` where it never does. The backends (private
functions of the same signature, without ``backend``):

- ``'composed'``: MXNet operators, any device and float dtype, masks, edge scores, lengths (no
  mask tensor built from them), attention dropout; returns the weights. The raw scores of
  :func:`~gluon_attention.core.functional.multi_head_dot_attn` are not built.
- ``'fused'``: the C++ kernel of :mod:`gluon_attention.core.fused` (CPU, float32, key padding
  as ``valid_length`` only, no dropout); weights ``None``.
- ``'chunked'``: the composed operators ``chunk_size`` query rows at a time, imperatively
  only; masks and lengths, no edge scores or dropout; weights ``None``.

``use_einsum`` only changes how ``'composed'`` multiplies and ``chunk_size`` only applies to
``'chunked'``; the other backends ignore them.

**A call a backend cannot serve raises ValueError** naming the backend and the one to use
instead (no silent fallback, no second graph): a ``mask`` or ``edge_scores`` given to
``'fused'``, ``edge_scores`` given to ``'chunked'``, ``dropout`` > 0 for either, arrays off the
CPU or not float32 for ``'fused'`` (TypeError for the dtype), symbols (a graph) for
``'chunked'``. Blocks refuse the construction-time cases (dropout, a missing kernel library) when
they are built.

**'auto'** is a choice of the blocks (``Kernels(attention='auto')``), resolved once, where a
block is built, by :meth:`gluon_attention.Kernels.resolve`; :func:`attention` takes a backend
by name.

Deprecated names (DeprecationWarning, removed in the next release): ``composed_attn``,
``fused_attn``, ``chunked_attn`` and ``get_backend(name)`` (use ``attention(...,
backend=name)``), ``attend_in_chunks`` (``attention(..., backend='chunked')``),
``resolve_backend`` (``Kernels(attention=...).resolve(...)``).

Glossary: B batch, K heads, L_q query length, L_m memory length, C_k / C_v per-head sizes.
"""
import functools

import mxnet as mx

from .. import _checks
from .._deprecated import module_getattr

from . import fused as _fused, layout as _layout
from ._ops import float32_on_cpu
from .functional import _compose_attention, inverse_sqrt_units, l2_normalize

__all__ = ['BACKENDS', 'attention', 'check_backend_call']

BACKENDS = ('composed', 'fused', 'chunked')
_TIME_AXIS = {'NKT': 2, 'NTK': 1, 'TNK': 0}


def _resolve_backend(backend, attention_dropout=0.0, ctx=None):
    """The deprecated ``resolve_backend``: as ``Kernels(attention=backend).resolve(ctx,
    attention_dropout).attention``."""
    _checks.check_choice('backend', backend, ('auto',) + BACKENDS)
    if backend == 'auto':
        return 'fused' if not attention_dropout and _fused.runs_on(ctx) else 'composed'
    if backend != 'composed' and attention_dropout:
        _checks.fail("backend '{}' has no attention dropout: use backend='composed' or "
                     'attention_dropout=0'.format(backend), attention_dropout=attention_dropout)
    if backend == 'fused' and not _fused.available():
        raise RuntimeError(_fused.load_error())
    return backend


def _get_backend(name, matmul_dtype='float32'):
    """The function of backend ``name`` (one of :data:`BACKENDS`); ValueError otherwise.
    ``matmul_dtype='bfloat16'`` binds it into the 'fused' backend (its forward pass on AMX
    tiles where they can run, see :func:`_fused_backend`); the other backends ignore it."""
    function = _IMPLEMENTATIONS[_checks.check_choice('backend', name, BACKENDS)]
    if name == 'fused' and matmul_dtype != 'float32':
        return functools.partial(function, matmul_dtype=matmul_dtype)
    return function


def _refuse(backend, what, alternative, **received):
    _checks.fail("backend '{}' cannot take {}: use {}".format(backend, what, alternative),
                 **received)


def _given(x):
    return None if x is None else ('Symbol' if _checks.is_symbol(x) else x.shape)


def check_backend_call(backend, query, mask=None, edge_scores=None, dropout=0.0):
    """Refuse a call ``backend`` cannot serve (the cases listed in the module docstring that
    need no values); works on arrays and symbols. The device and dtype checks of 'fused' are
    :func:`gluon_attention.core.fused.check_fused_inputs`'."""
    if backend == 'composed':
        return
    if dropout:
        _refuse(backend, 'attention dropout', "backend='composed'", dropout=dropout)
    if edge_scores is not None:
        _refuse(backend, 'edge_scores', "backend='composed'", edge_scores=_given(edge_scores))
    if backend == 'fused' and mask is not None:
        _refuse(backend, 'a mask (key padding goes in valid_length)',
                "backend='composed' or 'chunked' for a mask", mask=_given(mask))
    if backend == 'chunked' and _checks.is_symbol(query):
        _refuse(backend, 'symbols: it slices L_q imperatively, outside any graph',
                "backend='composed' or 'fused' inside a hybridized block", query='Symbol')


def _checker(backend):
    def check(query, key, value, mask, edge_scores, valid_length, dropout, scaled,
              query_head_units, layout, chunk_size, **_):
        _checks.check_probability('dropout', dropout)
        check_backend_call(backend, query, mask, edge_scores, dropout)
        if backend == 'fused':
            _fused.check_fused_inputs(query, key, value, valid_length, scaled, query_head_units,
                                      layout)
            return
        if backend == 'chunked':
            _checks.check_positive_int('chunk_size', chunk_size)
        _layout.check_per_head_inputs(query, key, value, layout, mask, edge_scores, valid_length,
                                      query_head_units, scaled)
    return check


@_checks.validated_by(_checker('composed'))
@float32_on_cpu
def _composed(query, key, value, mask=None, edge_scores=None, valid_length=None, dropout=0.0,
                  scaled=True, normalized=False, eps=1e-6, query_head_units=None, layout='NKT',
                  use_einsum=False, chunk_size=512):
    """The ``'composed'`` backend: ``(context, weights)``, weights (B, K, L_q, L_m) after
    dropout, in the inputs' dtype. Arguments, shapes and errors: :func:`attention`;
    ``chunk_size`` is ignored."""
    del chunk_size
    context, _, weights = _compose_attention(
        query, key, value, mask, edge_scores, valid_length, dropout=dropout, scaled=scaled,
        normalized=normalized, eps=eps, query_head_units=query_head_units, layout=layout,
        use_einsum=use_einsum, with_scores=False)
    return context, weights


@_checks.validated_by(_checker('fused'))
def _fused_backend(query, key, value, mask=None, edge_scores=None, valid_length=None, dropout=0.0,
               scaled=True, normalized=False, eps=1e-6, query_head_units=None, layout='NKT',
               use_einsum=False, chunk_size=512, matmul_dtype='float32'):
    """The ``'fused'`` backend: ``(context, None)`` by the kernel of
    :mod:`gluon_attention.core.fused` (``matmul_dtype`` as there: 'bfloat16' runs the forward
    pass's products on AMX tiles where they can run; ``normalized`` L2-normalises query and
    key first). Inside a graph without ``query_head_units`` the scale 1/sqrt(C_k) is read from
    the query's shape and folded into it. Refuses what the module docstring lists (a ``mask``,
    ``edge_scores``, ``dropout``; off-CPU or non-float32 arrays); ``use_einsum`` and
    ``chunk_size`` are ignored."""
    del use_einsum, chunk_size
    check_backend_call('fused', query, mask, edge_scores, dropout)
    if normalized:
        query, key = l2_normalize(query, eps=eps), l2_normalize(key, eps=eps)
    if scaled and query_head_units is None and _checks.is_symbol(query):
        query, scaled = query * inverse_sqrt_units(query), False
    return _fused._fused_dot_attn(  # pylint: disable=protected-access
        query, key, value, valid_length, scaled=scaled, query_head_units=query_head_units,
        layout=layout, matmul_dtype=matmul_dtype), None


@_checks.validated_by(_checker('chunked'))
def _chunked(query, key, value, mask=None, edge_scores=None, valid_length=None, dropout=0.0,
                 scaled=True, normalized=False, eps=1e-6, query_head_units=None, layout='NKT',
                 use_einsum=False, chunk_size=512):
    """The ``'chunked'`` backend: ``(context, None)``, ``chunk_size`` query rows at a time
    (:func:`_attend_in_chunks`, checked), imperative only. Refuses ``edge_scores``,
    ``dropout`` and symbols (ValueError);
    ``use_einsum`` is ignored."""
    del use_einsum
    check_backend_call('chunked', query, mask, edge_scores, dropout)
    return _attend_in_chunks(query, key, value, mask, valid_length, chunk_size, scaled=scaled,
                             normalized=normalized, eps=eps, query_head_units=query_head_units,
                            layout=layout), None


@float32_on_cpu
def _attend_in_chunks(query, key, value, mask=None, valid_length=None, chunk_size=512,
                     synchronize=True, scaled=True, normalized=False, eps=1e-6,
                     query_head_units=None, layout='NKT'):
    """The composed attention ``chunk_size`` query rows at a time, concatenated (arrays only,
    unchecked): a (B, L_q, L_m) mask and (B, L_q) lengths are sliced with the query rows,
    (B, 1, L_m) masks and (B,) lengths apply to every chunk. ``synchronize`` waits for each
    chunk before issuing the next, so MXNet's asynchronous engine cannot hold the buffers of
    several chunks at once. Returns the context, as the 'composed' backend would."""
    time_axis = _TIME_AXIS[layout]
    length = query.shape[time_axis]
    if query_head_units is None:
        query_head_units = query.shape[-1]
    contexts = []
    for start in range(0, max(length, 1), chunk_size):     # one (empty) chunk when L_q = 0
        rows = slice(start, min(start + chunk_size, length))
        part = query[(slice(None),) * time_axis + (rows,)]                    # chunk of L_q
        part_mask = mask if mask is None or mask.shape[1] == 1 else mask[:, rows]
        part_length = valid_length
        if valid_length is not None and valid_length.ndim == 2:
            part_length = valid_length[:, rows]                               # (B, chunk)
        context = _compose_attention(part, key, value, part_mask, None, part_length, scaled=scaled,
                                    normalized=normalized, eps=eps,
                                    query_head_units=query_head_units, layout=layout,
                                    with_scores=False)[0]
        if synchronize:
            context.wait_to_read()
        contexts.append(context)
    return mx.np.concatenate(contexts, axis=0 if layout == 'TNK' else 1)


_IMPLEMENTATIONS = {'composed': _composed, 'fused': _fused_backend, 'chunked': _chunked}


def attention(query, key, value, mask=None, edge_scores=None, valid_length=None, dropout=0.0,
              scaled=True, normalized=False, eps=1e-6, query_head_units=None, layout='NKT',
              use_einsum=False, chunk_size=512, backend='composed'):
    """Multi-head dot-product attention by the chosen backend: ``(context, weights or None)``.

    The one attention function of the library (Vaswani et al. 2017, section 3.2.2; the fused
    backend follows the FlashAttention scheme of Dao et al. 2022). Equivalent computation::

        scores = (query @ key.T) / sqrt(C_k) + edge_scores       # per head, (B, K, L_q, L_m)
        weights = dropout(masked_softmax(scores, mask & (j < valid_length)))
        context = merge_heads(weights @ value)

    Parameters
    ----------
    query : float (B, K, L_q, C_k) ``NKT`` | (B, L_q, K, C_k) ``NTK`` | (L_q, B, K, C_k) ``TNK``
    key : float, as ``query`` with L_m
    value : float, as ``key`` with C_v
    mask : bool or 0/1 (B, L_q, L_m) or (B, 1, L_m), optional
        1 = attend. 'composed' and 'chunked' only.
    edge_scores : float, broadcastable to (B, K, L_q, L_m), optional
        Added to the raw scores (before the scale). 'composed' only.
    valid_length : integer (B,) or (B, L_q), optional
        Memory lengths: query row i of sequence b attends memory positions j < valid_length[b]
        (or [b, i]); never a 0/1 mask (refused).
    dropout : float in [0, 1)
        Dropout on the weights (training mode). 'composed' only.
    scaled, normalized, eps, query_head_units, layout, use_einsum
        As in :func:`gluon_attention.multi_head_dot_attn` (``use_einsum``: 'composed' only).
    chunk_size : int
        Query rows per chunk ('chunked' only).
    backend : {'composed', 'fused', 'chunked'}
        'composed': MXNet operators (any device, float dtype, mask, edge scores, dropout);
        'fused': the C++ kernel (CPU, float32, ``valid_length`` only; no (B, K, L_q, L_m)
        tensor in either pass); 'chunked': the composed operators ``chunk_size`` query rows
        at a time, imperatively only.

    Returns
    -------
    context : (B, L_q, K*C_v) for NKT/NTK, (L_q, B, K*C_v) for TNK, the inputs' dtype
    weights : (B, K, L_q, L_m) after dropout with 'composed'; None with 'fused', 'chunked'

    Raises
    ------
    ValueError
        An unknown ``backend``; a call the backend cannot serve (module docstring: a mask or
        edge scores for 'fused', edge scores for 'chunked', dropout for either, arrays off the
        CPU for 'fused', symbols for 'chunked'), never a silent switch; bad shapes or lengths
        as :func:`gluon_attention.multi_head_dot_attn`.
    TypeError
        Non-float inputs; not float32 for 'fused'.
    RuntimeError
        'fused' and the kernel library is not built or not loadable.
    """
    implementation = _IMPLEMENTATIONS[_checks.check_choice('backend', backend, BACKENDS)]
    return implementation(query, key, value, mask, edge_scores, valid_length, dropout, scaled,
                          normalized, eps, query_head_units, layout, use_einsum, chunk_size)


__getattr__ = module_getattr(__name__, {
    'composed_attn': ("attention(..., backend='composed')", lambda: _composed),
    'fused_attn': ("attention(..., backend='fused')", lambda: _fused_backend),
    'chunked_attn': ("attention(..., backend='chunked')", lambda: _chunked),
    'attend_in_chunks': ("attention(..., backend='chunked')", lambda: _attend_in_chunks),
    'get_backend': ('attention(..., backend=name)', lambda: _get_backend),
    'resolve_backend': ('Kernels(attention=...).resolve(ctx, attention_dropout).attention',
                        lambda: _resolve_backend)})
