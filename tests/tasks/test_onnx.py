"""ONNX export (gluon_attention.export.onnx): every block and model in ONNX Runtime against MXNet.

Each block is hybridized, run once and exported at one shape, converted to ONNX (opset 13), and
run in ONNX Runtime (CPU) at two batch sizes x two sequence lengths other than the export's:
blocks within 1e-5, whole models within rtol = atol = 1e-4. Lengths include 0 (fully masked
rows must come out as the same zeros). Sizes are small distinct numbers.
"""
import warnings

import mxnet as mx
import numpy as onp
import pytest
from mxnet import np
from mxnet.gluon import HybridBlock

import gluon_attention as ga
from gluon_attention.core import fused

pytest.importorskip('onnx', reason='ONNX export needs onnx 1.17 (pip install .[onnx])')
pytest.importorskip('onnxruntime', reason='ONNX parity tests need onnxruntime '
                                          '(pip install .[onnx])')
from gluon_attention.export.onnx import export_onnx, run_onnx  # noqa: E402

BLOCK_TOL = dict(rtol=1e-5, atol=1e-5)
MODEL_TOL = dict(rtol=1e-4, atol=1e-4)
RUN_SIZES = ((1, 7), (4, 3))          # (batch, length) pairs, the export uses (2, 5)
requires_fused = pytest.mark.skipif(not fused.available(), reason='fused kernel not built')


def lengths(batch, length):
    """Valid lengths covering the full length, 0 and values in between."""
    return onp.array([(length, 0, length - 1, 1)[i % 4] for i in range(batch)], 'int32')


def as_mx(arrays):
    return [np.array(a, dtype=a.dtype) for a in arrays]


def flat(out):
    if isinstance(out, (list, tuple)):
        return [a for o in out for a in flat(o)]
    return [out.asnumpy()]


def check_parity(block, make_inputs, names, shapes, tmp_path, tol, sizes=RUN_SIZES):
    """Export ``block`` at (2, 5), run both at ``sizes``; returns the ORT outputs per size and
    the largest absolute difference over finite outputs."""
    inputs = make_inputs(2, 5)
    block.hybridize(static_alloc=True)
    block(*as_mx(inputs))
    path = export_onnx(block, str(tmp_path / 'model.onnx'), names,
                       [str(a.dtype) for a in inputs], shapes)
    results, worst = [], 0.0
    for batch, length in sizes:
        inputs = make_inputs(batch, length)
        want = flat(block(*as_mx(inputs)))
        got = run_onnx(path, inputs)
        assert len(got) == len(want)
        for w, g in zip(want, got):
            assert g.dtype == w.dtype and g.shape == w.shape
            onp.testing.assert_allclose(g, w, **tol)
            finite = onp.isfinite(w)
            if finite.any():
                diff = g[finite].astype('float64') - w[finite].astype('float64')
                worst = max(worst, float(onp.abs(diff).max()))
        results.append((inputs, got))
    return results, worst


def attention_inputs(units_q=6, units_k=6, units_v=4, seed=0):
    def make(batch, length):
        rng = onp.random.RandomState(seed + batch * 31 + length)
        memory = length + 2
        return [rng.normal(size=(batch, length, units_q)).astype('float32'),
                rng.normal(size=(batch, memory, units_k)).astype('float32'),
                rng.normal(size=(batch, memory, units_v)).astype('float32'),
                lengths(batch, memory)]
    return make


QKV_NAMES = ['query', 'key', 'value', 'valid_length']


def qkv_shapes(units_q=6, units_k=6, units_v=4):
    return [('batch', 'query_length', units_q), ('batch', 'memory_length', units_k),
            ('batch', 'memory_length', units_v), ('batch',)]


@pytest.mark.parametrize('make_block', [
    lambda: ga.DotProductAttention(), lambda: ga.AdditiveAttention(8),
    lambda: ga.MultiHeadAttention(12, 3, use_bias=True)],
    ids=['dot_product', 'additive', 'multi_head'])
def test_attention_blocks_match_mxnet_within_1e5_and_give_zero_context_for_length_0(
        make_block, tmp_path):
    mx.random.seed(7)
    block = make_block()
    block.initialize(mx.init.Normal(0.3))
    results, _ = check_parity(block, attention_inputs(), QKV_NAMES, qkv_shapes(), tmp_path,
                              BLOCK_TOL)
    assert any((inputs[3] == 0).any() for inputs, _ in results)
    for inputs, (context, weights) in results:
        empty = inputs[3] == 0
        assert not context[empty].any() and not weights[empty].any()
        assert onp.allclose(weights[~empty].sum(-1), 1, atol=1e-6)


