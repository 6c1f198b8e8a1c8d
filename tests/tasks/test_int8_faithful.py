"""INT8 that does not fail silently and does not depend on the batch (run_squad.py quantize's
writer on the tiny fused QA model of test_onnx_fusable): a missing attention fusion or an
exclusion that did not happen is an error with the counts; exclusions are exact, validated node
names and --int8-head 0 keeps every head product float32; int8.json records the CPU's
instruction sets, the ONNX Runtime version and every setting; with calibrated activation scales
a feature's outputs are the same at every batch size."""
import numpy as onp
import pytest

from gluon_attention.core import fused

pytest.importorskip('onnxruntime', reason='needs onnxruntime (pip install .[onnx])')
pytest.importorskip('sympy', reason='the ONNX Runtime optimizer needs sympy (.[onnx])')
pytest.importorskip('onnxruntime.quantization', reason='quantization needs onnx>=1.16')
import onnx  # noqa: E402
import onnxruntime  # noqa: E402

import gluon_attention as ga  # noqa: E402
from gluon_attention.export.onnx import run_onnx  # noqa: E402
from gluon_attention.export.onnx_optimize import quantize_onnx  # noqa: E402
from jobs.squad import quantize  # noqa: E402
from test_onnx import as_mx, initialize, tiny_bert  # noqa: E402
from test_onnx_fusable import HEADS, LAYERS, UNITS, qa_inputs  # noqa: E402

pytestmark = pytest.mark.skipif(not fused.available(), reason='fused kernel not built')


def _inference():
    model = ga.ModelForQAConditional(tiny_bert(fused_attention=True), units=8, dropout=0.1)
    model.initialize()
    inference = ga.QAInference(model, 3, 3)
    inference(*as_mx(qa_inputs(2, 5)))
    initialize(model)
    return inference


def _batches(inputs, size):
    names = ('input_ids', 'token_types', 'valid_length', 'p_mask')
    return [dict(zip(names, [a[i:i + size] for a in inputs])) for i in range(0, len(inputs[0]),
                                                                           size)]


@pytest.fixture(scope='module')
def written(tmp_path_factory):
    """The INT8 model with calibrated scales (and its dynamic form beside it), the head kept
    float32, 2 layers checked."""
    batches = _batches(qa_inputs(6, 9), 3)
    lengths = [b['valid_length'] for b in batches]
    report = quantize.write_int8_model(_inference(), str(tmp_path_factory.mktemp('int8')), HEADS,
                                       UNITS, int8_head=False, num_layers=LAYERS,
                                       calibration=(batches, lengths))
    return {'calibrated': report, 'dynamic': dict(report, int8=report['int8_dynamic'])}


def test_a_missing_attention_fusion_or_quantization_is_an_error_with_the_counts(written):
    """The written model passes the check for its 2 layers; an encoder of 3 layers (one
    attention not fused) or a fused attention left unquantized is refused with the counts
    (quantize then exits 2, where it printed 'fused: 0 Attention' and exited 0)."""
    report = written['calibrated']
    quantize.check_int8_counts(report, LAYERS)
    with pytest.raises(ValueError, match=r'num_layers=3, fused_attention=2, '
                                         r'quantized_attention=2, excluded_attention=0'):
        quantize.check_int8_counts(report, 3)
    unquantized = dict(report, int8_counts=dict(report['int8_counts'], QAttention=1))
    with pytest.raises(ValueError, match=r'fused_attention=2, quantized_attention=1'):
        quantize.check_int8_counts(unquantized, LAYERS)


def test_int8_head_0_keeps_every_head_product_float32(written):
    report = written['dynamic']
    graph = onnx.load(report['int8']).graph
    optimized = onnx.load(report['optimized']).graph
    heads = [n.name for n in optimized.node if n.op_type == 'MatMul' and
             quantize.HEAD_PREFIXES[0] in n.name]
    assert any(name.startswith('idx_') for name in heads)       # the exporter's copy
    assert sorted(report['excluded']) == sorted(heads)
    quantized = [n.name for n in graph.node if quantize.HEAD_PREFIXES[0] in n.name and
                 n.op_type in ('MatMulInteger', 'DynamicQuantizeMatMul', 'QAttention')]
    assert quantized == []
    kept = {n.name for n in graph.node if n.op_type == 'MatMul'}
    assert set(heads) <= kept
    assert report['int8_counts'].get('QAttention') == LAYERS


