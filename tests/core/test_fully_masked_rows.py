"""Fully masked rows (a memory length of 0, or query rows beyond a query length): all-zero
weights and a zero context, finite gradients, imperative equal to hybridized."""
import mxnet as mx
import numpy as onp
import pytest

from block_utils import forward_backward, ints, rand
from conftest import HYBRID_MODES, HYBRID_TOL, hybridize_mode
import gluon_attention as ga


def _all_finite(arrays):
    return all(onp.isfinite(a).all() for a in arrays)


def _imperative_and(mode, make_block, *args):
    """(outputs, gradients) of a fresh block imperative and in ``mode``; both finite and equal."""
    results = [forward_backward(hybridize_mode(make_block(), m), *args)
               for m in ('imperative', mode)]
    (outs, grads), (outs_h, grads_h) = results
    assert _all_finite(outs + grads)
    for a, b in zip(outs + grads, outs_h + grads_h):
        onp.testing.assert_allclose(a, b, rtol=HYBRID_TOL, atol=HYBRID_TOL)
    return outs


@pytest.mark.parametrize('mode', HYBRID_MODES)
def test_fully_masked_rows_are_zero_in_dot_product_and_multi_head_cell(mode):
    """q (2, 3, 8), k = v (2, 4, 8); memory lengths [4, 0] (B,), or (B, L_q) lengths that block
    query rows 1-2 of sample 1; the multi-head cell (NTK) takes the library's memory masks."""
    q, kv = rand(2, 3, 8), rand(2, 4, 8)
    for lengths, empty in [([4, 0], (1, slice(None))), ([[4, 4, 4], [4, 0, 0]], (1, slice(1, 3)))]:
        ctx, weights = _imperative_and(mode, ga.DotProductAttention, q, kv, kv, ints(lengths))
        assert onp.all(weights[empty] == 0) and onp.all(ctx[empty] == 0)
    qh, kvh = rand(2, 3, 2, 4), rand(2, 4, 2, 4)
    masks = [ga.gen_mem_attn_mask(kv, ints([4, 0]), q),
             ga.gen_mem_attn_mask(kv, ints([4, 4]), q, ints([3, 1]))]
    for mask, (batch, rows) in zip(masks, [(1, slice(None)), (1, slice(1, 3))]):
        ctx, weights = _imperative_and(
            mode, lambda: ga.MultiHeadAttentionCell(8, 2, layout='NTK'), qh, kvh, kvh, mask)
        assert onp.all(weights[batch, :, rows] == 0)
        assert onp.all(ctx[batch, rows] == 0)


def test_valid_length_zero_gives_zero_weights_and_context():
    """masked_softmax on (2, 2, 4) with lengths [0, 3]: sample 0 all 0, sample 1 rows sum to 1
    with the last column exactly 0; dot-product and additive attention give sample 0 a zero
    context; gradients finite."""
    scores = rand(2, 2, 4)
    mask = mx.np.expand_dims(ga.valid_length_to_mask(scores, ints([0, 3]), axis=2), 1)
    scores.attach_grad()
    with mx.autograd.record():
        w = ga.masked_softmax(scores, mask)
    w.backward()
    w = w.asnumpy()
    assert onp.all(w[0] == 0)
    onp.testing.assert_allclose(w[1].sum(-1), 1.0, rtol=1e-6)
    assert onp.all(w[1, :, 3] == 0)
    assert onp.isfinite(scores.grad.asnumpy()).all()
    q, k, v = rand(2, 2, 3), rand(2, 4, 3), rand(2, 4, 5)
    additive = ga.AdditiveAttention(4)
    additive.initialize()
    for block in (ga.DotProductAttention(), additive):
        outs, grads = forward_backward(block, q, k, v, ints([0, 3]))
        assert onp.all(outs[0][0] == 0) and onp.all(outs[1][0] == 0)
        assert _all_finite(outs + grads)
