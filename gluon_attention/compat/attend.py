"""A PyTorch-style ``attend`` function and its helpers, on MXNet numpy arrays (imperative).

The contract of a PyTorch ``attend(query, context, value, score, normalize, context_sizes,
context_mask, return_weight)``: the same arguments, shapes and mask semantics (an additive
{-inf, 0} ``context_mask`` for softmax, a multiplicative {0, 1} one for sigmoid/identity), with
one deliberate difference: a query row whose context is fully masked (a context size of 0, or
an additive mask that is -inf everywhere) gets all-zero weights and a zero output, not NaN.

Sizes: B batch, M queries of size D1, N context vectors of size D2, N value vectors of size P.
The helpers take Python lists of sizes and run imperatively.
"""
import numbers

import mxnet as mx
import numpy as onp

from .. import _checks
from ..core._ops import float32_on_cpu
from ..core.softmax import masked_softmax

__all__ = ['attend', 'mask3d', 'fill_context_mask', 'dot']


def _check_sizes(sizes, name='sizes', batch_size=None, upper=None):
    """A list of ints, one per batch item, each >= 0 (and <= ``upper`` when given)."""
    if not isinstance(sizes, (list, tuple)) or not all(
            isinstance(s, numbers.Integral) and not isinstance(s, bool) for s in sizes):
        _checks.fail_type('{} must be a list of ints'.format(name), **{name: sizes})
    if any(s < 0 or (upper is not None and s > upper) for s in sizes):
        _checks.fail('{} must lie in [0, {}]'.format(name, 'N' if upper is None else upper),
                     **{name: sizes})
    if batch_size is not None and len(sizes) != batch_size:
        _checks.fail('{} must hold one size per batch item ({})'.format(name, batch_size),
                     **{name: sizes})


def mask3d(value, sizes):
    """Zero the rows of ``value`` beyond each item's size.

    Parameters
    ----------
    value : mx.np.ndarray (B, N, D)
    sizes : list of int, length B
        Number of valid rows of each item; rows ``n >= sizes[b]`` become 0.

    Returns
    -------
    masked : mx.np.ndarray (B, N, D), a new array in ``value``'s dtype.
    """
    _checks.check_rank('value', value, (3,))
    _check_sizes(sizes, batch_size=value.shape[0])
    keep = onp.arange(value.shape[1])[None, :] < onp.asarray(sizes, dtype='int64')[:, None]
    keep = mx.np.array(keep[:, :, None].astype(value.dtype), ctx=value.ctx)
    return value * keep


def fill_context_mask(mask, sizes, v_mask, v_unmask):
    """Fill ``mask`` in place: ``v_unmask`` everywhere, ``v_mask`` at context positions beyond
    each item's size.

    Parameters
    ----------
    mask : mx.np.ndarray (B, M, N), float
    sizes : list of int, length B
        Context size of each item; positions ``n >= sizes[b]`` get ``v_mask``.
    v_mask, v_unmask : float

    Returns
    -------
    mask : the same array, filled.
    """
    _checks.check_rank('mask', mask, (3,))
    _check_sizes(sizes, batch_size=mask.shape[0])
    mask[:] = v_unmask
    for b, size in enumerate(sizes):
        if size < mask.shape[2]:
            mask[b, :, size:] = v_mask
    return mask


def _check_dot(a, b):
    _checks.check_rank('a', a, (3,))
    _checks.check_rank('b', b, (3,))
    if a.shape[0] != b.shape[0] or a.shape[2] != b.shape[2]:
        _checks.fail('a and b must share the batch size B and the vector size D',
                     **{'a.shape': a.shape, 'b.shape': b.shape})


@_checks.validated_by(_check_dot)
@float32_on_cpu
def dot(a, b):
    """Batched dot products: ``c[i, j, k] = <a[i, j], b[i, k]>``.

    a (B, M, D) and b (B, N, D) -> c (B, M, N). Raises ValueError for other ranks or shapes.
    """
    return mx.npx.batch_dot(a, b, transpose_b=True)


