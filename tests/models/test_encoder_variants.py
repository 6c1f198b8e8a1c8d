"""BertEncoder configured as the other BERT-family architectures: no token types (RoBERTa,
DistilBERT), ReLU (ERNIE), their epsilon and position table; written and read back through
config.json + model.safetensors. Parity with GluonNLP 0.10 itself: test_gluonnlp_parity.py."""
import mxnet as mx
import numpy as onp
import pytest

from conftest import HYBRID_MODES, hybridize_mode
from gluon_attention.models.checkpoint import write_checkpoint
from gluon_attention.models.encoder import BertEncoder

SMALL = dict(vocab_size=23, units=14, hidden_size=22, num_layers=2, num_heads=2, max_length=19,
             dropout=0.0, attention_dropout=0.0)


def _inputs(rng, types=1, batch=3, length=9):
    ids = rng.randint(0, SMALL['vocab_size'], (batch, length)).astype(onp.int32)
    token_types = rng.randint(0, types, (batch, length)).astype(onp.int32)
    return ids, token_types, onp.array([length, 2, 5][:batch], onp.int32)


def _run(block, ids, token_types, valid_length):
    return block(*(mx.np.array(x, dtype=x.dtype) for x in (ids, token_types, valid_length)))


@pytest.mark.parametrize('mode', HYBRID_MODES)
def test_no_token_types_equals_one_zero_type_row(rng, mode):
    mx.random.seed(3)
    without = BertEncoder(num_token_types=0, layer_norm_eps=1e-5, **SMALL)
    without.initialize()
    assert 'token_type_embed.weight' not in without._collect_params_with_prefix()
    with_one = BertEncoder(num_token_types=1, layer_norm_eps=1e-5, **SMALL)
    with_one.initialize()
    ours, theirs = without._collect_params_with_prefix(), with_one._collect_params_with_prefix()
    for name, param in ours.items():
        theirs[name].set_data(param.data())
    theirs['token_type_embed.weight'].set_data(mx.np.zeros((1, 14)))
    inputs = _inputs(rng)
    hybridize_mode(without, mode)
    onp.testing.assert_array_equal(_run(without, *inputs).asnumpy(),
                                   _run(with_one, *inputs).asnumpy())
    hidden = without(mx.np.array(inputs[0], dtype='int32'), None,
                     mx.np.array(inputs[2], dtype='int32'))   # None: one segment
    onp.testing.assert_array_equal(hidden.asnumpy(), _run(with_one, *inputs).asnumpy())


def test_no_token_types_refuses_a_second_segment(rng):
    block = BertEncoder(num_token_types=0, **SMALL)
    block.initialize()
    ids, token_types, valid_length = _inputs(rng, types=2)
    with pytest.raises(ValueError, match=r'token_types: token ids must lie in \[0, 1\).*'
                                         r'Received: \(min, max\) of token_types=\(0, 1\)'):
        _run(block, ids, token_types, valid_length)


def test_relu_differs_from_gelu_and_survives_the_folder(rng, tmp_path):
    mx.random.seed(4)
    relu = BertEncoder(num_token_types=0, activation='relu', layer_norm_eps=1e-5, **SMALL)
    relu.initialize()
    write_checkpoint(relu, tmp_path)
    loaded = BertEncoder.from_pretrained(tmp_path)
    assert loaded.config['activation'] == 'relu' and loaded.config['num_token_types'] == 0
    assert loaded.config['layer_norm_eps'] == 1e-5
    inputs = _inputs(rng)
    onp.testing.assert_array_equal(_run(loaded, *inputs).asnumpy(), _run(relu, *inputs).asnumpy())
    gelu = BertEncoder(num_token_types=0, activation='gelu', layer_norm_eps=1e-5, **SMALL)
    gelu.initialize()
    for name, param in relu._collect_params_with_prefix().items():
        gelu._collect_params_with_prefix()[name].set_data(param.data())
    assert onp.abs(_run(gelu, *inputs).asnumpy() - _run(relu, *inputs).asnumpy()).max() > 1e-3


def test_unknown_activation_is_refused():
    with pytest.raises(ValueError, match=r"activation.*Received: activation='tanh'"):
        BertEncoder(activation='tanh', **SMALL)
