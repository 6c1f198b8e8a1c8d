"""chunked_dot_attn: equal to the unchunked multi_head_dot_attn, forward and gradients."""
import mxnet as mx
import numpy as onp
import pytest
from mxnet import autograd, np

from conftest import SEED, tol
from gluon_attention import multi_head_dot_attn
from gluon_attention.core.chunked import _chunked_dot_attn as chunked_dot_attn

# Distinct primes per dimension, so a wrong axis cannot pass: B, K, L_q, L_m, C_k, C_v.
B, K, LQ, LM, CK, CV = 3, 2, 11, 7, 5, 13
_SHAPES = {'NKT': lambda b, t, c: (b, K, t, c), 'NTK': lambda b, t, c: (b, t, K, c),
           'TNK': lambda b, t, c: (t, b, K, c)}


def _inputs(layout, seed=SEED):
    rng = onp.random.RandomState(seed)
    shape = _SHAPES[layout]
    return [np.array(rng.normal(size=shape(B, t, c)).astype('float32'))
            for t, c in ((LQ, CK), (LM, CK), (LM, CV))]


def _with_grads(func, tensors, head_grad):
    for t in tensors:
        t.attach_grad()
    with autograd.record():
        out = func(*tensors)
    out.backward(head_grad)
    return out.asnumpy(), [t.grad.asnumpy() for t in tensors]


def _check_equal(layout, chunked_mask, full_mask, chunk_size):
    q, k, v = _inputs(layout)
    ctx_shape = (LQ, B, K * CV) if layout == 'TNK' else (B, LQ, K * CV)
    head = np.array(onp.random.RandomState(SEED + 1).normal(size=ctx_shape).astype('float32'))
    expected = _with_grads(lambda *t: multi_head_dot_attn(*t, full_mask, layout=layout)[0],
                           [q.copy(), k.copy(), v.copy()], head)
    got = _with_grads(lambda *t: chunked_dot_attn(*t, chunked_mask, chunk_size, layout=layout),
                      [q.copy(), k.copy(), v.copy()], head)
    onp.testing.assert_allclose(got[0], expected[0], **tol('float32'))
    for g, e in zip(got[1], expected[1]):
        onp.testing.assert_allclose(g, e, **tol('float32'))
    return got[0]


@pytest.mark.parametrize('layout', ['NKT', 'NTK', 'TNK'])
@pytest.mark.parametrize('chunk_size', [1, 4, 11, 64])
def test_valid_length_matches_unchunked(layout, chunk_size):
    lengths = onp.array([7, 3, 0], dtype='int32')
    full = np.array(onp.arange(LM)[None, None, :] < lengths[:, None, None])       # (B, 1, L_m)
    out = _check_equal(layout, np.array(lengths), full, chunk_size)
    batch_last = out if layout != 'TNK' else out.transpose(1, 0, 2)
    assert onp.all(batch_last[2] == 0)                    # valid length 0: zero context


@pytest.mark.parametrize('layout', ['NKT', 'TNK'])
def test_general_mask_matches_unchunked(layout):
    rng = onp.random.RandomState(SEED)
    mask = rng.uniform(size=(B, LQ, LM)) > 0.4
    mask[0, 5] = False                                      # one fully masked query row
    _check_equal(layout, np.array(mask), np.array(mask), 4)


def test_no_mask_matches_unchunked():
    _check_equal('NTK', None, None, 3)


def test_forward_holds_one_chunk():
    """Without autograd the result is the same and each chunk is waited for."""
    q, k, v = _inputs('NKT')
    expected = multi_head_dot_attn(q, k, v, layout='NKT')[0].asnumpy()
    got = chunked_dot_attn(q, k, v, None, 2, synchronize=True)
    onp.testing.assert_allclose(got.asnumpy(), expected, **tol('float32'))


@pytest.mark.parametrize('kwargs, message', [
    (dict(chunk_size=0), 'chunk_size'),
    (dict(layout='NCHW'), 'layout'),
    (dict(mask_or_valid_length=np.ones((B, LQ))), 'mask_or_valid_length'),
])
def test_errors(kwargs, message):
    q, k, v = _inputs('NKT')
    args = dict(mask_or_valid_length=None, chunk_size=4)
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        chunked_dot_attn(q, k, v, **args)


def test_symbol_is_rejected():
    q = mx.sym.var('q').as_np_ndarray()
    with pytest.raises(ValueError, match='imperatively'):
        chunked_dot_attn(q, q, q, None, 4)
