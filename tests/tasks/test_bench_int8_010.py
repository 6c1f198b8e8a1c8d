"""GluonNLP 0.10's INT8 recipe (``jobs.bench.gluonnlp010.quantize_010``) on a tiny random 0.10
model (2 layers, width 16, V = 40): every dense layer and self-attention product runs in INT8,
every INT8 node of the graph found its threshold in 0.10's collector, and the collector's
clipping reaches the graph, the GELU rule under the name of MXNet's fused dense + GELU node."""
import numpy as onp
import pytest

pytest.importorskip('gluonnlp')

from jobs.bench import bert_models, gluonnlp010  # noqa: E402

TINY = dict(num_layers=2, units=16, hidden_size=24, num_heads=2, max_length=512)
# clips that bite at this size: LayerNorm outputs reach about -3, the GELU outputs about 0.2
CLIP = (-1.0, 0.05)


def _quantized(tmp_path, gelu_rule=True, monkeypatch=None):
    params, _ = gluonnlp010.gluonnlp_bert(bert_models.MODELS[0], TINY, 40, tmp_path, seed=3)
    if not gelu_rule:
        monkeypatch.setattr(gluonnlp010, 'FUSED_GELU', 'no node has this name')
    calibration = [onp.concatenate(x) for x in zip(*[
        bert_models.bert_inputs(32, 40, seed=1 + i, batch=8) for i in range(2)])]
    net = gluonnlp010.load_010(bert_models.MODELS[0], TINY, 40, params)
    return gluonnlp010.quantize_010(net, calibration, 8, clip=CLIP)


def _calibrated(quantized):
    """{node name: (min_calib_range, max_calib_range)} of the graph's calibrated nodes."""
    return {n['name']: (float(n['attrs']['min_calib_range']), float(n['attrs']['max_calib_range']))
            for n in gluonnlp010.graph_nodes(quantized) if 'min_calib_range' in n.get('attrs', {})}


def test_every_int8_node_has_its_threshold_and_the_clips_reach_the_graph(tmp_path):
    quantized, thresholds = _quantized(tmp_path)
    assert gluonnlp010.quantized_counts(quantized) == {'dense': (8, 8), 'attention': (4, 4)}
    # per layer: 3 input quantizations (the LayerNorm output before the QKV projection and
    # before the feed-forward, the softmax), the outputs of 4 dense layers and 2 products
    assert gluonnlp010.threshold_coverage(quantized, thresholds) == (18, 18, [])
    names = gluonnlp010.threshold_names(quantized)
    norms = [n for n in names if n.endswith('layernorm0_layernorm0_output')]
    gelus = [n for n in names if gluonnlp010.FUSED_GELU in n]
    assert len(norms) == 4 and len(gelus) == 2
    assert all(thresholds[n][0] == CLIP[0] and thresholds[n][1] > 1 for n in norms)
    assert all(thresholds[n][1] == CLIP[1] and thresholds[n][0] < 0 for n in gelus)
    calibrated = _calibrated(quantized)
    for name in norms:        # the quantization of each LayerNorm output reads the clipped min
        assert calibrated[name + '_quantize'][0] == pytest.approx(CLIP[0])
    for name in gelus:        # each fused dense + GELU requantizes to the clipped max
        node = 'quantized_' + name[:-len('_output')]
        assert calibrated[node][1] == pytest.approx(CLIP[1])


def test_without_the_fused_name_rule_the_gelu_outputs_are_not_clipped(tmp_path, monkeypatch):
    quantized, thresholds = _quantized(tmp_path, gelu_rule=False, monkeypatch=monkeypatch)
    gelus = [n for n in gluonnlp010.threshold_names(quantized)
             if 'sg_mkldnn_fully_connected_eltwise_' in n]
    assert len(gelus) == 2 and all(thresholds[n][1] > CLIP[1] for n in gelus)
