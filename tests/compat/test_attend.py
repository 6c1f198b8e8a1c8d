"""The PyTorch-style attend, mask3d, fill_context_mask, dot against the float64 oracle."""
import mxnet as mx
import numpy as onp
import pytest
from mxnet import np

import reference as ref
from conftest import tol
from gluon_attention.compat import attend as sa

NORMALIZERS = ('softmax', 'sigmoid', 'identity')


def _rand(shape, dtype='float32'):
    return np.array(onp.random.normal(size=shape), dtype=dtype)


def _bilinear(weight):
    """A callable score (B, M, D1), (B, N, D2) -> (B, M, N): q W c^T (differentiable)."""
    def score(q, c):
        if isinstance(q, onp.ndarray):
            return q @ weight @ onp.swapaxes(c, 1, 2)
        w = np.array(weight, dtype='float32')
        return np.matmul(np.matmul(q, w), np.swapaxes(c, 1, 2))
    return score


def _run(query, context, value, **kwargs):
    args = [x.copy() for x in (query, context) + ((value,) if value is not None else ())]
    for x in args:
        x.attach_grad()
    with mx.autograd.record():
        weight, out = sa.attend(*args[:2], args[2] if value is not None else None,
                                return_weight=True, **kwargs)
        loss = (out * np.array(onp.linspace(-1, 1, out.size).reshape(out.shape),
                               dtype=out.dtype)).sum()
    loss.backward()
    return weight, out, [x.grad.asnumpy() for x in args]


def _numeric(query, context, value, **kwargs):
    """float64 finite-difference gradients of the oracle loss w.r.t. query, context, value."""
    q, c = ref.f64(query), ref.f64(context)
    v = None if value is None else ref.f64(value)
    shape = ref.attend(q, c, v, **kwargs)[1].shape
    head = onp.linspace(-1, 1, int(onp.prod(shape))).reshape(shape)
    grads = [ref.numeric_grad(lambda x: ref.attend(x, c, v, **kwargs)[1], q, head),
             ref.numeric_grad(lambda x: ref.attend(q, x, v, **kwargs)[1], c, head)]
    if v is not None:
        grads.append(ref.numeric_grad(lambda x: ref.attend(q, c, x, **kwargs)[1], v, head))
    return grads


@pytest.mark.parametrize('normalize', NORMALIZERS)
@pytest.mark.parametrize('masking', ['none', 'sizes', 'mask'])
@pytest.mark.parametrize('score', ['dot', 'callable'])
def test_attend_oracle(normalize, masking, score):
    b, m, n, d, p = 3, 2, 5, 4, 3
    query, context, value = _rand((b, m, d)), _rand((b, n, d)), _rand((b, n, p))
    kwargs = dict(normalize=normalize)
    if score == 'callable':
        kwargs['score'] = _bilinear(onp.random.normal(size=(d, d)))
    sizes = [5, 0, 2]
    if masking == 'sizes':
        kwargs['context_sizes'] = sizes
    elif masking == 'mask':
        keep = ref.sizes_mask(b, m, n, sizes)
        mask = onp.where(keep > 0, 0.0, -onp.inf) if normalize == 'softmax' else keep
        kwargs['context_mask'] = np.array(mask, dtype='float32')
    weight, out, grads = _run(query, context, value, **kwargs)
    ref_kwargs = dict(kwargs)
    if 'context_mask' in ref_kwargs:
        ref_kwargs['context_mask'] = ref_kwargs['context_mask'].asnumpy()
    w_ref, out_ref = ref.attend(query, context, value, **ref_kwargs)
    onp.testing.assert_allclose(weight.asnumpy(), w_ref, **tol())
    onp.testing.assert_allclose(out.asnumpy(), out_ref, **tol())
    assert onp.isfinite(out.asnumpy()).all()
    if masking != 'none':
        assert onp.all(weight.asnumpy()[1] == 0), 'context size 0 must give zero weights'
        assert onp.all(out.asnumpy()[1] == 0)
    for got, expected in zip(grads, _numeric(query, context, value, **ref_kwargs)):
        assert onp.isfinite(got).all()
        onp.testing.assert_allclose(got, expected, **tol())


def test_attend_value_defaults_to_context_and_return_convention():
    query, context = _rand((2, 3, 4)), _rand((2, 5, 4))
    out = sa.attend(query, context)
    assert isinstance(out, np.ndarray) and out.shape == (2, 3, 4)
    weight, out2 = sa.attend(query, context, return_weight=True)
    assert weight.shape == (2, 3, 5)
    _, expected = ref.attend(query, context)
    onp.testing.assert_allclose(out.asnumpy(), expected, **tol())
    onp.testing.assert_allclose(out2.asnumpy(), expected, **tol())


@pytest.mark.parametrize('b,m,n,d', [(1, 1, 1, 1), (2, 3, 5, 7), (3, 1, 2, 5)])
def test_dot(b, m, n, d):
    a, c = _rand((b, m, d)), _rand((b, n, d))
    out = sa.dot(a, c)
    assert out.shape == (b, m, n)
    onp.testing.assert_allclose(out.asnumpy(), ref.f64(a) @ ref.f64(c).transpose(0, 2, 1),
                                **tol())


def test_mask3d():
    value = _rand((3, 4, 2))
    sizes = [4, 0, 2]
    out = sa.mask3d(value, sizes)
    onp.testing.assert_array_equal(out.asnumpy(), ref.mask3d(value, sizes))
    sizes = [7, 1, 3]                       # sizes beyond N leave the rows alone
    onp.testing.assert_array_equal(sa.mask3d(value, sizes).asnumpy(), ref.mask3d(value, sizes))


@pytest.mark.parametrize('v_mask,v_unmask', [(-onp.inf, 0.0), (0.0, 1.0)])
def test_fill_context_mask(v_mask, v_unmask):
    mask = np.zeros((3, 2, 5))
    sizes = [5, 0, 2]
    out = sa.fill_context_mask(mask, sizes, v_mask, v_unmask)
    onp.testing.assert_array_equal(out.asnumpy(),
                                   ref.fill_context_mask((3, 2, 5), sizes, v_mask, v_unmask))


def test_attend_float16_finite():
    query, context = _rand((2, 3, 4), 'float16'), _rand((2, 5, 4), 'float16')
    weight, out = sa.attend(query, context, context_sizes=[5, 0], return_weight=True)
    assert out.dtype == onp.float16
    assert onp.isfinite(out.asnumpy()).all() and onp.isfinite(weight.asnumpy()).all()
    _, expected = ref.attend(query, context, context_sizes=[5, 0])
    onp.testing.assert_allclose(out.asnumpy(), expected, **tol('float16'))

