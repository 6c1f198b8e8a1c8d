"""float16 through the NLI alignment and the Transformer encoder: finite float16 outputs and
gradients (a sentence of length 0 included), close to the float32 run."""
import mxnet as mx
import numpy as onp
import pytest

from block_utils import check_float16_matches_float32
from gluon_attention.models.encoder import TransformerEncoder
from gluon_attention.models.nli import Attend


@pytest.mark.parametrize('name', ['attend', 'encoder'])
def test_float16_nli_attend_and_encoder_match_float32(name):
    rng = onp.random.RandomState(3)
    if name == 'attend':
        block = Attend(6)
        inputs = [rng.normal(size=(2, 3, 4)), rng.normal(size=(2, 5, 4)),
                  onp.array([3, 0], 'int32'), onp.array([5, 2], 'int32')]
    else:
        block = TransformerEncoder(num_layers=1, units=8, hidden_size=16, num_heads=2)
        inputs = [rng.normal(size=(2, 5, 8)), onp.array([5, 0], 'int32')]
    block.initialize(mx.init.Normal(0.3))
    check_float16_matches_float32(block, [onp.asarray(x, 'float16').astype('float32')
                                          if x.dtype.kind == 'f' else x for x in inputs])