def _scores(score, query, context):
    if score == 'dot':
        if query.shape[2] != context.shape[2]:
            _checks.fail("score='dot' needs query and context of the same size D1 == D2",
                         **{'query.shape': query.shape, 'context.shape': context.shape})
        return dot(query, context)
    if callable(score):
        return score(query, context)
    return _checks.fail("score must be 'dot' or a callable (query, context) -> (B, M, N)",
                        score=score)


def _additive_softmax(scores, context_mask):
    """softmax(scores + context_mask) where -inf entries get weight 0 and rows that are -inf
    everywhere get zeros (not NaN)."""
    total = scores + context_mask
    keep = total > float('-inf')                  # False exactly at -inf entries
    finite = mx.np.where(keep, total, mx.np.zeros_like(total))
    return masked_softmax(finite, keep)


def _check_attend(query, context, value, normalize, context_sizes, **_):
    value = context if value is None else value
    for name, x in (('query', query), ('context', context), ('value', value)):
        _checks.check_rank(name, x, (3,))
    _checks.check_same_float_dtype(query=query, context=context,
                                   value=None if value is context else value)
    if not query.shape[0] == context.shape[0] == value.shape[0]:
        _checks.fail('query, context and value must have the same batch size',
                     **{'query.shape': query.shape, 'context.shape': context.shape,
                        'value.shape': value.shape})
    _checks.check_choice('normalize', normalize, ('softmax', 'sigmoid', 'identity'))
    if context_sizes is not None:
        _check_sizes(context_sizes, 'context_sizes', batch_size=query.shape[0],
                     upper=context.shape[1])


@_checks.validated_by(_check_attend)
@float32_on_cpu
def attend(query, context, value=None, score='dot', normalize='softmax', context_sizes=None,
           context_mask=None, return_weight=False):
    """Attend to ``value`` (or ``context``) with weights from scoring queries against context.

    Parameters
    ----------
    query : mx.np.ndarray (B, M, D1)
        float16, float32 or float64; context and value share its dtype.
    context : mx.np.ndarray (B, N, D2)
    value : mx.np.ndarray (B, N, P) or None
        Defaults to ``context``.
    score : 'dot' or callable
        ``'dot'`` needs D1 == D2; a callable maps (query, context) to (B, M, N) scores.
    normalize : {'softmax', 'sigmoid', 'identity'}
    context_sizes : list of int or None
        Context size per item, in [0, N]; later positions get weight 0.
    context_mask : mx.np.ndarray (B, M, N) or None
        Additive ({-inf, 0}) for softmax, multiplicative ({0, 1}) for sigmoid/identity. Takes
        precedence over ``context_sizes``.
    return_weight : bool

    Returns
    -------
    output : (B, M, P), or ``(weight (B, M, N), output (B, M, P))`` when ``return_weight``.

    Raises
    ------
    ValueError
        Batch sizes differ, an unknown score or normalize name, D1 != D2 with ``'dot'``, or
        ``context_sizes`` of another length than B or with a size outside [0, N].
    TypeError
        ``context_sizes`` not a list of ints; query, context or value not an ``mx.np`` float
        (float16/32/64) array, or of different float dtypes.
    """
    value = context if value is None else value
    scores = _scores(score, query, context)                                    # (B, M, N)
    keep = None
    if context_mask is None and context_sizes is not None:
        keep = fill_context_mask(mx.np.zeros(scores.shape, dtype=scores.dtype, ctx=scores.ctx),
                                 context_sizes, 0, 1)
    if normalize == 'softmax':
        weight = (_additive_softmax(scores, context_mask) if context_mask is not None
                  else masked_softmax(scores, keep))
    else:
        weight = mx.npx.sigmoid(scores) if normalize == 'sigmoid' else scores
        mask = context_mask if context_mask is not None else keep
        weight = weight if mask is None else weight * mask
    output = mx.npx.batch_dot(weight, value)
    return (weight, output) if return_weight else output
