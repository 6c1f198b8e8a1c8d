"""valid_length holds lengths, never a mask, at every attention entry point and in every mode.

- A bool valid_length is a TypeError whatever its shape, naming the conversion of a Hugging Face
  attention_mask (``mask.sum(axis=-1)``).
- A (B, L_q) valid_length that looks like a 0/1 padding mask (every value 0 or 1, L_m > 1, some
  row holding more than one 1) is a ValueError; such an array read as per-query lengths would
  let those queries attend memory position 0 only, silently.
- Per-query lengths that are not mask-like (one 1 per row, values above 1, L_m = 1) still run,
  and their weights are zero past each query's length.
"""
import numpy as onp
import pytest
from mxnet import np

from block_utils import initialized, ints, rand
from conftest import HYBRID_MODES, hybridize_mode
import gluon_attention as ga
from gluon_attention.core import cells

HF_MASK = [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]        # (B, L_q) = (2, 5), L_m = 5
CONVERSION = r'mask\.sum\(axis=-1\)'


def _mha(mode):
    block = initialized(cells.MultiHeadAttention(units=16, num_heads=4))
    return hybridize_mode(block, mode)


def _cell(mode):
    return hybridize_mode(cells.MultiHeadAttentionCell(layout='NTK'), mode)


def _call(entry, mode, valid_length, l_m=5):
    """Call one entry point on (B=2, L_q=5) queries and ``l_m`` memory positions."""
    if entry == 'MultiHeadAttention':
        x, mem = rand(2, 5, 16), rand(2, l_m, 16)
        return _mha(mode)(x, mem, mem, valid_length)[1]                        # (B, K, L_q, L_m)
    q, mem = rand(2, 5, 4, 4), rand(2, l_m, 4, 4)                             # NTK
    if entry == 'MultiHeadAttentionCell':
        return _cell(mode)(q, mem, mem, None, None, valid_length)[1]
    return ga.multi_head_dot_attn(q, mem, mem, layout='NTK', valid_length=valid_length)[1][1]


ENTRIES = ['MultiHeadAttention', 'MultiHeadAttentionCell', 'multi_head_dot_attn']
CASES = [(e, m) for e in ENTRIES for m in (HYBRID_MODES if e != 'multi_head_dot_attn'
                                               else ('imperative',))]


@pytest.mark.parametrize('entry, mode', CASES)
@pytest.mark.parametrize('shape', [(2,), (2, 5)])
def test_bool_valid_length_is_a_type_error_in_every_shape(entry, mode, shape):
    with pytest.raises(TypeError, match=r'not a bool mask.*{}.*valid_length\.dtype=.bool'.format(
            CONVERSION)):
        _call(entry, mode, np.ones(shape, dtype=bool))


@pytest.mark.parametrize('entry, mode', CASES)
@pytest.mark.parametrize('dtype', ['int32', 'int64', 'float32'])
def test_a_padding_mask_given_as_per_query_lengths_is_refused(entry, mode, dtype):
    with pytest.raises(ValueError, match=r'not a 0/1 padding mask.*{}.*valid_length\[0\]=\[1, 1, '
                       r'1, 1, 1\]'.format(CONVERSION)):
        _call(entry, mode, ints(HF_MASK, dtype))


@pytest.mark.parametrize('entry, mode', CASES)
@pytest.mark.parametrize('lengths, l_m', [
    ([[1, 0, 0, 0, 0], [0, 1, 0, 0, 0]], 5),        # at most one 1 per row
    ([[1, 2, 3, 4, 5], [1, 1, 0, 0, 0]], 5),        # a value above 1
    ([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]], 1),        # L_m = 1: every length is 0 or 1
])
def test_per_query_lengths_that_are_not_mask_like_still_run(entry, mode, lengths, l_m):
    weights = _call(entry, mode, ints(lengths), l_m).asnumpy()                # (B, K, L_q, L_m)
    allowed = onp.arange(l_m)[None, None, :] < onp.asarray(lengths)[:, :, None]   # (B, L_q, L_m)
    assert onp.all(weights[~onp.broadcast_to(allowed[:, None], weights.shape)] == 0)
    onp.testing.assert_allclose(weights.sum(-1), onp.broadcast_to(
        (onp.asarray(lengths) > 0)[:, None], weights.shape[:3]).astype('float32'), atol=1e-6)


def test_converted_mask_gives_the_masked_weights():
    """The conversion the messages name, mask.sum(axis=-1), gives the mask's attention."""
    mask = ints(HF_MASK)
    q, mem = rand(2, 5, 4, 4), rand(2, 5, 4, 4)
    by_lengths = ga.multi_head_dot_attn(q, mem, mem, layout='NTK',
                                        valid_length=mask.sum(axis=-1))[1][1].asnumpy()
    key_mask = np.expand_dims(mask, 1)                                        # (B, 1, L_m)
    by_mask = ga.multi_head_dot_attn(q, mem, mem, key_mask, layout='NTK')[1][1].asnumpy()
    onp.testing.assert_allclose(by_lengths, by_mask, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('mode', HYBRID_MODES)
def test_encoder_layer_refuses_a_bool_valid_length_and_a_mask_as_lengths(mode):
    layer = hybridize_mode(initialized(ga.TransformerEncoderLayer(16, 32, 4)), mode)
    data = rand(2, 5, 16)
    with pytest.raises(TypeError, match=CONVERSION):
        layer(data, np.array(onp.asarray(HF_MASK, dtype=bool)))
    with pytest.raises(ValueError, match='not a 0/1 padding mask'):
        layer(data, ints(HF_MASK))