def test_exclusions_are_exact_validated_node_names(written, tmp_path):
    optimized = written['dynamic']['optimized']
    names = [n.name for n in onnx.load(optimized).graph.node if n.op_type == 'MatMul']
    layer0 = [n for n in names if 'transformerencoderlayer0_dense4' in n]
    with pytest.raises(ValueError, match=r'nearest: .*transformerencoderlayer0_dense4'):
        quantize_onnx(optimized, str(tmp_path / 'x.onnx'), exclude=[layer0[0][:-3]])
    counts = quantize_onnx(optimized, str(tmp_path / 'y.onnx'), exclude=layer0)
    written_names = {n.name: n.op_type for n in onnx.load(str(tmp_path / 'y.onnx')).graph.node}
    assert written_names[layer0[0]] == 'MatMul'                    # only that one kept
    layer1 = layer0[0].replace('layer0', 'layer1')
    assert layer1 not in written_names and layer1 + '_quant' in written_names
    assert counts['MatMulInteger'] >= 5
    # the feed-forward products, found by their BiasGelu: two per layer, kept float32 on request
    ffn = quantize.ffn_node_names(onnx.load(optimized))
    assert len(ffn) == 2 * LAYERS and all('dense4' in n or 'dense5' in n for n in ffn)
    quantize_onnx(optimized, str(tmp_path / 'z.onnx'), exclude=ffn)
    kept = {n.name for n in onnx.load(str(tmp_path / 'z.onnx')).graph.node if n.op_type == 'MatMul'}
    assert set(ffn) <= kept


def test_int8_json_records_the_cpu_the_runtime_and_every_setting(written):
    report = written['dynamic']
    flags = quantize.cpu_flags()
    assert report['cpu_flags'] == flags
    assert report['onnxruntime_version'] == onnxruntime.__version__
    assert report['onnx_version'] == onnx.__version__
    assert (report['weight_type'], report['activation_type']) == ('QInt8', 'QUInt8')
    assert report['per_channel'] is True and report['int8_head'] is False
    assert report['reduce_range'] is (not set(quantize.VNNI_FLAGS) & set(flags))
    report = written['calibrated']
    assert report['activation_scales'] == 'calibrated' and report['calibration_features'] == 6
    assert report['calibrated_activations'] == sum(
        n.op_type == 'QuantizeLinear' for n in onnx.load(report['int8']).graph.node) > 0


def test_cpu_flags_and_reduce_range_follow_the_cpu(tmp_path):
    info = tmp_path / 'cpuinfo'
    info.write_text('processor\t: 0\nflags\t\t: fpu sse4_1 avx2 fma avx512f avx512bw\n')
    assert quantize.cpu_flags(str(info)) == ['avx2', 'avx512bw', 'avx512f', 'fma', 'sse4_1']
    assert quantize.cpu_flags(str(tmp_path / 'none')) == []


def _per_feature(path, inputs, size):
    outputs = [run_onnx(path, [b[k] for k in ('input_ids', 'token_types', 'valid_length',
                                               'p_mask')]) for b in _batches(inputs, size)]
    return [onp.concatenate([o[i] for o in outputs]) for i in range(5)]


def _padded(inputs, length):
    ids, types, valid, p_mask = inputs
    pad = length - ids.shape[1]
    return [onp.pad(ids, ((0, 0), (0, pad))), onp.pad(types, ((0, 0), (0, pad))), valid,
            onp.pad(p_mask, ((0, 0), (0, pad)))]


def test_calibrated_int8_gives_each_feature_the_same_outputs_at_every_batch_size(written):
    """The same 8 features at batch 1, 4 and 8 (and padded 3 positions further): calibrated
    scales give equal outputs; the dynamic model's differ (its ranges are the batch's)."""
    inputs = qa_inputs(8, 10)
    for name, same in (('calibrated', True), ('dynamic', False)):
        path = written[name]['int8']
        runs = [_per_feature(path, inputs, size) for size in (1, 4, 8)]
        runs.append(_per_feature(path, _padded(inputs, 13), 8))
        equal = all(onp.allclose(run[i], runs[0][i], rtol=0, atol=1e-5)
                    for run in runs[1:] for i in (0, 2, 4))
        indices = all((run[i] == runs[0][i]).all() for run in runs[1:] for i in (1, 3))
        assert (equal and indices) is same, name


def test_a_failed_quantize_leaves_no_file_that_looks_finished(tmp_path):
    """A check that fails after the INT8 model was written (3 layers asked of a 2-layer
    encoder) removes it: no qa-int8.onnx or int8.json is left, an earlier run's neither."""
    for name in quantize.FINISHED_FILES:
        (tmp_path / name).write_text('an earlier run')
    with pytest.raises(ValueError, match=r'num_layers=3, fused_attention=2'):
        quantize.write_int8_model(_inference(), str(tmp_path), HEADS, UNITS,
                                  num_layers=LAYERS + 1)
    written = sorted(p.name for p in tmp_path.iterdir())
    assert 'qa-optimized.onnx' in written         # it did get as far as writing the model
    assert not set(written) & set(quantize.FINISHED_FILES), written
