"""The fusable ONNX form (gluon_attention.export.onnx_fusable) and ONNX Runtime's tools on it
(gluon_attention.export.onnx_optimize).

A tiny fused BertEncoder (D=12, K=3, 2 layers, N(0, 0.4) weights: attention far from uniform)
and the QA model on it, exported once at (2, 5) with ``fusable=True``: ONNX Runtime's optimizer
leaves one Attention, two SkipLayerNormalization and one BiasGelu per layer; the plain and the
fused float32 files equal MXNet within 1e-4 at other batch sizes and lengths (valid positions
for the encoder; the QA outputs read none when p_mask blocks them, as in SQuAD features); no initializer feeds two nodes; both
quantize_dynamic forms (per tensor, per channel) give a model that runs and stays near.
"""
import collections

import mxnet as mx
import numpy as onp
from mxnet.gluon import HybridBlock
import pytest

from gluon_attention.core import fused

pytest.importorskip('onnxruntime', reason='needs onnxruntime (pip install .[onnx])')
pytest.importorskip('sympy', reason='the ONNX Runtime optimizer needs sympy (.[onnx])')
pytest.importorskip('onnxruntime.quantization', reason='quantization needs onnx>=1.16')
import onnx  # noqa: E402

import gluon_attention as ga  # noqa: E402
from gluon_attention.export.onnx import export_onnx, run_onnx  # noqa: E402
from gluon_attention.export.onnx_optimize import (  # noqa: E402
    fusion_counts, optimize_onnx, quantize_onnx)
from test_onnx import (TOKEN_NAMES, TOKEN_SHAPES, as_mx, initialize,  # noqa: E402
                       tiny_bert, token_inputs)

pytestmark = pytest.mark.skipif(not fused.available(), reason='fused kernel not built')
LAYERS, HEADS, UNITS = 2, 3, 12
SIZES = ((1, 9), (3, 6), (4, 11))          # (batch, length); the export uses (2, 5)
QA_NAMES = TOKEN_NAMES + ['p_mask']
QA_SHAPES = TOKEN_SHAPES + [('batch', 'sequence')]


def qa_inputs(batch, length):
    """QA inputs whose p_mask blocks every padded position, as in SQuAD features."""
    ids, types, valid, p_mask = token_inputs(50, True, min_length=4)(batch, length)
    p_mask[onp.arange(length)[None, :] >= valid[:, None]] = 0
    return [ids, types, valid, p_mask]


def _export(block, make_inputs, names, shapes, path):
    inputs = make_inputs(2, 5)
    block.hybridize(static_alloc=True)
    block(*as_mx(inputs))
    return export_onnx(block, str(path), names, [str(a.dtype) for a in inputs], shapes,
                       fusable=True)


@pytest.fixture(scope='module')
def encoder_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp('fusable')
    encoder = tiny_bert(fused_attention=True)
    plain = _export(encoder, token_inputs(50), TOKEN_NAMES, TOKEN_SHAPES, folder / 'enc.onnx')
    counts = optimize_onnx(plain, folder / 'enc-opt.onnx', HEADS, UNITS)
    return encoder, plain, str(folder / 'enc-opt.onnx'), counts


@pytest.fixture(scope='module')
def qa_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp('fusable-qa')
    model = ga.ModelForQAConditional(tiny_bert(fused_attention=True), units=8, dropout=0.1)
    model.initialize()
    inference = ga.QAInference(model, 3, 3)
    inference(*as_mx(token_inputs(50, True)(2, 5)))         # the heads' deferred shapes
    initialize(model)
    plain = _export(inference, qa_inputs, QA_NAMES, QA_SHAPES,
                    folder / 'qa.onnx')
    counts = optimize_onnx(plain, folder / 'qa-opt.onnx', HEADS, UNITS)
    return inference, plain, str(folder / 'qa-opt.onnx'), counts


def _shared_initializers(path):
    model = onnx.load(path)
    names = {t.name for t in model.graph.initializer}
    uses = collections.Counter(i for node in model.graph.node for i in node.input if i in names)
    return sorted(name for name, n in uses.items() if n > 1)


@pytest.mark.parametrize('files', ['encoder_files', 'qa_files'])
def test_the_optimizer_fuses_attention_skip_layer_norm_and_bias_gelu_per_layer(files, request):
    _, plain, _, counts = request.getfixturevalue(files)
    assert counts.get('Attention') == LAYERS
    # two per layer, and the embeddings' sum + LayerNorm (word + type, position as the skip)
    assert counts.get('SkipLayerNormalization') == 2 * LAYERS + 1
    assert counts.get('BiasGelu') == LAYERS
    head = int(files == 'qa_files')             # the answerable head's attention pooling
    assert counts.get('Softmax', 0) == head and not counts.get('Erf') and not counts.get('Pow')
    assert fusion_counts(plain)['Softmax'] == LAYERS + head


@pytest.mark.parametrize('files', ['encoder_files', 'qa_files'])
def test_no_initializer_feeds_two_nodes(files, request):
    _, plain, optimized, _ = request.getfixturevalue(files)
    assert _shared_initializers(plain) == []
    assert _shared_initializers(optimized) == []


