"""The functional attention core: pure functions on ``mx.np`` arrays or numpy-mode Symbols.

Every function infers its operator namespace from its first tensor (``mx.nd`` imperatively,
``mx.sym`` inside ``hybrid_forward``) and reads no shapes or values inside a graph. The public
functions validate their arguments when a user calls them on arrays, once
(:func:`gluon_attention._checks.validated_by`). The softmax family lives in
:mod:`~gluon_attention.core.softmax`, the mask builders in :mod:`~gluon_attention.core.masking`.
Glossary: B batch, K heads, L_q query length, L_m memory length, C_k / C_v per-head key / value
size. Mask polarity: 1 = attend, 0 = blocked.

float16 on CPU: MXNet 1.9.1 has no float16 GEMM on CPU, so the functions that multiply matrices
compute float16 CPU inputs in float32 and return float16 (imperatively; blocks do the same).
"""
import math

from .. import _checks
from .._deprecated import module_getattr

from . import layout as _layout
from ._ops import float32_on_cpu, get_F
from .masking import combine_masks, length_mask, used_memory
from .softmax import length_softmax, masked_softmax

__all__ = ['l2_normalize', 'dot_attn_score', 'multi_head_dot_attn', 'select_vectors_by_position',
           'zero_unattended', 'inverse_sqrt_units']


def zero_unattended(value, mask, layout='NT'):
    """Zero the memory rows of ``value`` that no query may attend, so that NaN or garbage in
    padding never reaches an output through 0 * NaN in the weighted sum.

    value : (B, L_m, C) for ``'NT'`` or a per-head tensor in ``'NKT'``/``'NTK'``/``'TNK'``;
    mask : 0/1 (B, L_q, L_m) (L_q may be 1) or None, in which case ``value`` is returned.
    """
    if mask is None or (not _checks.is_symbol(value) and value.size == 0):
        return value
    F = get_F(value)
    used = F.np.sum(mask.astype('float32'), axis=1)   # (B, L_m) > 0 where used; L_q = 0 gives 0
    return _zero_rows(F, value, used, layout)


def _zero_rows(F, value, used, layout):
    """``value`` with the memory rows zeroed where the (B, L_m) ``used`` is 0."""
    if layout == 'TNK':
        used = used.T                                                        # (L_m, B)
    used = F.np.expand_dims(used, 1 if layout == 'NKT' else -1)  # (B,1,L_m) | (B,L_m,1) | (L_m,B,1)
    if layout == 'NT':
        used, rows = F.np.squeeze(used, -1), value[:, :, 0]                  # (B, L_m)
    else:
        rows = value[:, :, :, 0]                                             # value[..., 0]
    rows = F.broadcast_like(used.as_nd_ndarray(), rows.as_nd_ndarray())      # one per C-row
    flat = F.reshape(value.as_nd_ndarray(), shape=(-1, 0), reverse=True)    # (rows, C)
    kept = F.where(F.reshape(rows, shape=(-1,)), flat, F.zeros_like(flat))  # legacy row-where
    return F.reshape_like(kept, value.as_nd_ndarray()).as_np_ndarray()


def _check_l2(data, axis, eps, **_):
    if not _checks.is_symbol(data):
        _checks.check_float_tensor('data', data)
        _checks.check_axis('axis', axis, data.ndim)
    _checks.check_positive_real('eps', eps)


@_checks.validated_by(_check_l2)
def l2_normalize(data, axis=-1, eps=1e-6):
    """``data / (||data||_2 + eps)`` along ``axis`` (eps is added to the norm, so 0 maps to 0).

    Parameters
    ----------
    data : float16/32/64 mx.np array, any shape
    axis : int
    eps : float > 0
        Added to the norm; it must be positive so that a zero vector maps to 0, not NaN.

    Returns
    -------
    out : array of ``data``'s shape and dtype.

    Raises
    ------
    TypeError
        ``data`` not a float mx.np array, or ``axis`` not an integer.
    ValueError
        ``axis`` out of range, or ``eps`` not a finite number > 0.
    """
    F = get_F(data)
    norm = F.np.sqrt(F.np.sum(data * data, axis=axis, keepdims=True))
    return data / (norm + eps)


def inverse_sqrt_units(x):
    """1/sqrt(C) for the size C of ``x``'s last axis, as a () array (shape-free)."""
    F = get_F(x)
    units = F.np.sum(F.np.ones_like(F.npx.arange_like(x, axis=-1)))
    return 1.0 / F.np.sqrt(units)


def _check_dot_scores(query, key, layout, **_):
    if _checks.is_symbol(query) or layout not in ('NT', 'TN'):
        return
    _checks.check_same_float_dtype(query=query, key=key)
    if layout == 'TN':
        _checks.check_rank('query', query, (3,))
    batch = (query.shape[1:-1], key.shape[1:-1]) if layout == 'TN' else (
        query.shape[:-2], key.shape[:-2])
    if batch[0] != batch[1] or query.shape[-1] != key.shape[-1]:
        _checks.fail('query and key must share their batch dimensions and feature size C '
                     '(layout {})'.format(layout),
                     **{'query.shape': query.shape, 'key.shape': key.shape})


