"""Error messages from a table: ValueError/TypeError whose message contains 'Received:'."""
import mxnet as mx
import numpy as onp
import pytest
from mxnet import np

from gluon_attention.core import cells, masking
from gluon_attention.models import encoder
from gluon_attention.core import functional as fn
from gluon_attention.compat import attend as sa


def _rand(*shape):
    return np.array(onp.random.normal(size=shape), dtype='float32')


def _int(values):
    return np.array(onp.asarray(values), dtype='int32')


def _dpa(*args):
    return cells.DotProductAttention()(*args)


def _additive(*args):
    block = cells.AdditiveAttention(4)
    block.initialize()
    return block(*args)


def _mha(*args):
    block = cells.MultiHeadAttention(6, 2)
    block.initialize()
    return block(*args)


def _bert():
    block = encoder.BertEncoder(vocab_size=10, units=8, hidden_size=8, num_layers=1,
                                num_heads=2)
    block.initialize()
    return block


def _mha_hybrid(*args):
    block = cells.MultiHeadAttention(6, 2)
    block.initialize()
    block.hybridize(static_alloc=True)
    return block(*args)


def _mha_twice(query):
    block = cells.MultiHeadAttention(6, 2)
    block.initialize()
    block(_rand(2, 3, 4), _rand(2, 5, 4), _rand(2, 5, 4))
    return block(query, _rand(2, 5, 4), _rand(2, 5, 4))


Q, K, V = _rand(2, 3, 4), _rand(2, 5, 4), _rand(2, 5, 6)
Q4, K4, V4 = _rand(2, 3, 3, 4), _rand(2, 3, 5, 4), _rand(2, 3, 5, 6)

