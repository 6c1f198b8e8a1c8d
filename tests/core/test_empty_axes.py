"""Empty axes: a query length of 0 (or an empty softmax axis) gives a finite empty result of the
right shape; a batch of 0 or a memory length of 0 is a ValueError raised before any graph runs
(MXNet's reshapes cannot run on those zero-size dimensions inside a graph). Never a raw MXNet
error."""
import numpy as onp
import pytest
from mxnet import np

from block_utils import initialized, ints, rand
import gluon_attention as ga


def _mha(*args):
    return initialized(ga.MultiHeadAttention(6, 2))(*args)


def _qkv(b=2, lq=3, lm=5):
    return rand(b, lq, 4), rand(b, lm, 4), rand(b, lm, 6)


# (id: function and empty axis, call, expected output shapes)
EMPTY = [
    ('masked_softmax-rows', lambda: ga.masked_softmax(rand(2, 0, 4), np.ones((2, 0, 4))),
     [(2, 0, 4)]),
    ('masked_softmax-axis', lambda: ga.masked_softmax(rand(2, 3, 0), np.ones((2, 3, 0))),
     [(2, 3, 0)]),
    ('DotProductAttention-L_q', lambda: ga.DotProductAttention()(*_qkv(lq=0)),
     [(2, 0, 6), (2, 0, 5)]),
    ('multi_head_dot_attn-L_q', lambda: ga.multi_head_dot_attn(
        rand(2, 2, 0, 4), rand(2, 2, 5, 4), rand(2, 2, 5, 5))[0], [(2, 0, 10)]),
    ('gen_self_attn_mask-T', lambda: ga.gen_self_attn_mask(rand(2, 0, 4), ints([0, 0])),
     [(2, 0, 0)]),
]


@pytest.mark.parametrize('call,shapes', [c[1:] for c in EMPTY], ids=[c[0] for c in EMPTY])
def test_empty_axis_gives_finite_result_of_right_shape(call, shapes):
    out = call()
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    assert [o.shape for o in outs] == shapes
    for o in outs:
        assert onp.all(onp.isfinite(o.asnumpy()))


# (id: function and empty axis, call)
EMPTY_REFUSED = [
    ('DotProductAttention-L_m', lambda: ga.DotProductAttention()(*_qkv(lm=0), ints([0, 0]))),
    ('DotProductAttention-B', lambda: ga.DotProductAttention()(*_qkv(b=0))),
    ('AdditiveAttention-L_m', lambda: initialized(ga.AdditiveAttention(5))(
        rand(2, 3, 4), rand(2, 0, 4), rand(2, 0, 4))),
    ('multi_head_dot_attn-L_m', lambda: ga.multi_head_dot_attn(
        rand(2, 2, 3, 4), rand(2, 2, 0, 4), rand(2, 2, 0, 5))),
    ('MultiHeadAttention-B', lambda: _mha(rand(0, 3, 4), rand(0, 5, 4), rand(0, 5, 4))),
    ('MultiHeadAttention-L_m', lambda: _mha(rand(2, 3, 4), rand(2, 0, 4), rand(2, 0, 4))),
]


@pytest.mark.parametrize('call', [c[1] for c in EMPTY_REFUSED], ids=[c[0] for c in EMPTY_REFUSED])
def test_empty_batch_or_memory_is_a_clear_value_error(call):
    with pytest.raises(ValueError, match='Received:'):
        call()
