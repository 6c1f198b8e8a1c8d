"""Mask builders: the one place that turns lengths into 0/1 masks and combines masks
(:func:`combine_masks`; no other module ANDs masks together).

Polarity, everywhere in the library: ``True``/1 = may attend (or may be selected), ``False``/0 =
blocked. Every builder returns a **bool** array and uses only shape-free operators
(``arange_like``, broadcasting), so it works on ``mx.np`` arrays and inside ``hybrid_forward``,
and an exported graph accepts any batch size and length.

Example, two sentences of valid lengths 3 and 2 padded to T=4, ``gen_self_attn_mask`` with
``attn_type='full'`` (rows: query positions, columns: key positions)::

    b=0: 1 1 1 0      b=1: 1 1 0 0
         1 1 1 0           1 1 0 0
         1 1 1 0           0 0 0 0
         0 0 0 0           0 0 0 0

and with ``attn_type='causal'``::

    b=0: 1 0 0 0      b=1: 1 0 0 0
         1 1 0 0           1 1 0 0
         1 1 1 0           0 0 0 0
         0 0 0 0           0 0 0 0
"""
import mxnet as mx
import numpy as onp

from .. import _checks

from ._ops import broadcast_mask_terms, get_F, mask_fill_like

__all__ = ['mask_fill_like', 'broadcast_mask_terms', 'valid_length_to_mask',
           'gen_self_attn_mask', 'gen_mem_attn_mask', 'combine_masks', 'length_mask',
           'used_memory', 'SEQUENCE_LAYOUTS']

SEQUENCE_LAYOUTS = ('NT', 'TN')


def _steps(F, data, axis):
    """Positions 0..T-1 along ``axis`` of ``data`` as float32 (T,)."""
    return F.npx.arange_like(data, axis=axis).astype('float32')


def _check_lengths(data, valid_length, axis, **_):
    if not _checks.is_symbol(data):
        if not -data.ndim <= axis < data.ndim:
            _checks.fail('axis must index a dimension of data {}'.format(data.shape), axis=axis)
        _checks.check_valid_length(valid_length, data.shape[axis])


@_checks.validated_by(_check_lengths)
def valid_length_to_mask(data, valid_length, axis=1):
    """Mask of the positions before each valid length.

    Parameters
    ----------
    data : mx.np.ndarray or Symbol
        Any array whose extent along ``axis`` is the length T (only its shape is used).
    valid_length : mx.np.ndarray or Symbol, integer (or integral float), shape (...)
        Typically (B,) or (B, L_q).
    axis : int
        The time axis of ``data``.

    Returns
    -------
    mask : bool, shape (..., T)
        ``mask[..., t] = t < valid_length[...]``.

    Equivalent computation::

        mask = np.arange(T)[None, :] < valid_length[:, None]
    """
    F = get_F(data)
    steps = _steps(F, data, axis)
    return steps < F.np.expand_dims(valid_length.astype('float32'), axis=-1)


def _time_and_batch_axes(layout):
    _checks.check_choice('layout', layout, SEQUENCE_LAYOUTS)
    return (1, 0) if layout == 'NT' else (0, 1)


def _check_self_lengths(data, valid_length, layout, **_):
    if not _checks.is_symbol(data) and layout in SEQUENCE_LAYOUTS:
        time_axis, batch_axis = _time_and_batch_axes(layout)
        _checks.check_valid_length(valid_length, data.shape[time_axis],
                                   batch_size=data.shape[batch_axis])


@_checks.validated_by(_check_self_lengths)
def gen_self_attn_mask(data, valid_length=None, attn_type='full', layout='NT'):
    """Self-attention mask of an encoder (``'full'``) or a decoder (``'causal'``).

    Parameters
    ----------
    data : mx.np.ndarray or Symbol
        (B, T, C) for layout ``'NT'``, (T, B, C) for ``'TN'``; only its shape is used.
    valid_length : integer array (B,) or None
        Valid lengths; ``None`` means every position is valid.
    attn_type : {'full', 'causal'}
    layout : {'NT', 'TN'}

    Returns
    -------
    mask : bool, shape (B, T, T)
        Batch-major in both layouts. ``full``: ``mask[b, i, j] = i < vl[b] and j < vl[b]``;
        ``causal``: ``mask[b, i, j] = j <= i < vl[b]``. Padded query rows are all False.

    Raises
    ------
    ValueError
        On an unknown ``attn_type`` or ``layout``, or (imperatively) lengths outside [0, T].
    """
    _checks.check_choice('attn_type', attn_type, ('full', 'causal'))
    time_axis, batch_axis = _time_and_batch_axes(layout)
    F = get_F(data)
    steps = _steps(F, data, time_axis)
    rows = F.np.expand_dims(F.np.expand_dims(steps, 0), -1)    # (1, T, 1)
    cols = F.np.expand_dims(F.np.expand_dims(steps, 0), 0)     # (1, 1, T)
    batch = F.np.zeros_like(_steps(F, data, batch_axis))
    batch = F.np.expand_dims(F.np.expand_dims(batch, -1), -1)  # (B, 1, 1) zeros
    if attn_type == 'causal':
        mask = cols <= rows + batch                            # (B, T, T)
    else:
        mask = (rows + cols + batch) >= 0                      # (B, T, T), all True
    if valid_length is not None:
        length = F.np.expand_dims(F.np.expand_dims(valid_length.astype('float32'), -1), -1)
        mask = combine_masks(mask, rows < length, cols < length)
    return mask


