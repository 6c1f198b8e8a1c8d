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
merged back with :func:`merge_heads`.
"""
from .. import _checks

__all__ = ['ATTENTION_LAYOUTS', 'check_layout', 'to_nkt', 'merge_heads', 'einsum_subscripts']

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