def per_head_inputs(layout, heads=3, units=4, scale=1.0):
    """Per-head query/key/value in ``layout`` and lengths (B,)."""
    def make(batch, length):
        rng = onp.random.RandomState(batch * 7 + length)
        memory = length + 2
        shape = {'NKT': lambda t: (batch, heads, t, units),
                 'NTK': lambda t: (batch, t, heads, units),
                 'TNK': lambda t: (t, batch, heads, units)}[layout]
        return [scale * rng.normal(size=shape(length)).astype('float32'),
                scale * rng.normal(size=shape(memory)).astype('float32'),
                rng.normal(size=shape(memory)).astype('float32'), lengths(batch, memory)]
    return make


def per_head_shapes(layout, heads=3, units=4):
    free = {'NKT': ('batch', heads, '{}', units), 'NTK': ('batch', '{}', heads, units),
            'TNK': ('{}', 'batch', heads, units)}[layout]
    query, memory = (tuple(a.format(t) if isinstance(a, str) else a for a in free)
                     for t in ('query_length', 'memory_length'))
    return [query, memory, memory, ('batch',)]


@mx.util.use_np
class CellWithLengths(HybridBlock):
    """A cell called with key-padding lengths (composed ``use_length`` softmax or fused)."""

    def __init__(self, cell):
        super().__init__()
        self.cell = cell

    def hybrid_forward(self, F, query, key, value, valid_length):  # pylint: disable=W0221
        return self.cell(query, key, value, None, None, valid_length)[0]


@mx.util.use_np
class CellWithMask(CellWithLengths):
    """A cell given a (B, L_q, L_m) mask built from the lengths (the where/fill path)."""

    def hybrid_forward(self, F, query, key, value, valid_length):  # pylint: disable=W0221
        layout = self.cell.layout
        pick = (lambda x: x[:, 0]) if layout == 'NKT' else (lambda x: x[:, :, 0])
        mask = ga.gen_mem_attn_mask(pick(key), valid_length, pick(query),
                                    layout='TN' if layout == 'TNK' else 'NT')
        return self.cell(query, key, value, mask)


@pytest.mark.parametrize('layout', ['NKT', 'NTK', 'TNK'])
@pytest.mark.parametrize('path', ['lengths', 'mask', pytest.param('fused', marks=requires_fused)])
def test_multi_head_cell_in_every_layout_matches_mxnet_within_1e5(layout, path, tmp_path):
    cell = ga.MultiHeadAttentionCell(12, 3, layout=layout,
                                     backend='fused' if path == 'fused' else 'composed')
    block = (CellWithMask if path == 'mask' else CellWithLengths)(cell)
    results, _ = check_parity(block, per_head_inputs(layout), QKV_NAMES,
                              per_head_shapes(layout), tmp_path, BLOCK_TOL)
    for inputs, outputs in results:
        context = outputs[0]
        rows = context if layout != 'TNK' else context.transpose(1, 0, 2)
        assert not rows[inputs[3] == 0].any()


@pytest.mark.parametrize('path', ['lengths', pytest.param('fused', marks=requires_fused)])
def test_scores_of_magnitude_1e4_stay_finite_and_match(path, tmp_path):
    cell = ga.MultiHeadAttentionCell(12, 3, layout='NTK',
                                     backend='fused' if path == 'fused' else 'composed')
    results, _ = check_parity(CellWithLengths(cell), per_head_inputs('NTK', scale=60.0),
                              QKV_NAMES, per_head_shapes('NTK'), tmp_path, BLOCK_TOL)
    for inputs, (context,) in results:
        assert onp.isfinite(context).all()
        scores = onp.einsum('bqkc,bmkc->bkqm', inputs[0], inputs[1]) / 2.0
        assert onp.abs(scores).max() > 1e4


