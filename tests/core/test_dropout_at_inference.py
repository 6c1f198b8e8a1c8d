"""Attention dropout is the identity outside training (imperative, hybridized, exported and
reloaded) and random inside ``autograd.record(train_mode=True)``."""
import mxnet as mx
import pytest

from block_utils import check_dropout_is_identity_at_inference, ints, rand
import gluon_attention as ga

BLOCKS = {
    'DotProductAttention': lambda: ga.DotProductAttention(dropout=0.5),
    'AdditiveAttention': lambda: ga.AdditiveAttention(6, dropout=0.5),
    'MultiHeadAttention': lambda: ga.MultiHeadAttention(8, 2, dropout=0.5),
    'MultiHeadAttentionCell': lambda: ga.MultiHeadAttentionCell(attention_dropout=0.5,
                                                                   layout='NKT'),
}


@pytest.mark.parametrize('name', sorted(BLOCKS))
def test_dropout_is_identity_at_inference(name, tmp_path):
    block = BLOCKS[name]()
    block.initialize(mx.init.Normal(0.5))
    if name == 'MultiHeadAttentionCell':
        inputs = [rand(2, 2, 3, 4), rand(2, 2, 5, 4), rand(2, 2, 5, 6), mx.np.ones((2, 1, 5))]
    else:
        inputs = [rand(2, 3, 4), rand(2, 5, 4), rand(2, 5, 6), ints([5, 3])]
    check_dropout_is_identity_at_inference(block, inputs, tmp_path, name)
