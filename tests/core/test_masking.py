"""Mask builders, combine_masks, the dtype-aware fill value, masked (log-)softmax.

Oracle parity (forward and gradients), properties, shape sweeps; see tests/reference.py.
"""
import mxnet as mx
import numpy as onp
import pytest
from mxnet import np, npx

import reference as ref
from conftest import HYBRID_TOL, hybridize_mode, sweep, tol
from gluon_attention.core import softmax as sm
from gluon_attention.core import masking


def _rand(shape, dtype='float32', scale=1.0):
    return np.array(onp.random.normal(scale=scale, size=shape), dtype=dtype)


# ----------------------------------------------------------------------------- builders
@pytest.mark.parametrize('layout', ['NT', 'TN'])
@pytest.mark.parametrize('attn_type', ['full', 'causal'])
@pytest.mark.parametrize('with_length', [True, False])
def test_gen_self_attn_mask_matches_oracle(layout, attn_type, with_length):
    batch_size, length, units = 3, 7, 2
    data = _rand((batch_size, length, units))
    if layout == 'TN':
        data = np.array(data.asnumpy().transpose(1, 0, 2))
    valid_length = onp.array([7, 0, 4], dtype='int32')
    vl = np.array(valid_length, dtype='int32') if with_length else None
    mask = masking.gen_self_attn_mask(data, vl, attn_type=attn_type, layout=layout)
    expected = ref.gen_self_attn_mask(batch_size, length,
                                      valid_length if with_length else None, attn_type)
    assert mask.dtype == onp.bool_
    assert mask.shape == (batch_size, length, length)
    onp.testing.assert_array_equal(mask.asnumpy(), expected)


@pytest.mark.parametrize('layout', ['NT', 'TN'])
@pytest.mark.parametrize('with_data_length', [True, False])
def test_gen_mem_attn_mask_matches_oracle(layout, with_data_length):
    batch_size, mem_length, query_length = 2, 5, 3
    mem = _rand((batch_size, mem_length, 4))
    data = _rand((batch_size, query_length, 6))
    if layout == 'TN':
        mem = np.array(mem.asnumpy().transpose(1, 0, 2))
        data = np.array(data.asnumpy().transpose(1, 0, 2))
    mem_vl = onp.array([5, 2], dtype='int32')
    data_vl = onp.array([0, 2], dtype='int32')
    mask = masking.gen_mem_attn_mask(
        mem, np.array(mem_vl, dtype='int32'), data,
        np.array(data_vl, dtype='int32') if with_data_length else None, layout=layout)
    expected = ref.gen_mem_attn_mask(batch_size, mem_length, mem_vl, query_length,
                                     data_vl if with_data_length else None)
    assert mask.dtype == onp.bool_
    onp.testing.assert_array_equal(mask.asnumpy(), expected)


@pytest.mark.parametrize('axis', [0, 1])
def test_valid_length_to_mask(axis):
    data = _rand((2, 5, 3)) if axis == 1 else _rand((5, 2, 3))
    vl = onp.array([0, 5], dtype='int32')
    mask = masking.valid_length_to_mask(data, np.array(vl, dtype='int32'), axis=axis)
    assert mask.dtype == onp.bool_
    onp.testing.assert_array_equal(mask.asnumpy(), ref.valid_length_to_mask(vl, 5))


def test_valid_length_to_mask_per_query_lengths():
    """(B, L_q) lengths give a (B, L_q, T) mask."""
    data = _rand((2, 4, 3))
    vl = onp.array([[0, 1, 4], [2, 3, 1]], dtype='int32')
    mask = masking.valid_length_to_mask(data, np.array(vl, dtype='int32'), axis=1)
    onp.testing.assert_array_equal(mask.asnumpy(), ref.valid_length_to_mask(vl, 4))


def test_combine_masks():
    a = onp.random.rand(2, 3, 4) > 0.5
    b = onp.random.rand(2, 1, 4) > 0.5
    c = onp.random.rand(2, 3, 1) > 0.3
    out = masking.combine_masks(np.array(a, dtype=bool), None, np.array(b, dtype='float32'),
                                np.array(c, dtype='int32'))
    onp.testing.assert_array_equal(out.asnumpy().astype(bool), a & b & c)
    assert masking.combine_masks(None, None) is None
    with pytest.raises(ValueError, match='at least one mask'):
        masking.combine_masks()


@pytest.mark.parametrize('dtype', ['float16', 'float32', 'float64'])
def test_mask_fill_like_is_lowest_finite(dtype):
    x = np.zeros((2, 3), dtype=dtype)
    fill = masking.mask_fill_like(mx.nd, x)
    assert fill.shape == (2, 3) and fill.dtype == onp.dtype(dtype)
    assert onp.all(fill.asnumpy() == onp.finfo(dtype).min)


