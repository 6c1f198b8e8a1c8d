"""bfloat16 inference graphs (gluon_attention.core.matmul_graph): an exported float32 encoder
rewritten so that its products and the activations between them run in bfloat16 returns the
float32 encoder's output within GRAPH_TOL (and that of the encoder with
matmul_dtype='bfloat16', the training path whose products are checked against a NumPy bfloat16
oracle in test_matmul.py, whose activations stay float32); its product weights are bfloat16
parameters (cast once), every other parameter float32; the only casts left are the entry (the
embeddings' LayerNorm output, to bfloat16) and the output (to float32): every product reads
bfloat16 from the fused operators, copies and reshapes before it; the fused attention nodes
get matmul_dtype='bfloat16'; bad graphs are refused."""
import json

import mxnet as mx
import numpy as onp
import pytest

from gluon_attention.core import matmul
from gluon_attention.core.matmul import set_matmul_dtype
from gluon_attention.core.matmul_graph import Bfloat16Graph, bfloat16_products
from gluon_attention.models.encoder import BertEncoder

needs_bf16 = pytest.mark.skipif(matmul.bfloat16_problem() is not None,
                                reason='no bfloat16 products here: {}'.format(
                                    matmul.bfloat16_problem()))
NAMES = ['data0', 'data1', 'data2']
#: Largest |bfloat16 graph - float32| output of the 2-layer fixture, as a fraction of the largest
#: |output|: each product rounds its operands and result to bfloat16 (2^-8 relative each), each
#: fused operator its result, through 2 layers of 6 products (measured: 0.73%).
GRAPH_TOL = 0.02


@pytest.fixture(scope='module')
def exported(tmp_path_factory):
    """A small float32 encoder, hybridized, exported: (encoder, inputs, symbol json, params)."""
    mx.npx.set_np()
    rng = onp.random.RandomState(3)
    enc = BertEncoder(vocab_size=50, units=32, hidden_size=64, num_layers=2, num_heads=4,
                      max_length=16, dropout=0.0, attention_dropout=0.0)
    enc.initialize(mx.init.Normal(0.3))
    enc.hybridize(static_alloc=True)
    inputs = (mx.np.array(rng.randint(0, 50, (3, 12)), dtype='int32'),
              mx.np.zeros((3, 12), dtype='int32'), mx.np.array([12, 5, 9], dtype='int32'))
    enc(*inputs).wait_to_read()
    prefix = str(tmp_path_factory.mktemp('graph') / 'enc')
    enc.export(prefix)
    symbol, arg, aux = mx.model.load_checkpoint(prefix, 0)
    return enc, inputs, symbol.tojson(), dict(arg, **aux)


@needs_bf16
def test_the_graph_is_float32_within_bfloat16_rounding(exported):
    enc, inputs, symbol_json, params = exported
    want32 = enc(*inputs).asnumpy()
    set_matmul_dtype(enc, 'bfloat16')
    try:
        products = enc(*inputs).asnumpy()
    finally:
        set_matmul_dtype(enc, 'float32')
    got = Bfloat16Graph(symbol_json, params, NAMES, ['int32'] * 3)(*inputs)
    assert isinstance(got, mx.np.ndarray) and got.dtype == onp.float32
    valid = onp.arange(12)[None, :] < onp.array([12, 5, 9])[:, None]     # meaningful rows
    for want in (want32, products):
        assert abs(got.asnumpy() - want)[valid].max() <= GRAPH_TOL * abs(want).max()
    # bfloat16 activations: other numbers than float32 activations between the products
    assert abs(got.asnumpy() - products)[valid].max() > 1e-4 * abs(products).max()


def test_only_product_weights_become_bfloat16(exported):
    _, _, symbol_json, params = exported
    symbol, converted = bfloat16_products(symbol_json, params)
    nodes = json.loads(symbol.tojson(remove_amp_cast=False))['nodes']
    product_inputs = {nodes[s]['name'] for n in nodes if n['op'] == 'FullyConnected'
                      for s, _, _ in n['inputs']}
    for name, value in converted.items():
        want = matmul.BFLOAT16 if name in product_inputs else onp.float32
        assert value.dtype == want, name
        assert params[name].dtype == onp.float32                  # the given ones untouched
    # 12 weights, and the biases the products read (the fused bias + GELU reads its own)
    assert len(product_inputs & set(params)) >= 12
    old_ops = sorted(n['op'] for n in json.loads(symbol_json)['nodes'])
    new_ops = sorted(n['op'] for n in nodes)
    assert new_ops == sorted(old_ops + ['amp_cast'] * 2)         # the entry and the output
    casts = [n for n in nodes if n['op'] == 'amp_cast']
    assert [n['attrs']['dtype'] for n in casts] == ['bfloat16', 'float32']
    assert nodes[casts[0]['inputs'][0][0]]['op'] == '_np_copy'   # the embeddings' dropout
    heads = json.loads(symbol.tojson(remove_amp_cast=False))['heads']
    assert nodes[heads[0][0]] is casts[1]
    # the fused attention's forward products follow (as the encoders' matmul_dtype does)
    attention = [n for n in nodes if n['op'] == 'ga_fused_attention']
    assert len(attention) == 2 and all(
        n['attrs'].get('matmul_dtype') == 'bfloat16' for n in attention)


@pytest.mark.parametrize('text, fragment', [
    ('not json', 'must be an MXNet graph'),
    ('{"nodes": [{"op": "null", "name": "x", "inputs": []}], "heads": [[0, 0, 0]]}',
     'no FullyConnected')])
def test_bad_graphs_are_refused(text, fragment):
    with pytest.raises(ValueError, match=fragment) as err:
        bfloat16_products(text, {})
    assert 'Received: symbol_json=' in str(err.value)


@needs_bf16
def test_from_exported_reads_what_export_block_wrote(exported, tmp_path):
    from gluon_attention.export import export_block
    enc, inputs, symbol_json, params = exported
    enc(*inputs).wait_to_read()                 # its graph cached again (export needs it)
    export_block(enc, str(tmp_path / 'enc'), ['token_ids', 'token_types', 'valid_length'],
                 ['int32'] * 3)
    want = Bfloat16Graph(symbol_json, params, NAMES, ['int32'] * 3)(*inputs).asnumpy()
    got = Bfloat16Graph.from_exported(str(tmp_path / 'enc'))(*inputs).asnumpy()
    assert onp.array_equal(got, want)
    with pytest.raises(ValueError, match='Received: prefix='):
        Bfloat16Graph.from_exported(str(tmp_path / 'missing'))