@_checks.validated_by(_check_dot_scores)
@float32_on_cpu
def dot_attn_score(query, key, scaled=True, normalized=False, eps=1e-6, layout='NT'):
    """Dot-product attention scores with any number of leading batch dimensions.

    Parameters
    ----------
    query : ``'NT'``: (B_0, ..., B_n, L_q, C); ``'TN'``: (L_q, B, C)
    key : ``'NT'``: (B_0, ..., B_n, L_m, C); ``'TN'``: (L_m, B, C)
    scaled : bool
        Divide by sqrt(C), C the query's last dimension (Vaswani et al. 2017).
    normalized : bool
        L2-normalise query and key first (cosine similarity), with ``eps``.
    layout : {'NT', 'TN'}

    Returns
    -------
    scores : (B_0, ..., B_n, L_q, L_m) for ``'NT'``, (B, L_q, L_m) for ``'TN'``.

    Raises
    ------
    TypeError
        ``query`` and ``key`` not float mx.np arrays of one dtype.
    ValueError
        Unknown layout, or batch dimensions or C that differ.
    """
    _checks.check_choice('layout', layout, ('NT', 'TN'))
    F = get_F(query)
    if layout == 'TN':
        query, key = F.np.swapaxes(query, 0, 1), F.np.swapaxes(key, 0, 1)
    if normalized:
        query, key = l2_normalize(query, eps=eps), l2_normalize(key, eps=eps)
    if scaled:
        query = query * inverse_sqrt_units(query)
    return F.npx.batch_dot(query, key, transpose_b=True)


def _check_multi_head(query, key, value, mask, edge_scores, dropout, scaled, query_head_units,
                      layout, valid_length, **_):
    _checks.check_probability('dropout', dropout)
    _layout.check_per_head_inputs(query, key, value, layout, mask, edge_scores, valid_length,
                                  query_head_units, scaled)


@_checks.validated_by(_check_multi_head)
@float32_on_cpu
def multi_head_dot_attn(query, key, value, mask=None, edge_scores=None, dropout=0.0, scaled=True,
                        normalized=False, eps=1e-6, query_head_units=None, layout='NKT',
                        use_einsum=False, valid_length=None):
    """Multi-head scaled dot-product attention (Vaswani et al. 2017), GluonNLP master semantics.

    Parameters
    ----------
    query : float array, (B, K, L_q, C_k) ``NKT`` | (B, L_q, K, C_k) ``NTK`` | (L_q, B, K, C_k) ``TNK``
    key : float array, (B, K, L_m, C_k) | (B, L_m, K, C_k) | (L_m, B, K, C_k)
    value : float array, (B, K, L_m, C_v) | (B, L_m, K, C_v) | (L_m, B, K, C_v)
    mask : 0/1 array (B, L_q, L_m) or None
        Dimensions may be 1 to broadcast (e.g. (B, 1, L_m) for a key-padding mask).
    edge_scores : float array broadcastable to (B, K, L_q, L_m), or None
        Added to the raw scores (and so also divided by sqrt(C_k) when ``scaled``).
    dropout : float in [0, 1)
        Dropout on the attention weights, active only in training mode.
    scaled : bool
        Divide the scores by sqrt(``query_head_units``); without ``query_head_units`` the query's
        last dimension C_k is used (shape-free, so it also works in a graph).
    normalized : bool
        Cosine attention: L2-normalise query and key (with ``eps``) first.
    layout : {'NKT', 'NTK', 'TNK'}
    use_einsum : bool
        Compute the two products with ``np.einsum`` instead of ``npx.batch_dot``.
    valid_length : integer (or integral float) array (B,) or (B, L_q), or None
        Memory lengths: query row i of sequence b may attend memory positions
        j < valid_length[b] (or valid_length[b, i]); the same as the mask
        ``arange(L_m) < valid_length`` but computed by one fused length-aware softmax, with no
        mask tensor (the fast path for key padding). Given with ``mask``, both apply.
        Lengths, not a mask: a bool array is refused (TypeError), and so is a (B, L_q) one
        that looks like a 0/1 padding mask (every value 0 or 1, L_m > 1, some row with more
        than one 1; ValueError). A padding mask (B, L_m), e.g. a Hugging Face
        ``attention_mask``, converts with ``mask.sum(axis=-1)``.

    Returns
    -------
    context : (B, L_q, K*C_v) for NKT/NTK, (L_q, B, K*C_v) for TNK; merged head-major.
        Empty when L_q = 0.
    [scores, weights] : two (B, K, L_q, L_m) arrays
        ``scores`` are the raw scores plus ``edge_scores``: unscaled and unmasked.
        ``weights`` are the attention weights applied to ``value`` (after dropout); masked
        positions are 0, and a fully masked query row has zero weights and a zero context.

    Raises
    ------
    TypeError
        ``query``, ``key``, ``value`` and ``edge_scores`` not float mx.np arrays of one dtype.
    ValueError
        Bad layout or dropout, mismatched shapes, B = 0 or L_m = 0 (a graph cannot run on
        them), a mask of the wrong rank or with non-0/1 values, a ``valid_length`` of the
        wrong shape or outside [0, L_m], C_k = 0 with ``scaled``, or scores too large for
        32-bit indexing (imperatively, before any kernel runs).

    Equivalent computation (NKT)::

        scores = einsum('bnqc,bnmc->bnqm', query, key) + edge_scores
        weights = masked_softmax(scores / sqrt(C_k), mask[:, None], axis=-1)
        context = einsum('bnqm,bnmd->bqnd', dropout(weights), value).reshape(B, L_q, K*C_v)
    """
    context, scores, weights = _compose_attention(
        query, key, value, mask, edge_scores, valid_length, dropout=dropout, scaled=scaled,
        normalized=normalized, eps=eps, query_head_units=query_head_units, layout=layout,
        use_einsum=use_einsum)
    return context, [scores, weights]