# ----------------------------------------------------------------------------- masked softmax
def _masked_case(shape, mask_shape):
    """Random scores and a random 0/1 mask with one fully masked row (broadcast axis last)."""
    score = _rand(shape, scale=2.0)
    mask = (onp.random.rand(*mask_shape) > 0.4).astype('float32')
    index = (0,) * (len(mask_shape) - 1)
    mask[index] = 0.0                      # a fully masked row
    mask[(mask_shape[0] - 1,) + (0,) * (len(mask_shape) - 2)] = 1.0  # a full row
    return score, mask


SOFTMAX_SHAPES = sweep(
    [((2, 3, 5), (2, 3, 5)), ((2, 3, 5), (2, 1, 5)), ((1, 1, 1), (1, 1, 1)),
     ((3, 2, 7, 5), (3, 1, 7, 5))],
    [((2, 3, 5), (2, 3, 5)), ((2, 3, 5), (2, 1, 5)), ((1, 1, 1), (1, 1, 1)),
     ((3, 2, 7, 5), (3, 1, 7, 5)), ((5, 7, 11), (1, 7, 11)), ((2, 13), (2, 13)),
     ((3, 5, 2, 7), (3, 5, 2, 7))])


@pytest.mark.parametrize('shape,mask_shape', SOFTMAX_SHAPES)
@pytest.mark.parametrize('temperature', [None, 2.5])
def test_masked_softmax_oracle_forward_backward(shape, mask_shape, temperature):
    score, mask = _masked_case(shape, mask_shape)
    head = onp.random.normal(size=shape)
    score.attach_grad()
    with mx.autograd.record():
        out = sm.masked_softmax(score, np.array(mask, dtype=bool), axis=-1,
                                temperature=temperature)
    out.backward(np.array(head, dtype='float32'))
    expected = ref.masked_softmax(score, mask, temperature=temperature)
    onp.testing.assert_allclose(out.asnumpy(), expected, **tol())
    grad = ref.masked_softmax_vjp(expected, head, temperature=temperature)
    onp.testing.assert_allclose(score.grad.asnumpy(), grad, **tol())
    full_mask = onp.broadcast_to(mask, shape)
    assert onp.all(out.asnumpy()[full_mask == 0] == 0)
    assert onp.all(score.grad.asnumpy()[full_mask == 0] == 0)


@pytest.mark.parametrize('axis', [0, 1, -2])
def test_masked_softmax_other_axes(axis):
    score, mask = _masked_case((3, 4, 5), (3, 4, 5))
    head = onp.random.normal(size=(3, 4, 5))
    score.attach_grad()
    with mx.autograd.record():
        out = sm.masked_softmax(score, np.array(mask, dtype=bool), axis=axis)
    out.backward(np.array(head, dtype='float32'))
    expected = ref.masked_softmax(score, mask, axis=axis)
    onp.testing.assert_allclose(out.asnumpy(), expected, **tol())
    onp.testing.assert_allclose(score.grad.asnumpy(),
                                ref.masked_softmax_vjp(expected, head, axis=axis), **tol())


def test_masked_softmax_without_mask_is_softmax():
    score = _rand((2, 3, 5))
    out = sm.masked_softmax(score, None, temperature=0.5)
    onp.testing.assert_allclose(out.asnumpy(), ref.masked_softmax(score, None, temperature=0.5),
                                **tol())


def test_masked_softmax_rows_sum_to_one_or_zero():
    score, mask = _masked_case((4, 6, 7), (4, 6, 7))
    out = sm.masked_softmax(score, np.array(mask, dtype='int32')).asnumpy()
    sums = out.sum(-1)
    full_masked = mask.sum(-1) == 0
    onp.testing.assert_allclose(sums[~full_masked], 1.0, rtol=1e-6, atol=1e-6)
    assert onp.all(sums[full_masked] == 0)


def test_masked_softmax_nan_scores_at_masked_positions_do_not_leak():
    score, mask = _masked_case((2, 3, 5), (2, 3, 5))
    raw = score.asnumpy()
    raw[mask == 0] = onp.nan
    out = sm.masked_softmax(np.array(raw), np.array(mask, dtype=bool)).asnumpy()
    assert onp.isfinite(out).all()
    onp.testing.assert_allclose(out, ref.masked_softmax(score, mask), **tol())


def test_masked_softmax_float16_finite():
    score, mask = _masked_case((2, 4, 6), (2, 4, 6))
    big = np.array(score.asnumpy() * 1e4, dtype='float16')
    out = sm.masked_softmax(big, np.array(mask, dtype=bool))
    assert out.dtype == onp.float16
    values = out.asnumpy()
    assert onp.isfinite(values).all()
    assert onp.all(values[mask == 0] == 0)
    out = sm.masked_softmax(np.array(score, dtype='float16'), np.array(mask, dtype=bool))
    onp.testing.assert_allclose(out.asnumpy(), ref.masked_softmax(score, mask), **tol('float16'))