def token_inputs(vocab, with_p_mask=False, min_length=1):
    """(input_ids, token_types, valid_length[, p_mask]) with lengths covering T, 0 and between.

    p_mask keeps [CLS] and at least three positions selectable, so top-3 never ties at -inf.
    """
    def make(batch, length):
        rng = onp.random.RandomState(batch * 13 + length)
        ids = rng.randint(0, vocab, size=(batch, length)).astype('int32')
        types = (rng.uniform(size=(batch, length)) > 0.5).astype('int32')
        valid = onp.maximum(lengths(batch, length), min_length).astype('int32')
        if not with_p_mask:
            return [ids, types, valid]
        p_mask = (rng.uniform(size=(batch, length)) > 0.4).astype('float32')
        p_mask[:, :4] = 1
        return [ids, types, valid, p_mask]
    return make


TOKEN_NAMES = ['input_ids', 'token_types', 'valid_length']
TOKEN_SHAPES = [('batch', 'sequence'), ('batch', 'sequence'), ('batch',)]


def initialize(block, sigma=0.4, seed=0):
    """Weights and biases ~ N(0, sigma^2), LayerNorm scales 1: attention far from uniform.

    (The encoder's own N(0, 0.02) initialisation gives near-uniform attention, where even a
    wrong score scale changes the outputs by only 2e-5.) Deferred shapes must be known."""
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')          # parameters initialised before
        block.initialize()
    rng = onp.random.RandomState(seed)
    for name, param in sorted(block.collect_params().items()):
        value = (onp.ones(param.shape) if name.endswith('gamma')
                 else sigma * rng.normal(size=param.shape))
        param.set_data(mx.np.array(value, dtype=param.dtype))
    return block


def tiny_bert(fused_attention=False, vocab=50):
    mx.random.seed(11)
    return initialize(ga.BertEncoder(vocab, units=12, hidden_size=16, num_layers=2,
                                     num_heads=3, max_length=24, dropout=0.1,
                                     attention_dropout=0.0, fused_attention=fused_attention))


@pytest.mark.parametrize('fused_attention', [False, pytest.param(True, marks=requires_fused)],
                         ids=['composed', 'fused'])
def test_bert_encoder_matches_mxnet_within_1e4(fused_attention, tmp_path):
    encoder = tiny_bert(fused_attention)
    assert encoder.encoder.fused_attention == fused_attention
    check_parity(encoder, token_inputs(50), TOKEN_NAMES, TOKEN_SHAPES, tmp_path, MODEL_TOL)


@pytest.mark.parametrize('fused_attention', [False, pytest.param(True, marks=requires_fused)],
                         ids=['composed', 'fused'])
def test_bert_family_encoder_without_token_types_with_relu_exports(fused_attention, tmp_path):
    # RoBERTa / DistilBERT (no token type embedding) with ERNIE's ReLU and epsilon 1e-5
    mx.random.seed(12)
    encoder = initialize(ga.BertEncoder(50, units=12, hidden_size=16, num_layers=2, num_heads=3,
                                        max_length=24, attention_dropout=0.0,
                                        fused_attention=fused_attention, num_token_types=0,
                                        activation='relu', layer_norm_eps=1e-5))

    def make(batch, length):
        ids, token_types, valid_length = token_inputs(50)(batch, length)
        return [ids, token_types * 0, valid_length]
    check_parity(encoder, make, TOKEN_NAMES, TOKEN_SHAPES, tmp_path, MODEL_TOL)


def test_transformer_encoder_with_dropout_exports_dropout_as_identity(tmp_path):
    mx.random.seed(3)
    encoder = initialize(ga.TransformerEncoder(2, 12, 16, 3, dropout=0.3,
                                               attention_dropout=0.2))

    def make(batch, length):
        rng = onp.random.RandomState(batch + length)
        return [rng.normal(size=(batch, length, 12)).astype('float32'), lengths(batch, length)]
    check_parity(encoder, make, ['data', 'valid_length'],
                 [('batch', 'sequence', 12), ('batch',)], tmp_path, MODEL_TOL)


def test_qa_inference_matches_mxnet_within_1e4_with_the_same_top_indices(tmp_path):
    model = ga.ModelForQAConditional(tiny_bert(), units=8, dropout=0.1)
    model.initialize()
    inference = ga.QAInference(model, 3, 3)
    inference(*as_mx(token_inputs(50, True)(2, 5)))         # the heads' deferred shapes
    initialize(model)
    results, _ = check_parity(inference, token_inputs(50, True, min_length=4),
                              TOKEN_NAMES + ['p_mask'], TOKEN_SHAPES + [('batch', 'sequence')],
                              tmp_path, MODEL_TOL, sizes=((1, 9), (3, 6)))
    for inputs, (_, start_index, _, end_index, answerable) in results:
        assert start_index.dtype == end_index.dtype == onp.float32
        assert onp.allclose(onp.exp(answerable).sum(-1), 1, atol=1e-5)