def _compose_attention(query, key, value, mask=None, edge_scores=None, valid_length=None,
                       dropout=0.0, scaled=True, normalized=False, eps=1e-6,
                       query_head_units=None, layout='NKT', use_einsum=False, with_scores=True):
    """The composed computation behind :func:`multi_head_dot_attn` and the ``'composed'``
    backend (:mod:`~gluon_attention.core.backends`), unchecked: returns ``(context, scores,
    weights)``, ``scores`` None unless ``with_scores`` (building them costs one more
    (B, K, L_q, L_m) tensor). Lengths alone take the length-aware softmax and zero the memory
    rows past every query's length from a (B, L_m) vector: no (B, L_q, L_m) mask."""
    F = get_F(query)
    if normalized:
        query, key = l2_normalize(query, eps=eps), l2_normalize(key, eps=eps)
    scale = None                  # the scale is folded into the query (L_q*C_k, not L_q*L_m)
    if scaled and query_head_units is None and not _checks.is_symbol(query):
        query_head_units = query.shape[-1]
    if scaled:
        scale = (1.0 / math.sqrt(query_head_units) if query_head_units is not None
                 else inverse_sqrt_units(query))                       # () in a graph
        query = query * scale
    score_eq, context_eq = _layout.einsum_subscripts(layout)
    if use_einsum:
        logits = F.np.einsum(score_eq, query, key)                         # (B, K, L_q, L_m)
    else:
        logits = F.npx.batch_dot(_layout.to_nkt(query, layout), _layout.to_nkt(key, layout),
                                 transpose_b=True)                          # (B, K, L_q, L_m)
    if edge_scores is not None:
        logits = logits + (edge_scores if scale is None else edge_scores * scale)
    scores = None
    if with_scores:
        scores = logits if scale is None else logits / scale                # raw, unscaled
    if mask is not None:
        if valid_length is not None:
            mask = combine_masks(mask, length_mask(logits, valid_length, axis=-1))
        weights = masked_softmax(logits, F.np.expand_dims(mask, axis=1), axis=-1)
        value = zero_unattended(value, mask, layout)                        # (B, L_q, L_m) mask
    elif valid_length is not None:
        lengths = F.npx.reshape(valid_length.astype('float32'), (-2, -1))  # (B, 1|L_q)
        weights = length_softmax(F, logits, lengths)
        if _checks.is_symbol(logits) or logits.size:                       # not L_q = 0
            value = _zero_rows(F, value, used_memory(logits, lengths), layout)
    else:
        weights = F.npx.softmax(logits, axis=-1)
    if dropout:
        weights = F.npx.dropout(weights, p=dropout)
    if use_einsum:
        context = F.npx.reshape(F.np.einsum(context_eq, weights, value), (-2, -2, -5))
    else:
        value = _layout.to_nkt(value, layout)                               # (B, K, L_m, C_v)
        context = _layout.merge_heads(F, F.npx.batch_dot(weights, value), layout)
    return context, scores, weights


def _check_positions(data, positions, **_):
    if not _checks.is_symbol(data):
        _checks.check_rank('positions', positions, (2,))
        _checks.check_same_dim('data and positions batch sizes', data=(data, 0),
                               positions=(positions, 0))
        _checks.check_valid_length(positions, data.shape[1] - 1, 'positions')


@_checks.validated_by(_check_positions)
def select_vectors_by_position(data, positions):
    """Gather vectors at given positions of each sequence.

    Parameters
    ----------
    data : array (B, T, ...)
    positions : integer (or integral float) array (B, N), values in [0, T)

    Returns
    -------
    out : array (B, N, ...) with ``out[b, n] = data[b, positions[b, n]]``.

    Raises
    ------
    ValueError
        ``positions`` not of rank 2, another batch size, or values outside [0, T)
        (imperatively; ``gather_nd`` would read out of range silently).
    """
    F = get_F(data)
    positions = positions.astype('int32')
    batch = F.npx.arange_like(positions, axis=0).astype('int32')            # (B,)
    batch = F.np.expand_dims(batch, -1) + F.np.zeros_like(positions)         # (B, N)
    return F.npx.gather_nd(data, F.np.stack([batch, positions], axis=0))


__getattr__ = module_getattr(__name__, {
    'compose_attention': ("gluon_attention.attention(..., backend='composed')",
                          lambda: _compose_attention)})