# ----------------------------------------------------------------------------- log-softmax
@pytest.mark.parametrize('shape,mask_shape', SOFTMAX_SHAPES[:3])
def test_masked_log_softmax_oracle_forward_backward(shape, mask_shape):
    score, mask = _masked_case(shape, mask_shape)
    head = onp.random.normal(size=shape)
    score.attach_grad()
    with mx.autograd.record():
        out = sm.masked_log_softmax(score, np.array(mask, dtype=bool))
        finite = np.where(np.array(onp.broadcast_to(mask, shape), dtype=bool), out,
                          np.zeros_like(out))
    finite.backward(np.array(head, dtype='float32'))
    expected = ref.masked_log_softmax(score, mask)
    got = out.asnumpy()
    full_mask = onp.broadcast_to(mask, shape) != 0
    assert onp.all(onp.isneginf(got[~full_mask]))
    onp.testing.assert_allclose(got[full_mask], expected[full_mask], **tol())
    onp.testing.assert_allclose(score.grad.asnumpy(),
                                ref.masked_log_softmax_vjp(score, mask, head), **tol())


def test_masked_log_softmax_gradient_through_inf_is_zero():
    """Backward of the raw output (ones head gradient) gives finite, zero masked gradients."""
    score, mask = _masked_case((2, 3, 4), (2, 3, 4))
    score.attach_grad()
    with mx.autograd.record():
        out = sm.masked_log_softmax(score, np.array(mask, dtype=bool))
    out.backward()
    grad = score.grad.asnumpy()
    assert onp.isfinite(grad).all()
    assert onp.all(grad[mask == 0] == 0)
    onp.testing.assert_allclose(grad, ref.masked_log_softmax_vjp(score, mask, onp.ones(
        (2, 3, 4))), **tol())


# ----------------------------------------------------------------------------- hybrid
@mx.util.use_np
class _MaskBuilders(mx.gluon.HybridBlock):
    """Test harness: the builders inside hybrid_forward."""

    def __init__(self, attn_type='causal', layout='NT'):
        super().__init__()
        self._attn_type, self._layout = attn_type, layout

    def hybrid_forward(self, F, data, mem, valid_length, mem_valid_length):
        self_mask = masking.gen_self_attn_mask(data, valid_length, self._attn_type, self._layout)
        mem_mask = masking.gen_mem_attn_mask(mem, mem_valid_length, data, valid_length,
                                             self._layout)
        return self_mask.astype('float32'), mem_mask.astype('float32')


@pytest.mark.parametrize('layout', ['NT', 'TN'])
def test_mask_builders_hybridize(hybrid_mode, layout):
    block = hybridize_mode(_MaskBuilders(layout=layout), hybrid_mode)
    for batch_size, length, mem_length in [(2, 5, 3), (3, 7, 2)]:
        data = _rand((batch_size, length, 2))
        mem = _rand((batch_size, mem_length, 2))
        if layout == 'TN':
            data, mem = np.array(data.asnumpy().transpose(1, 0, 2)), np.array(
                mem.asnumpy().transpose(1, 0, 2))
        vl = onp.random.randint(0, length + 1, size=batch_size).astype('int32')
        mvl = onp.random.randint(0, mem_length + 1, size=batch_size).astype('int32')
        self_mask, mem_mask = block(data, mem, np.array(vl, dtype='int32'),
                                    np.array(mvl, dtype='int32'))
        onp.testing.assert_array_equal(self_mask.asnumpy(), ref.gen_self_attn_mask(
            batch_size, length, vl, 'causal'))
        onp.testing.assert_array_equal(mem_mask.asnumpy(), ref.gen_mem_attn_mask(
            batch_size, mem_length, mvl, length, vl))


@mx.util.use_np
class _Softmax(mx.gluon.HybridBlock):
    def __init__(self, axis=-1, temperature=None, log=False):
        super().__init__()
        self._axis, self._temperature, self._log = axis, temperature, log

    def hybrid_forward(self, F, score, mask):
        if self._log:
            out = sm.masked_log_softmax(score, mask, axis=self._axis)
            return F.np.where(mask, out, F.np.zeros_like(out))
        return sm.masked_softmax(score, mask, axis=self._axis, temperature=self._temperature)


@pytest.mark.parametrize('log', [False, True])
def test_masked_softmax_hybrid_equals_imperative(hybrid_mode, log):
    score, mask = _masked_case((2, 4, 3), (2, 4, 3))
    head = np.array(onp.random.normal(size=(2, 4, 3)), dtype='float32')
    results = []
    for mode in ('imperative', hybrid_mode):
        block = hybridize_mode(_Softmax(axis=1, temperature=None if log else 0.7, log=log), mode)
        x = score.copy()
        x.attach_grad()
        with mx.autograd.record():
            out = block(x, np.array(mask, dtype=bool))
        out.backward(head)
        results.append((out.asnumpy(), x.grad.asnumpy()))
    onp.testing.assert_allclose(results[0][0], results[1][0], rtol=HYBRID_TOL, atol=HYBRID_TOL)
    onp.testing.assert_allclose(results[0][1], results[1][1], rtol=HYBRID_TOL, atol=HYBRID_TOL)