CASES = [
    # bad layout
    ('layout', lambda: fn.multi_head_dot_attn(Q4, K4, V4, layout='NCHW'), 'NCHW'),
    ('layout', lambda: cells.MultiHeadAttentionCell(layout='NCHW'), 'NCHW'),
    ('layout', lambda: masking.gen_self_attn_mask(Q, layout='NTC'), 'NTC'),
    ('layout', lambda: masking.gen_mem_attn_mask(K, _int([5, 5]), Q, layout='XY'), 'XY'),
    ('layout', lambda: fn.dot_attn_score(Q, K, layout='NCT'), 'NCT'),
    # bad attn_type
    ('attn_type', lambda: masking.gen_self_attn_mask(Q, attn_type='banana'), 'banana'),
    # non-divisible units
    ('units', lambda: cells.MultiHeadAttentionCell(query_units=10, num_heads=3), '10'),
    ('units', lambda: cells.MultiHeadAttention(10, 3), '10'),
    ('units', lambda: cells.MultiHeadAttention(0, 3), '0'),
    ('units', lambda: cells.AdditiveAttention(0), '0'),
    ('units', lambda: cells.MultiHeadAttentionCell(query_units=12), None),
    # mismatched batch sizes
    ('batch', lambda: fn.multi_head_dot_attn(Q4, _rand(3, 3, 5, 4), _rand(3, 3, 5, 6)), None),
    ('batch', lambda: _dpa(Q, _rand(3, 5, 4), _rand(3, 5, 6)), None),
    ('batch', lambda: _additive(Q, _rand(3, 5, 4), _rand(3, 5, 6)), None),
    ('batch', lambda: _mha(Q, _rand(3, 5, 4), _rand(3, 5, 6)), None),
    ('batch', lambda: sa.attend(Q, _rand(3, 5, 4)), None),
    ('batch', lambda: _dpa(Q, K, V, _int([5, 5, 5])), None),
    ('batch', lambda: fn.dot_attn_score(Q, _rand(3, 5, 4)), None),
    # key / value length mismatch, feature mismatch
    ('length', lambda: _dpa(Q, K, _rand(2, 4, 6)), None),
    ('features', lambda: _dpa(Q, _rand(2, 5, 3), V), None),
    # wrong-rank masks and inputs
    ('mask rank', lambda: fn.masked_softmax(Q, np.ones((2, 4), dtype=bool)), None),
    ('mask rank', lambda: fn.masked_softmax(Q, np.ones((2, 1, 1, 4), dtype=bool)), None),
    ('mask rank', lambda: fn.multi_head_dot_attn(Q4, K4, V4, np.ones((2, 1, 3, 5))), None),
    ('mask shape', lambda: fn.multi_head_dot_attn(Q4, K4, V4, np.ones((2, 3, 4))), None),
    ('mask rank', lambda: cells.MultiHeadAttentionCell(layout='NKT')(
        Q4, K4, V4, np.ones((2, 5)), None), None),
    ('input rank', lambda: _dpa(Q4, K4, V4), None),
    ('input rank', lambda: fn.multi_head_dot_attn(Q, K, V), None),
    ('valid_length rank', lambda: _dpa(Q, K, V, _int(onp.ones((2, 3, 1)))), None),
    # bad normalize / score names
    ('normalize', lambda: sa.attend(Q, K, normalize='relu'), 'relu'),
    ('score', lambda: sa.attend(Q, K, score='cosine'), 'cosine'),
    # non-binary masks
    ('binary', lambda: fn.masked_softmax(Q, np.full((2, 3, 4), 0.5)), None),
    ('binary', lambda: fn.masked_softmax(Q, np.full((2, 3, 4), -onp.inf)), None),
    ('binary', lambda: fn.masked_log_softmax(Q, np.full((2, 3, 4), 2.0)), None),
    ('binary', lambda: fn.multi_head_dot_attn(Q4, K4, V4, np.full((2, 3, 5), 0.5)), None),
    # out-of-range or non-integral valid_length
    ('valid_length', lambda: _dpa(Q, K, V, _int([6, 1])), None),
    ('valid_length', lambda: _dpa(Q, K, V, _int([-1, 1])), None),
    ('valid_length', lambda: _dpa(Q, K, V, np.array([2.5, 1.0])), None),
    ('valid_length', lambda: _additive(Q, K, V, _int([6, 1])), None),
    ('valid_length', lambda: _mha(Q, K, V, _int([1, 9])), None),
    ('valid_length', lambda: masking.gen_self_attn_mask(Q, _int([4, 1])), None),
    ('valid_length', lambda: masking.gen_mem_attn_mask(K, _int([6, 1]), Q), None),
    ('valid_length', lambda: masking.gen_mem_attn_mask(K, _int([5, 1]), Q, _int([1, 4])), None),
    ('positions', lambda: fn.select_vectors_by_position(Q, _int([[0, 3]])), None),
    ('positions', lambda: fn.select_vectors_by_position(Q, _int([[0, 3], [1, 1]])), None),
    # dropout outside [0, 1)
    ('dropout', lambda: cells.DotProductAttention(dropout=1.0), '1.0'),
    ('dropout', lambda: cells.DotProductAttention(dropout=-0.1), '-0.1'),
    ('dropout', lambda: cells.AdditiveAttention(4, dropout=1.5), '1.5'),
    ('dropout', lambda: cells.MultiHeadAttentionCell(attention_dropout=1.0), '1.0'),
    ('dropout', lambda: cells.MultiHeadAttention(6, 2, dropout=2), '2'),
    ('dropout', lambda: fn.multi_head_dot_attn(Q4, K4, V4, dropout=1.0), None),
    # masked_softmax arguments (session 3: no raw MXNet errors)
    ('scores dtype', lambda: fn.masked_softmax(_int([[1, 2]])), 'int32'),
    ('scores type', lambda: fn.masked_softmax(onp.zeros((2, 3))), 'ndarray'),
    ('axis', lambda: fn.masked_softmax(Q, axis=5), '5'),
    ('axis', lambda: fn.masked_softmax(Q, axis=1.5), '1.5'),
    ('axis', lambda: fn.masked_log_softmax(Q, axis=-4), '-4'),
    ('temperature', lambda: fn.masked_softmax(Q, temperature=0), '0'),
    ('temperature', lambda: fn.masked_softmax(Q, temperature=float('nan')), 'nan'),
    ('temperature', lambda: fn.masked_softmax(Q, temperature='hot'), 'hot'),
    ('mask type', lambda: fn.masked_softmax(Q, onp.ones((2, 3, 4))), 'ndarray'),
    ('units', lambda: fn.multi_head_dot_attn(Q4[..., :0], K4[..., :0], V4), None),
    # MultiHeadAttention inputs, also when hybridized (checked on arrays before the graph)
    ('dtype', lambda: _mha(Q.astype('float64'), K, K), 'float64'),
    ('features', lambda: _mha_twice(_rand(2, 3, 5)), None),
    ('batch', lambda: _mha_hybrid(Q, _rand(3, 5, 4), _rand(3, 5, 4)), None),
    ('dropout', lambda: cells.MultiHeadAttention(6, 2, dropout=1.0), 'dropout=1.0'),
    # BertEncoder inputs and loader arguments
    ('T=0', lambda: _bert()(_int(onp.zeros((2, 0))), _int(onp.zeros((2, 0))), _int([0, 0])),
     None),
    ('ctx', lambda: encoder.BertEncoder.from_pretrained(None, 'cpu'), "'cpu'"),
    ('path', lambda: encoder.BertEncoder.from_pretrained(42), 'int'),
    # seed helpers: sizes must be a list of non-negative ints
    ('sizes', lambda: sa.mask3d(V, [2, -1]), None),
    ('sizes', lambda: sa.attend(Q, K, context_sizes=[1.5, 2]), None),
]


@pytest.mark.parametrize('topic,call,received', CASES,
                         ids=['{}-{}'.format(i, c[0]) for i, c in enumerate(CASES)])
def test_error_message(topic, call, received):
    with pytest.raises((ValueError, TypeError)) as err:
        out = call()
        mx.nd.waitall()
        del out
    message = str(err.value)
    assert 'Received:' in message, message
    if received is not None:
        assert received in message.split('Received:', 1)[1], message
    assert not isinstance(err.value, mx.base.MXNetError), message