def _check_mem_lengths(mem, mem_valid_length, data, data_valid_length, layout, **_):
    if not _checks.is_symbol(mem) and layout in SEQUENCE_LAYOUTS:
        time_axis, batch_axis = _time_and_batch_axes(layout)
        if mem.shape[batch_axis] != data.shape[batch_axis]:
            _checks.fail('mem and data must have the same batch size B (layout {})'.format(layout),
                         **{'mem.shape': mem.shape, 'data.shape': data.shape})
        if mem_valid_length is None:
            _checks.fail_type('mem_valid_length is required', mem_valid_length=None)
        _checks.check_rank('mem_valid_length', mem_valid_length, (1,))
        _checks.check_rank('data_valid_length', data_valid_length, (1,))
        _checks.check_valid_length(mem_valid_length, mem.shape[time_axis], 'mem_valid_length',
                                   batch_size=mem.shape[batch_axis])
        _checks.check_valid_length(data_valid_length, data.shape[time_axis],
                                   'data_valid_length', batch_size=data.shape[batch_axis])


@_checks.validated_by(_check_mem_lengths)
def gen_mem_attn_mask(mem, mem_valid_length, data, data_valid_length=None, layout='NT'):
    """Cross-attention mask from query positions (``data``) to memory positions (``mem``).

    Parameters
    ----------
    mem : (B, L_m, C_m) for ``'NT'``, (L_m, B, C_m) for ``'TN'``; only its shape is used.
    mem_valid_length : integer array (B,)
    data : (B, L_q, C) for ``'NT'``, (L_q, B, C) for ``'TN'``; only its shape is used.
    data_valid_length : integer array (B,) or None
    layout : {'NT', 'TN'}

    Returns
    -------
    mask : bool, shape (B, L_q, L_m)
        ``mask[b, i, j] = j < mem_valid_length[b] and i < data_valid_length[b]`` (the query
        condition is dropped when ``data_valid_length`` is None).

    Raises
    ------
    ValueError
        On an unknown ``layout``, or (imperatively) ``mem`` and ``data`` of different batch
        sizes, lengths not of shape (B,), or lengths outside their ranges.
    TypeError
        (Imperatively) lengths that are not mx.np arrays of an integer or float dtype.
    """
    time_axis, batch_axis = _time_and_batch_axes(layout)
    F = get_F(data)
    rows = F.np.expand_dims(F.np.expand_dims(_steps(F, data, time_axis), 0), -1)  # (1, L_q, 1)
    mem_mask = valid_length_to_mask(mem, mem_valid_length, time_axis)            # (B, L_m)
    mem_mask = F.np.expand_dims(mem_mask, 1)                                      # (B, 1, L_m)
    if data_valid_length is None:
        return combine_masks(mem_mask, rows >= 0)                                 # (B, L_q, L_m)
    length = F.np.expand_dims(F.np.expand_dims(data_valid_length.astype('float32'), -1), -1)
    return combine_masks(mem_mask, rows < length)                                # (B, L_q, L_m)


def _check_combine(masks):
    if not masks:
        _checks.fail('combine_masks needs at least one mask argument (None for no mask)',
                     num_masks=0)
    arrays = [m for m in masks if m is not None and not _checks.is_symbol(m)]
    for i, mask in enumerate(arrays):
        if not isinstance(mask, mx.nd.NDArray):
            _checks.fail_type('every mask must be an mxnet array',
                              **{'masks[{}]'.format(i): type(mask).__name__})
        _checks.check_mask(mask, mask.shape, 'masks[{}]'.format(i))
    try:
        onp.broadcast_shapes(*[m.shape for m in arrays])
    except ValueError:
        _checks.fail('the masks\' shapes must broadcast against each other',
                     shapes=[m.shape for m in arrays])


@_checks.validated_by(_check_combine)
def combine_masks(*masks):
    """AND of the given 0/1 masks, ignoring ``None``; ``None`` when every argument is ``None``.

    The masks (bool, or 0/1 of any dtype) must broadcast against each other; the result is bool
    with their broadcast shape. Works imperatively and inside a graph.

    Raises
    ------
    ValueError
        (Called by a user) no argument at all, shapes that do not broadcast, or values
        other than 0 and 1 (imperatively).
    TypeError
        A mask that is not an mxnet array (imperatively).
    """
    present = [m for m in masks if m is not None]
    if not present:
        return None
    if len(present) == 1:
        return present[0].astype('bool')
    out = present[0]
    for mask in present[1:]:
        out = (out.astype('float32') * mask.astype('float32')) > 0    # broadcasting AND
    return out


def length_mask(key, valid_length, axis=1):
    """Key-padding mask from lengths: (B,) -> (B, 1, L_m); (B, L_q) -> (B, L_q, L_m); bool.

    ``key`` holds L_m on ``axis`` ((B, L_m, C) by default; e.g. the (B, K, L_q, L_m) scores with
    ``axis=-1``); only its shape is used (shape-free).
    """
    F = get_F(key)
    steps = F.npx.arange_like(key, axis=axis).astype('float32')              # (L_m,)
    length = F.npx.reshape(valid_length.astype('float32'), (-2, -1))          # (B, 1) | (B, L_q)
    return F.np.expand_dims(length, -1) > steps                               # (B, ., L_m)


def used_memory(scores, lengths):
    """Memory positions that some query may attend, from lengths: float32 0/1 (B, L_m).

    ``scores`` holds L_m on its last axis (only its shape is used); ``lengths`` float32 (B, 1)
    or (B, L_q) with L_q >= 1. Position j is used when j < max over the queries of the lengths:
    the (B, L_m) summary of the key-padding mask without building the (B, L_q, L_m) mask.
    """
    F = get_F(scores)
    steps = F.npx.arange_like(scores, axis=-1).astype('float32')             # (L_m,)
    longest = F.np.max(lengths, axis=1, keepdims=True)                        # (B, 1)
    return (steps < longest).astype('float32')                                # (B, L_m)
