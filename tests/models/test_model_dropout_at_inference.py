"""Dropout in the NLI model and the Transformer encoder is the identity outside training
(imperative, hybridized, exported and reloaded) and random in training mode."""
import mxnet as mx
import pytest

from block_utils import check_dropout_is_identity_at_inference, ints, rand
from gluon_attention.models.encoder import TransformerEncoder
from gluon_attention.models.nli import DecomposableAttention


def _nli():
    inputs = [ints([[1, 2, 3]] * 2), ints([[4, 5, 6, 7]] * 2), ints([3, 2]), ints([4, 1])]
    return DecomposableAttention(20, 8, 8, dropout=0.5), inputs


def _encoder():
    block = TransformerEncoder(num_layers=1, units=4, hidden_size=8, num_heads=2, dropout=0.5,
                               attention_dropout=0.5)
    return block, [rand(2, 5, 4), ints([5, 3])]


@pytest.mark.parametrize('name', ['nli', 'encoder'])
def test_model_dropout_is_identity_at_inference(name, tmp_path):
    block, inputs = {'nli': _nli, 'encoder': _encoder}[name]()
    block.initialize(mx.init.Normal(0.5))
    check_dropout_is_identity_at_inference(block, inputs, tmp_path, name)