def test_decomposable_attention_matches_mxnet_within_1e4(tmp_path):
    mx.random.seed(5)
    model = ga.DecomposableAttention(40, embed_size=10, num_hiddens=8, dropout=0.2)
    model.initialize(mx.init.Normal(0.3))

    def make(batch, length):
        rng = onp.random.RandomState(batch * 3 + length)
        return [rng.randint(0, 40, size=(batch, length)).astype('int32'),
                rng.randint(0, 40, size=(batch, length + 3)).astype('int32'),
                lengths(batch, length), lengths(batch, length + 3)[::-1].copy()]
    check_parity(model, make, ['premise', 'hypothesis', 'premise_valid_length',
                               'hypothesis_valid_length'],
                 [('batch', 'premise_length'), ('batch', 'hypothesis_length'), ('batch',),
                  ('batch',)], tmp_path, MODEL_TOL)


@mx.util.use_np
class MasksFromLengths(HybridBlock):
    """Every mask builder on (B, T, C) data and (B, T + 2, C) memory."""

    def hybrid_forward(self, F, data, memory, valid_length, memory_length):  # pylint: disable=W0221
        time_major = F.np.transpose(data, (1, 0, 2))
        return (ga.gen_self_attn_mask(data, valid_length, 'full'),
                ga.gen_self_attn_mask(time_major, valid_length, 'causal', layout='TN'),
                ga.gen_mem_attn_mask(memory, memory_length, data, valid_length),
                ga.valid_length_to_mask(memory, memory_length))


def test_masks_from_lengths_are_identical(tmp_path):
    def make(batch, length):
        rng = onp.random.RandomState(batch + length)
        return [rng.normal(size=(batch, length, 3)).astype('float32'),
                rng.normal(size=(batch, length + 2, 3)).astype('float32'),
                lengths(batch, length), lengths(batch, length + 2)[::-1].copy()]
    results, worst = check_parity(
        MasksFromLengths(), make, ['data', 'memory', 'valid_length', 'memory_length'],
        [('batch', 'length', 3), ('batch', 'memory_length', 3), ('batch',), ('batch',)],
        tmp_path, dict(rtol=0, atol=0))
    assert worst == 0 and all(o.dtype == bool for _, outs in results for o in outs)


@mx.util.use_np
class Reshapes(HybridBlock):
    """npx.reshape with each special code (and reverse), and the legacy Reshape codes."""

    def hybrid_forward(self, F, x):  # pylint: disable=arguments-differ
        y = F.npx.reshape(x, (-2, -6, -1, 2, -4))                        # (A, B/2, 2, C, D)
        outs = [y, F.npx.reshape(y, (-5, -2, -5)),                       # (A*B/2, 2, C*D)
                F.npx.reshape(x, (-4, -1, 2, -6), reverse=True),         # (A, B, C, D/2, 2)
                F.npx.reshape(F.np.expand_dims(x, 2), (-2, -2, -3, -4)),  # (A, B, C, D)
                F.npx.reshape(x, (6, -2, -1)),                           # 6, C, rest
                F.npx.reshape(x, (-1, 2), reverse=True),
                F.reshape(x.as_nd_ndarray(), shape=(0, -3, -1)).as_np_ndarray(),
                F.reshape(x.as_nd_ndarray(), shape=(-1, 0), reverse=True).as_np_ndarray(),
                F.reshape(x.as_nd_ndarray(), shape=(0, -4, 2, -1, -2)).as_np_ndarray()]
        return tuple(outs)


def test_reshape_codes_read_like_mxnet_at_other_shapes(tmp_path):
    def make(batch, length):
        shape = (batch * 3, 2 * length, 1 + length % 2, 4)
        return [onp.arange(onp.prod(shape), dtype='float32').reshape(shape)]
    check_parity(Reshapes(), make, ['x'], [('rows', 'cols', 'depth', 4)], tmp_path,
                 dict(rtol=0, atol=0), sizes=((2, 3), (4, 2)))