def test_encoder_plain_and_fused_equal_mxnet_within_1e4_at_valid_positions(encoder_files):
    encoder, plain, optimized, _ = encoder_files
    for batch, length in SIZES:
        inputs = token_inputs(50)(batch, length)
        want = encoder(*as_mx(inputs)).asnumpy()
        valid = onp.arange(length)[None, :] < inputs[2][:, None]          # (B, T)
        for path in (plain, optimized):
            (got,) = run_onnx(path, inputs)
            assert got.shape == want.shape
            onp.testing.assert_allclose(got[valid], want[valid], rtol=1e-4, atol=1e-4)


def test_qa_plain_and_fused_equal_mxnet_within_1e4_with_the_same_top_indices(qa_files):
    inference, plain, optimized, _ = qa_files
    for batch, length in SIZES:
        inputs = qa_inputs(batch, length)
        want = [w.asnumpy() for w in inference(*as_mx(inputs))]
        for path in (plain, optimized):
            got = run_onnx(path, inputs)
            for w, g in zip(want, got):
                assert g.shape == w.shape and g.dtype == w.dtype
                finite = onp.isfinite(w)
                assert (onp.isfinite(g) == finite).all()
                onp.testing.assert_allclose(g[finite], w[finite], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize('per_channel', [False, True], ids=['per_tensor', 'per_channel'])
@pytest.mark.parametrize('which', ['plain', 'fused'])
def test_quantize_dynamic_gives_a_model_that_runs_near_float32(per_channel, which, qa_files,
                                                                tmp_path):
    inference, plain, optimized, _ = qa_files
    path = str(tmp_path / 'int8.onnx')
    counts = quantize_onnx(plain if which == 'plain' else optimized, path, per_channel)
    assert counts.get('MatMulInteger', 0) + counts.get('DynamicQuantizeMatMul', 0) > 0
    if which == 'fused':
        assert counts.get('QAttention') == LAYERS
    inputs = qa_inputs(3, 6)
    want = [w.asnumpy() for w in inference(*as_mx(inputs))]
    got = run_onnx(path, inputs)
    answerable = onp.exp(got[4])
    onp.testing.assert_allclose(answerable.sum(-1), 1.0, atol=1e-5)
    assert onp.abs(got[4] - want[4]).max() < 0.5          # INT8 noise, not another model


def test_attention_that_is_not_a_self_attention_with_query_lengths_is_refused(tmp_path):
    """A fused cell with (B,) key lengths and L_m != L_q: the fusable form would be wrong."""
    cell = ga.MultiHeadAttentionCell(HEADS * 4, HEADS, layout='NTK', backend='fused')
    rng = onp.random.RandomState(0)
    inputs = [rng.normal(size=(2, 5, HEADS, 4)).astype('float32'),
              rng.normal(size=(2, 7, HEADS, 4)).astype('float32'),
              rng.normal(size=(2, 7, HEADS, 4)).astype('float32'),
              onp.array([7, 3], 'int32')]

    @mx.util.use_np
    class Cell(HybridBlock):                                    # (q, k, v, length)
        def __init__(self):
            super().__init__()
            self.cell = cell

        def hybrid_forward(self, F, query, key, value, length):  # pylint: disable=arguments-differ
            out = self.cell(query, key, value, None, None, length)
            return out[0] if isinstance(out, (list, tuple)) else out
    block = Cell()
    block.hybridize(static_alloc=True)
    block(*as_mx(inputs))
    shapes = [('batch', 'query_length', HEADS, 4), ('batch', 'memory_length', HEADS, 4),
              ('batch', 'memory_length', HEADS, 4), ('batch',)]
    with pytest.raises(ValueError, match='fusable=True writes self-attention'):
        export_onnx(block, str(tmp_path / 'cell.onnx'), ['query', 'key', 'value', 'length'],
                    [str(a.dtype) for a in inputs], shapes, fusable=True)


def test_the_int8_route_writes_a_fused_int8_model_and_keeps_the_head_float_on_request(
        tmp_path, caplog, capfd):
    """run_squad.py quantize's writer on the tiny QA model; OnnxQABlock runs the result as
    evaluate/predict --onnx-model do, near MXNet's outputs. ONNX Runtime's quantizer warnings
    (untyped fused outputs, the image-model pre-processing advice) are not shown."""
    from gluon_attention.pipelines.onnx import OnnxQABlock
    from jobs.squad.quantize import write_int8_model
    model = ga.ModelForQAConditional(tiny_bert(fused_attention=True), units=8, dropout=0.1)
    model.initialize()
    inference = ga.QAInference(model, 3, 3)
    inference(*as_mx(qa_inputs(2, 5)))
    initialize(model)
    report = write_int8_model(inference, str(tmp_path), HEADS, UNITS, int8_head=False)
    shown = caplog.text + capfd.readouterr().err
    assert 'Failed to infer data type' not in shown and 'pre-processing' not in shown
    counts = report['int8_counts']
    assert counts.get('QAttention') == LAYERS and counts.get('BiasGelu') == LAYERS
    # the head's dense layers (start, end pair, end, answerable x2) stay float32 MatMuls
    assert counts.get('MatMul', 0) >= 4 and report['per_channel'] and not report['int8_head']
    inputs = qa_inputs(3, 7)
    want = [w.asnumpy() for w in inference(*as_mx(inputs))]
    got = [g.asnumpy() for g in OnnxQABlock(report['int8'])(*as_mx(inputs))]
    assert [g.shape for g in got] == [w.shape for w in want]
    assert onp.abs(got[4] - want[4]).max() < 0.5
