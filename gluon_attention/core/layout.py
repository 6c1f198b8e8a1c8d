"""Attention layouts: the only place where per-head axes are permuted.

Letters: N = batch (B), K = heads, T = time (L_q for queries, L_m for keys and values).

=======  ==========================  ==========================
layout   query                       key / value
=======  ==========================  ==========================
``NKT``  (B, K, L_q, C_k)            (B, K, L_m, C_k / C_v)
``NTK``  (B, L_q, K, C_k)            (B, L_m, K, C_k / C_v)
``TNK``  (L_q, B, K, C_k)            (L_m, B, K, C_k / C_v)
=======  ==========================  ==========================

The math runs once, in ``NKT``; inputs are converted with :func:`to_nkt` and the context is
merged back with :func:`merge_heads`. :func:`check_per_head_inputs` validates per-head inputs in
any layout (the shared check of the multi-head entry points).
"""
from .. import _checks

__all__ = ['ATTENTION_LAYOUTS', 'check_layout', 'to_nkt', 'merge_heads', 'einsum_subscripts',
           'check_per_head_inputs']

ATTENTION_LAYOUTS = ('NKT', 'NTK', 'TNK')

# Axes permutation taking each layout to (B, K, T, C).
_TO_NKT = {'NKT': None, 'NTK': (0, 2, 1, 3), 'TNK': (1, 2, 0, 3)}
# Axes permutation taking the (B, K, L_q, C_v) context to the layout's (B, L_q, K, C_v) or
# (L_q, B, K, C_v) before the heads are merged.
_CONTEXT_FROM_NKT = {'NKT': (0, 2, 1, 3), 'NTK': (0, 2, 1, 3), 'TNK': (2, 0, 1, 3)}
# einsum letters of one per-head tensor: b batch, n head, t time, c channel.
_EINSUM = {'NKT': 'bntc', 'NTK': 'btnc', 'TNK': 'tbnc'}


def check_layout(layout):
    """Raise ValueError unless ``layout`` is one of ``NKT``, ``NTK``, ``TNK``."""
    return _checks.check_choice('layout', layout, ATTENTION_LAYOUTS)


def to_nkt(x, layout):
    """Per-head tensor in ``layout`` -> (B, K, T, C)."""
    perm = _TO_NKT[layout]
    return x if perm is None else x.transpose(perm)


def merge_heads(F, context, layout):
    """(B, K, L_q, C_v) context -> (B, L_q, K*C_v) for NKT/NTK, (L_q, B, K*C_v) for TNK.

    The merged index is head-major: ``k * C_v + c``.
    """
    context = context.transpose(_CONTEXT_FROM_NKT[layout])   # (B, L_q, K, C_v) / (L_q, B, K, C_v)
    return F.npx.reshape(context, (-2, -2, -5))


def einsum_subscripts(layout):
    """Subscripts for the score and context einsums of ``layout`` (scores are 'bnqm')."""
    query = _EINSUM[layout].replace('t', 'q')
    memory = _EINSUM[layout].replace('t', 'm')
    context = query.replace('c', 'd')
    value = memory.replace('c', 'd')
    merged = 'qbnd' if layout == 'TNK' else 'bqnd'
    return ('{},{}->bnqm'.format(query, memory), 'bnqm,{}->{}'.format(value, merged))


def check_per_head_inputs(query, key, value, layout, mask=None, edge_scores=None,
                          valid_length=None, query_head_units=None, scaled=False):
    """Validate the arrays of a multi-head attention call in ``layout`` (nothing on symbols).

    Float ``mx.np`` arrays of rank 4 and one dtype (``edge_scores`` too); B and K shared, L_m shared by key and value, C_k by query
    and key; B >= 1 and L_m >= 1 (L_q may be 0); scores addressable by 32-bit indices; a 0/1
    ``mask`` that broadcasts to (B, L_q, L_m); ``valid_length`` (B,) or (B, L_q) in [0, L_m];
    ``edge_scores`` broadcastable to (B, K, L_q, L_m); C_k > 0 when ``scaled`` (the scale is
    1/sqrt(C_k)).
    """
    check_layout(layout)
    for name, x in (('query', query), ('key', key), ('value', value)):
        _checks.check_rank(name, x, (4,))
    if _checks.is_symbol(query):
        return
    _checks.check_same_float_dtype(query=query, key=key, value=value, edge_scores=edge_scores)
    q, k, v = (tuple(x.shape[p] for p in _TO_NKT[layout] or range(4)) for x in (query, key, value))
    shapes = {'query.shape': query.shape, 'key.shape': key.shape, 'value.shape': value.shape}
    if q[:2] != k[:2] or k[:3] != v[:3] or q[3] != k[3]:
        _checks.fail('query, key and value must share B and K, key and value L_m, query and key '
                     'C_k (layout {})'.format(layout), **shapes)
    _checks.check_not_empty('the batch size B and the memory length L_m', (q[0], k[2]), **shapes)
    _checks.check_index_range(q[0] * q[1] * q[2] * k[2])
    units = q[3] if query_head_units is None else query_head_units
    if scaled and not units > 0:
        _checks.fail('the scale 1/sqrt(C_k) needs C_k > 0 (the query\'s last dimension or '
                     'query_head_units)', query_head_units=units)
    _checks.check_mask(mask, (q[0], q[2], k[2]))
    _checks.check_memory_lengths(valid_length, q[0], q[2], k[2])
    scores_shape = (q[0], q[1], q[2], k[2])
    if edge_scores is not None:
        es = edge_scores.shape
        if len(es) > 4 or any(e not in (1, s) for e, s in zip(es[::-1], scores_shape[::-1])):
            _checks.fail('edge_scores must broadcast to (B, K, L_q, L_m) = {}'.format(
                scores_shape), **{'edge_scores.shape': es})
