"""valid_length as int32, int64 or integral float32 gives identical outputs (blocks, mask builder
and masked_softmax), also with float16 data."""
import numpy as onp
import pytest
from mxnet import np

import reference as ref
from block_utils import flat, initialized, ints, rand
from conftest import hybridize_mode, tol
import gluon_attention as ga

LENGTH_DTYPES = ('int32', 'int64', 'float32')


def _blocks():
    return [ga.DotProductAttention(), initialized(ga.AdditiveAttention(4)),
            initialized(ga.MultiHeadAttention(8, 2))]


@pytest.mark.parametrize('mode', ['imperative', 'hybridize'])
def test_valid_length_dtypes_give_identical_block_outputs(mode):
    """Data (2, 5, 8), lengths [3, 5]; float16 data with int32 lengths stays close."""
    q = rand(2, 5, 8)
    for block in _blocks():
        hybridize_mode(block, mode)
        outs = [flat(block(q, q, q, ints([3, 5], dt))) for dt in LENGTH_DTYPES]
        for out in outs[1:]:
            for a, b in zip(outs[0], out):
                onp.testing.assert_array_equal(a, b)
        half = q.astype('float16')
        for a, b in zip(outs[0], flat(block(half, half, half, ints([3, 5])))):
            assert b.dtype == onp.float16
            onp.testing.assert_allclose(b, a, **tol('float16'))


@pytest.mark.parametrize('dtype', LENGTH_DTYPES)
def test_valid_length_dtypes_in_mask_builder_match_oracle(dtype):
    scores = rand(2, 5, 5)
    mask = np.expand_dims(ga.valid_length_to_mask(scores, ints([3, 5], dtype), axis=2), 1)
    expected = ref.masked_softmax(scores, ref.valid_length_to_mask([3, 5], 5)[:, None])
    onp.testing.assert_allclose(ga.masked_softmax(scores, mask).asnumpy(), expected, **tol())


@pytest.mark.parametrize('dtype', ['float32', 'int32'])
def test_float_lengths_give_known_weights(dtype):
    """Data [[1, 2], [3, 4]], lengths [1, 2] -> [[1, 0], [0.269, 0.731]]."""
    data = np.array([[1.0, 2.0], [3.0, 4.0]])
    mask = ga.valid_length_to_mask(data, ints([1, 2], dtype), axis=1)
    out = ga.masked_softmax(data, mask).asnumpy()
    onp.testing.assert_allclose(out, [[1.0, 0.0], [0.26894142, 0.73105858]], rtol=1e-6)