@mx.util.use_np
class ScalarSemantics(HybridBlock):
    """MXNet 1.9.1's rules in a graph, which differ from NumPy's and from its own imperative
    ones: an integer array with a float scalar gives float64, a bool one with an integer scalar
    int64, a bool array compares with the scalar cast to bool, true division gives float32."""

    def hybrid_forward(self, F, ints, floats, flags):  # pylint: disable=arguments-differ
        return (ints * 1.5, ints - 0.5, 0.5 - ints, ints >= 1.5, ints / 2, 1.0 / (ints + 5),
                flags * 2, flags > 0.5, flags * flags, flags * floats, ints + floats,
                F.np.maximum(ints, 1.5), F.np.where(flags, floats, -floats),
                F.np.sum(flags, axis=1), F.np.max(flags, axis=0),
                F.np.nan_to_num(floats), F.np.logical_not(ints),
                F.np.full_like(ints, -2.7), F.np.stack([floats, floats], axis=-1),
                F.np.squeeze(F.np.expand_dims(floats, 0), 0))


def test_numpy_operators_follow_mxnet_dtype_rules(tmp_path):
    def make(batch, length):
        rng = onp.random.RandomState(batch + length)
        floats = rng.normal(size=(batch, length)).astype('float32') * 3
        floats[0, :3] = [onp.nan, onp.inf, -onp.inf][:length]
        return [rng.randint(-4, 5, size=(batch, length)).astype('int32'), floats,
                rng.uniform(size=(batch, length)) > 0.5]
    results, _ = check_parity(ScalarSemantics(), make, ['ints', 'floats', 'flags'],
                              [('batch', 'length')] * 3, tmp_path, dict(rtol=0, atol=0))
    (ints, _, flags), outputs = results[0]
    assert outputs[0].dtype == onp.float64 and (outputs[0] == ints * 1.5).all()
    assert outputs[6].dtype == onp.int64 and not outputs[7].any()   # flags * 2, flags > 0.5


def test_export_needs_shapes_and_matching_names(tmp_path):
    block = ga.DotProductAttention()
    block.hybridize()
    block(*as_mx(attention_inputs()(2, 5)))
    path = str(tmp_path / 'dpa.onnx')
    with pytest.raises(ValueError, match='input_shapes.*Received: input_shapes=None'):
        export_onnx(block, path, QKV_NAMES, ['float32'] * 3 + ['int32'])
    with pytest.raises(ValueError, match='4 inputs'):
        export_onnx(str(tmp_path / 'dpa'), None, QKV_NAMES[:3], None, qkv_shapes())
    with pytest.raises(ValueError, match='dpa-inputs.json'):
        export_onnx(str(tmp_path / 'missing' / 'dpa'), None, None, None, qkv_shapes())


def test_export_inference_script_format_onnx_reports_onnx_runtime_parity(tmp_path, capsys):
    import importlib.util
    import json
    import pathlib
    script = pathlib.Path(__file__).resolve().parents[2] / 'scripts' / 'export_inference.py'
    spec = importlib.util.spec_from_file_location('export_inference', script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    prefix = str(tmp_path / 'dpa')
    assert module.main(['--block', 'dot_product', '--format', 'onnx',
                        '--output-prefix', prefix]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report['ok'] and report['onnx']['onnx_path'] == prefix + '.onnx'
    assert report['onnx']['num_batches'] == 3 and report['onnx']['max_abs_diff'] < 1e-5


def test_an_operator_option_without_an_exact_onnx_form_is_a_value_error():
    from gluon_attention.export.onnx_ops import unsupported
    with pytest.raises(ValueError, match=r"npx.reshape code 0.*Received: op='_npx_reshape'"):
        unsupported({'op': '_npx_reshape', 'name': 'reshape0'}, 'npx.reshape code 0')


def test_a_reshape_code_mxnet_does_not_define_is_refused_naming_the_operator():
    from types import SimpleNamespace
    from gluon_attention.export.onnx_shape_ops import _shape_pieces
    emitter = SimpleNamespace(node={'op': '_npx_reshape', 'name': 'reshape7'})
    with pytest.raises(ValueError, match=r"npx.reshape code -7.*Received: op='_npx_reshape'"):
        _shape_pieces(emitter, 'x', [-7], reverse=False)
