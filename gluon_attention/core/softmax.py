"""The softmax family: the one place that normalises attention scores.

- :func:`masked_softmax`: softmax over any axis with a 0/1 mask of any broadcastable shape;
- :func:`masked_log_softmax`: its log, -inf at masked positions;
- :func:`length_softmax`: the key-padding case given as lengths, one fused length-aware kernel
  and no mask tensor (used by :func:`~gluon_attention.core.functional.multi_head_dot_attn`).

Conventions: mask polarity 1 = attend, 0 = blocked; masked positions get a weight of exactly 0
and a fully masked row all-zero weights with finite zero gradients (GluonNLP semantics); the fill
value is the lowest finite value of the scores' dtype (:func:`~.masking.mask_fill_like`).
Dimension letters: B batch, K heads, L_q query length, L_m memory length.
"""
import mxnet as mx

from .. import _checks

from ._ops import broadcast_mask_terms, get_F, mask_fill_like, masked_fill

__all__ = ['masked_softmax', 'masked_log_softmax', 'length_softmax']


def _check_softmax_args(att_score, mask, axis, temperature=None, **_):
    if _checks.is_symbol(att_score):
        return
    _checks.check_float_tensor('att_score', att_score)
    _checks.check_axis('axis', axis, att_score.ndim)
    if mask is not None and not isinstance(mask, mx.np.ndarray):
        _checks.fail_type('mask must be an mx.np array or None', mask=type(mask).__name__)
    _checks.check_mask(mask, att_score.shape)
    _checks.check_positive_real('temperature', temperature, allow_none=True)


@_checks.validated_by(_check_softmax_args)
def masked_softmax(att_score, mask=None, axis=-1, temperature=None):
    """Softmax over ``axis`` that ignores masked positions.

    Parameters
    ----------
    att_score : float array, any shape (float16/32/64)
    mask : 0/1 array (bool, int or float) or None
        Same rank as ``att_score``; each dimension equal to the scores' or 1 (broadcast).
        1 = attend, 0 = blocked. Non-binary values raise ValueError (imperatively).
    axis : int
    temperature : float > 0 or None
        The scores are divided by it: ``softmax(x / temperature)``.

    Returns
    -------
    weights : array of ``att_score``'s shape and dtype
        Masked positions are exactly 0; a fully masked row is all 0 (not uniform, not NaN), and
        its gradient is a finite 0.

    Raises
    ------
    TypeError
        ``att_score`` not an ``mx.np`` float array, ``mask`` not an ``mx.np`` array, a
        non-integer ``axis`` or a non-numeric ``temperature`` (imperatively).
    ValueError
        A mask of the wrong rank, shape or values, an ``axis`` out of range, a ``temperature``
        that is not a finite number > 0 (imperatively).

    Equivalent computation (MXNet 2 ``npx.masked_softmax``)::

        x = where(mask, att_score / temperature, lowest_finite(dtype))
        w = softmax(x, axis) * mask

    The temperature is applied as a multiplication before the plain softmax (the oneDNN kernel;
    ``softmax(temperature=)`` is 15x slower in MXNet 1.9.1); the mask is broadcast once to the
    scores' shape (:func:`~gluon_attention.core.masking.broadcast_mask_terms`).
    """
    F = get_F(att_score)
    if not _checks.is_symbol(att_score) and att_score.size == 0:
        return F.npx.softmax(att_score, axis=axis)      # nothing to normalise (empty axis)
    if temperature is not None:
        att_score = att_score * (1.0 / temperature)
    if mask is None:
        return F.npx.softmax(att_score, axis=axis)
    keep, fill = broadcast_mask_terms(F, mask, att_score)
    weights = F.npx.softmax(masked_fill(F, att_score, keep, fill), axis=axis)
    return weights * keep


@_checks.validated_by(_check_softmax_args)
def masked_log_softmax(att_score, mask=None, axis=-1):
    """Log-softmax over ``axis`` over the unmasked positions only.

    Parameters
    ----------
    att_score : float array, any shape (float16/32/64)
    mask : 0/1 array or None, same rank as ``att_score`` (dimensions equal or 1)
    axis : int

    Returns
    -------
    log_weights : array of ``att_score``'s shape and dtype
        Unmasked positions hold the log-softmax over the unmasked set; masked positions hold -inf
        (a fully masked row is all -inf). The gradient at masked positions is 0.

    Raises
    ------
    TypeError, ValueError
        As :func:`masked_softmax` (imperatively).

    Equivalent computation::

        x = where(mask, att_score, lowest_finite(dtype))
        out = where(mask, log_softmax(x, axis), -inf)
    """
    F = get_F(att_score)
    if mask is None:
        return F.npx.log_softmax(att_score, axis=axis)
    mask = mask.astype('bool')
    filled = F.np.where(mask, att_score, mask_fill_like(F, att_score))
    log_weights = F.npx.log_softmax(filled, axis=axis)
    return F.np.where(mask, log_weights, F.np.full_like(log_weights, float('-inf')))


def length_softmax(F, logits, lengths):
    """Softmax of (B, K, L_q, L_m) ``logits`` over the first ``lengths`` memory positions.

    ``lengths`` is float32 (B, 1) or (B, L_q) holding integers (the caller has checked them and
    cast them once: :func:`~gluon_attention.core.backends.attention`). One fused
    kernel (``npx.softmax(use_length=True)``): positions at or past the length get a weight of
    exactly 0 and a zero gradient, a length of 0 gives an all-zero row, and the blocked scores
    are never read (NaN there does not leak). The lengths are clipped to [0, L_m] here, once,
    so that a graph never reads past a row. Returns float weights shaped like ``logits``.
    """
    rows = F.np.zeros_like(logits[:, :, :, 0]).astype('float32')               # (B, K, L_q)
    length = F.np.expand_dims(lengths, 1) + rows                               # (B, K, L_q)
    memory = F.np.sum(F.np.ones_like(F.npx.arange_like(logits, axis=-1)).astype('float32'))  # L_m
    length = F.np.minimum(F.np.maximum(length, rows), rows + memory)
    return F.npx.softmax(logits, length=length.astype('int32'), axis=-1, use_length=True)
