"""float16 attention: finite outputs and gradients with fully masked rows, scores of magnitude
1e4 and causal masks combined with left padding; results match float32 (or the float64 oracle)."""
import mxnet as mx
import numpy as onp
import pytest
from mxnet import autograd, np

import reference as ref
from block_utils import F16_TOL, check_float16_matches_float32
from conftest import requires_gpu, tol
import gluon_attention as ga


def _padded_rows_mask():
    """(2, 4, 6): lengths [6, 2] along the last axis and row 3 of sample 1 fully masked."""
    mask = onp.broadcast_to(ref.valid_length_to_mask([6, 2], 6)[:, None], (2, 4, 6)).copy()
    mask[1, 3] = False
    return mask


def test_float16_masked_softmax_matches_oracle_on_cpu():
    """Scores of scale 100: no NaN, masked weights exactly 0, close to the float64 oracle."""
    scores = np.array(onp.random.normal(scale=100, size=(2, 4, 6)), dtype='float16')
    mask = _padded_rows_mask()
    out = ga.masked_softmax(scores, np.array(mask, dtype=bool)).asnumpy()
    assert out.dtype == onp.float16 and onp.isfinite(out).all()
    assert onp.all(out[~mask] == 0) and onp.all(out[1, 3] == 0)
    onp.testing.assert_allclose(out, ref.masked_softmax(scores, mask), **tol('float16'))


@requires_gpu
def test_float16_masked_softmax_matches_oracle_on_gpu():
    scores = onp.random.normal(scale=100, size=(2, 4, 6)).astype('float16')
    mask = _padded_rows_mask()
    out = ga.masked_softmax(np.array(scores, ctx=mx.gpu()), np.array(mask, ctx=mx.gpu()))
    assert onp.isfinite(out.asnumpy()).all()
    onp.testing.assert_allclose(out.asnumpy(), ref.masked_softmax(scores, mask), **tol('float16'))


def test_float16_masked_softmax_scores_1e4_has_finite_gradients():
    """Scores uniform in [-1e4, 1e4], a padding mask and a fully masked row."""
    scores = onp.asarray(onp.random.RandomState(2).uniform(-1e4, 1e4, size=(2, 4, 6)), 'float16')
    mask = onp.ones((2, 4, 6), bool)
    mask[0, :, 2:] = False
    mask[1, 3, :] = False
    x = np.array(scores, dtype='float16')
    x.attach_grad()
    with autograd.record():
        w = ga.masked_softmax(x, np.array(mask))
        (w * np.arange(6).astype('float16')).sum().backward()
    w = w.asnumpy()
    assert w.dtype == onp.float16 and onp.all(onp.isfinite(w))
    assert onp.all(w[~mask] == 0) and onp.all(w[1, 3] == 0)
    assert onp.all(onp.isfinite(x.grad.asnumpy()))
    expected = ga.masked_softmax(np.array(scores.astype('float32')), np.array(mask)).asnumpy()
    onp.testing.assert_allclose(w.astype('float32'), expected, **F16_TOL)


def _large_inputs(rng, b, lq, lm, c, cv, big=True):
    """q and k whose dot products reach about 1e4 in magnitude (float16-representable)."""
    q = rng.normal(size=(b, lq, c)) * (30.0 if big else 1.0)
    k = rng.normal(size=(b, lm, c)) * (30.0 if big else 1.0)
    return [onp.asarray(x, 'float16').astype('float32') for x in
            (q, k, rng.normal(size=(b, lm, cv)))]


@pytest.mark.parametrize('name', ['dot', 'additive', 'multihead'])
def test_float16_blocks_fully_masked_and_large_scores(name):
    rng = onp.random.RandomState(0)
    q, k, v = _large_inputs(rng, 2, 3, 5, 8, 4, big=name == 'dot')
    valid_length = onp.array([0, 3], 'int32')                 # sample 0: every row fully masked
    block = {'dot': lambda: ga.DotProductAttention(),
             'additive': lambda: ga.AdditiveAttention(6),
             'multihead': lambda: ga.MultiHeadAttention(8, 2)}[name]()
    block.initialize(mx.init.Normal(0.3))
    context = check_float16_matches_float32(block, [q, k, v, valid_length])[0]
    assert onp.all(context[0] == 0)


@pytest.mark.parametrize('layout', ['NKT', 'NTK', 'TNK'])
def test_float16_cell_causal_with_left_padding(layout):
    """Causal mask AND a left-padding key mask: the first query rows of a left-padded sample see
    only padding, so they are fully masked; scores reach 1e4."""
    rng = onp.random.RandomState(1)
    b, heads, length, c = 2, 2, 6, 4
    causal = ga.gen_self_attn_mask(np.zeros((b, length, 1)), attn_type='causal').asnumpy()
    pad = onp.ones((b, 1, length), bool)
    pad[1, 0, :3] = False                                      # sample 1: 3 left-padded tokens
    mask = (causal & pad).astype('float32')
    assert not mask[1, 0].any()
    shape = {'NKT': (b, heads, length, c), 'NTK': (b, length, heads, c),
             'TNK': (length, b, heads, c)}[layout]
    q, k, v = [onp.asarray(rng.normal(size=shape) * s, 'float16').astype('float32')
               for s in (40.0, 40.0, 1.0)]
    check_float16_matches_float32(ga.MultiHeadAttentionCell(layout=layout), [q, k, v, mask])
