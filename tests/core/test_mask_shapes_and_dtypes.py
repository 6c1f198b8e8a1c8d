"""Which masks the attention accepts: broadcastable shapes in the multi-head cell, outputs shaped
like the scores, and bool / float / int masks giving identical weights."""
import numpy as onp
import pytest
from mxnet import np

import reference as ref
from block_utils import ints, rand
from conftest import tol
import gluon_attention as ga


def test_multi_head_cell_accepts_row_key_and_library_masks():
    """Tokens [[5, 7, 0, 0]] -> valid length [2]. A (B, T, 1) mask masks query rows, a (B, 1, T)
    mask masks keys, the library's (B, T, T) mask masks keys: the cell (NTK) matches the oracle
    and padded keys get weight 0."""
    tokens = onp.array([[5, 7, 0, 0]])
    data = rand(1, 4, 6)
    q, k, v = rand(1, 4, 2, 3), rand(1, 4, 2, 3), rand(1, 4, 2, 3)
    cell = ga.MultiHeadAttentionCell(6, 2, layout='NTK')
    keep = ref.valid_length_to_mask(onp.array([2]), 4)                       # (1, 4)
    library = ga.gen_mem_attn_mask(data, ints((tokens != 0).sum(1)), data).asnumpy()
    for mask in (keep[:, :, None], keep[:, None, :], library):
        ctx, weights = cell(q, k, v, np.array(mask, dtype=bool))
        expected = ref.multi_head_dot_attn(q, k, v, mask, layout='NTK')
        assert onp.isfinite(ctx.asnumpy()).all() and onp.isfinite(weights.asnumpy()).all()
        onp.testing.assert_allclose(ctx.asnumpy(), expected[0], **tol())
        onp.testing.assert_allclose(weights.asnumpy(), expected[2], **tol())
        if mask.shape[2] == 4:                                   # the mask covers the keys
            assert onp.all(weights.asnumpy()[..., 2:] == 0)


@pytest.mark.parametrize('shape', [(2, 3, 5), (2, 1, 5), (1, 3, 1), (1, 1, 1)])
def test_masked_softmax_output_shaped_like_scores(shape):
    assert ga.masked_softmax(rand(2, 3, 5), np.ones(shape, dtype=bool)).shape == (2, 3, 5)


def test_mask_dtypes_give_identical_weights_and_non_binary_masks_are_refused():
    """Keep pattern [1, 1, 0, 0] as bool, float32 and int32: identical weights, 0 at positions
    2-3; a mask mixing 1 with 0.5, or 0 with -inf (additive), is a ValueError."""
    scores = rand(2, 3, 4)
    pattern = onp.broadcast_to(onp.array([1, 1, 0, 0]), (2, 3, 4))
    outs = [ga.masked_softmax(scores, np.array(pattern, dtype=dt)).asnumpy()
            for dt in (bool, 'float32', 'int32')]
    for out in outs[1:]:
        onp.testing.assert_array_equal(out, outs[0])
    assert onp.all(outs[0][..., 2:] == 0)
    for bad in (onp.where(pattern, 1.0, 0.5), onp.where(pattern, 0.0, -onp.inf)):
        with pytest.raises(ValueError, match='Received:'):
            ga.masked_softmax(scores, np.array(bad, dtype='float32'))
