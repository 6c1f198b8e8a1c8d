"""Converted GluonNLP 0.10 RoBERTa, DistilBERT and ERNIE SQuAD folders on the paths a BERT folder
takes: the predictor answers with the span of 0.10's own logits (0.10's decoding rule,
:func:`gluonnlp_peer.span_answer`), the exported graph, its ONNX file and the fusable ONNX file
that ``quantize`` fuses compute what the model computes, the served archive answers as the
predictor, ``run_squad.py quantize`` writes an INT8 model whose best spans are mostly float32's,
and ``run_squad.py evaluate`` scores the folder. The folders: :mod:`gluonnlp_family`.
"""
import json
import zipfile

import mxnet as mx
import numpy as onp
import pytest

import gluonnlp_peer as peer
from conftest import FULL
from gluon_attention.core import fused
from gluon_attention.data import squad
from gluon_attention.export.block import export_and_check
from gluon_attention.models.qa import QAInference
from gluon_attention.pipelines import QAPredictor, load_qa_folder, load_qa_model
from gluon_attention.pipelines.features import INPUT_DTYPES, INPUT_NAMES, eval_features, \
    run_batches
from gluonnlp_family import MODELS, convert_squad



@pytest.fixture(scope='module', params=MODELS)
def converted(request, tmp_path_factory):
    """A tiny fine-tuned 0.10 SQuAD model of the architecture and its converted folder."""
    return convert_squad(request.param, tmp_path_factory.mktemp(request.param))


def _features(folder, texts):
    loaded = load_qa_folder(folder)
    examples = [squad.SquadExample(str(i), 't', q, c, [], False) for i, (q, c) in
                enumerate(texts)]
    return examples, eval_features(examples, loaded.tokenizer(),
                                   loaded.qa_config['eval_max_seq_length'],
                                   loaded.qa_config['max_query_length'])


def test_predictor_answers_with_the_span_of_gluonnlp_logits(converted):
    predictor = QAPredictor.from_folder(converted.folder)
    for question, context in converted.texts:
        _, features = _features(converted.folder, [(question, context)])
        assert len(features) > 1                          # the context spans several chunks
        types = {t for f in features for t in f.token_types}
        # no token types (RoBERTa, DistilBERT): every position type 0; ERNIE: 0 then 1
        assert types == ({0, 1} if converted.model.startswith('ernie') else {0})
        score, text = peer.span_answer(converted.net, converted.model, features, context)
        answer = predictor.answer(question, context)
        assert answer.text == text != '' and context[answer.start:answer.end] == text
        assert abs(answer.score - score) < 1e-4


def _inference(folder):
    return QAInference(load_qa_model(load_qa_folder(folder), [mx.cpu()]), 5, 5)


def test_exported_graph_and_onnx_runtime_compute_what_the_model_computes(converted, tmp_path):
    """The export (symbol + params, reloaded) within 1e-5 of the model, on real features at two
    batch sizes and lengths; its ONNX file (plain and in the fusable form ``quantize`` fuses)
    within 1e-4 in ONNX Runtime, the indices of the valid spans equal."""
    pytest.importorskip('onnxruntime', reason='the [onnx] extra is not installed')
    # pylint: disable=import-outside-toplevel
    from gluon_attention.export.onnx import check_onnx
    from gluon_attention.pipelines.onnx import QA_INPUT_SHAPES, export_qa_onnx, run_onnx_squad
    block = _inference(converted.folder)
    assert block.model.backbone.fused_attention == fused.available()   # dropout 0 at inference
    _, features = _features(converted.folder, converted.texts)
    batches = []
    for chunk in (features[:2], features[2:5]):
        arrays = squad.batchify(chunk, round_to=1)
        batches.append([arrays[k] for k in INPUT_NAMES])
    assert batches[0][0].shape != batches[1][0].shape
    prefix = str(tmp_path / 'qa')
    _, report = export_and_check(block, prefix, batches, INPUT_NAMES, INPUT_DTYPES)
    assert report['max_abs_diff'] <= 1e-5
    assert check_onnx(block, prefix, batches, QA_INPUT_SHAPES)['max_abs_diff'] <= 1e-4
    want = run_batches(block, features, 4, mx.cpu())
    got = run_onnx_squad(export_qa_onnx(prefix), features, batch_size=4)
    for feature, w, g in zip(features, want, got):
        valid = _valid_spans(feature, w[1], w[3][:, 0])   # the others rank by their own score
        assert valid.any()
        for i in range(4):               # start/end logits and indices of the valid spans
            onp.testing.assert_allclose(g[i][valid], w[i][valid], rtol=0, atol=1e-4)


def _valid_spans(feature, starts, ends, max_answer_length=30):
    """Which proposed spans (start, end positions: float arrays (K,)) are answers: inside the
    context, not at position 0, end >= start, at most ``max_answer_length`` tokens."""
    p_mask = onp.asarray(feature.p_mask + [0] * 64)
    starts, ends = starts.astype(int), ends.astype(int)
    return (starts > 0) & (p_mask[starts] == 1) & (p_mask[ends] == 1) & (ends >= starts) & (
        ends - starts < max_answer_length)


def test_export_inference_script_exports_the_converted_folder(converted, tmp_path, capsys):
    """``scripts/export_inference.py --squad-run FOLDER --format onnx``: random inputs of the
    ids the encoder takes (token type 0 only without a token type embedding), the reloaded
    graph and ONNX Runtime within its 1e-5 tolerance."""
    pytest.importorskip('onnxruntime', reason='the [onnx] extra is not installed')
    capsys.readouterr()
    assert peer.run_squad('export_inference').main([
        '--squad-run', converted.folder, '--output-prefix', str(tmp_path / 'qa'),
        '--format', 'onnx']) == 0
    report = json.loads(capsys.readouterr().out)
    assert report['ok'] and report['block'] == 'squad' and report['num_batches'] == 3
    assert report['max_abs_diff'] <= 1e-5 and report['onnx']['max_abs_diff'] <= 1e-5


def test_served_archive_answers_as_the_predictor(converted, tmp_path):
    """The server's archive (exported graph, the folder's settings, its tokenizer) loads in the
    handler and answers every question as the in-process predictor does."""
    pytest.importorskip('model_archiver', reason='the [serve] extra is not installed')
    # pylint: disable=import-outside-toplevel
    from jobs.serve.archive import build_archive, export_graph
    from jobs.serve.handler import QAService
    from jobs.serve.protocol import Limits
    graph, store = str(tmp_path / 'export' / 'qa'), tmp_path / 'store'
    store.mkdir()
    assert export_graph(converted.folder, graph)['max_abs_diff'] <= 1e-5
    path, _ = build_archive(converted.folder, graph, str(store), 'squad', Limits(), 8)
    with zipfile.ZipFile(path) as archive:
        archive.extractall(tmp_path / 'unpacked')
    served = QAService(str(tmp_path / 'unpacked')).answer([list(converted.texts)])[0]
    predictor = QAPredictor.from_folder(converted.folder)
    for answer, (question, context) in zip(served, converted.texts):
        want = predictor.answer(question, context)
        assert (answer.text, answer.start) == (want.text, want.start) and want.text != ''
        assert abs(answer.score - want.score) < 1e-4


def _squad_file(path, title, texts, answers=None):
    """A SQuAD 1.1 file of one article: a paragraph per (question, context) of ``texts``, its
    answer that of ``answers`` (dicts with text and answer_start; None: the context's first
    word)."""
    answers = answers or [{'text': c.split()[0], 'answer_start': 0} for _, c in texts]
    qas = [[{'id': '{}{}'.format(title, i), 'question': q, 'answers': [answers[i]]}]
           for i, (q, _) in enumerate(texts)]
    data = [{'title': title, 'paragraphs': [{'context': c, 'qas': qa}
                                            for (_, c), qa in zip(texts, qas)]}]
    path.write_text(json.dumps({'version': '1.1', 'data': data}), encoding='utf-8')
    return str(path)


def test_quantize_writes_an_int8_model_with_float32s_best_spans(converted, tmp_path, capsys):
    """``run_squad.py quantize`` on the converted folder (no record of its training articles:
    every question of the calibration file calibrates): one fused, quantized attention per
    layer, the feed-forward products (GELU, or ERNIE's ReLU) kept float32, the span head's
    products found for ``--int8-head 0``, the INT8 model's best span is float32's on most
    features, and ``predict --onnx-model`` answers with it (in make test for ERNIE, whose ReLU
    the optimizer leaves unfused)."""
    if not (FULL or converted.model.startswith('ernie')):
        pytest.skip('slow: set GA_FULL_TESTS=1')
    pytest.importorskip('onnxruntime.quantization', reason='the [onnx] extra is not installed')
    pytest.importorskip('sympy', reason='the ONNX Runtime optimizer needs sympy')
    # pylint: disable=import-outside-toplevel
    import onnx
    from gluon_attention.pipelines.onnx import run_onnx_squad
    from jobs.squad.quantize import head_node_names
    calibration = _squad_file(tmp_path / 'calibration.json', 'c', converted.texts)
    run_squad = peer.run_squad()
    assert run_squad.main(['quantize', '--model-dir', converted.folder, '--output-dir',
                           str(tmp_path), '--calibration-file', calibration, '--threads', '1',
                           '--calibration-features', '16']) == 0
    report = json.loads((tmp_path / 'int8' / 'int8.json').read_text())
    assert report['activation_scales'] == 'calibrated' and report['calibration_features'] > 4
    assert report['optimized_counts']['Attention'] == report['int8_counts']['QAttention'] == 2
    ffn = [n for n in report['excluded'] if 'dense4' in n or 'dense5' in n]
    assert len(ffn) == len(report['excluded']) == 4           # 2 layers x 2 products
    [head] = head_node_names(onnx.load(report['optimized']))   # the head's one Dense(2)
    assert head.startswith('spanhead') and head not in report['excluded']
    _, features = _features(converted.folder, converted.texts)
    want = run_batches(_inference(converted.folder), features, 8, mx.cpu())
    got = run_onnx_squad(report['int8'], features, batch_size=8)
    same = [w[1][0] == g[1][0] and w[3][0, 0] == g[3][0, 0] for w, g in zip(want, got)]
    assert sum(same) >= 0.75 * len(same), same
    scale = max(abs(w[0][0]) for w in want)
    assert max(abs(w[0][0] - g[0][0]) for w, g in zip(want, got)) < 0.1 * scale
    # predict runs the INT8 file with the folder's tokenizer and settings
    question, context = converted.texts[0]
    capsys.readouterr()
    assert run_squad.main(['predict', '--model-dir', converted.folder, '--onnx-model',
                           report['int8'], '--question', question, '--context', context,
                           '--json', '--threads', '1']) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed['text'] == context[printed['start']:printed['end']] != ''


def test_run_squad_evaluate_scores_the_converted_folder(converted, tmp_path, capsys):
    """Gold answers: the predictor's answer to the first question (exact 100) and a text it
    does not give to the second (exact 0)."""
    run_squad = peer.run_squad()
    predictor = QAPredictor.from_folder(converted.folder)
    first = predictor.answer(*converted.texts[0])
    second = converted.texts[1][1].split()[0]
    assert predictor.answer(*converted.texts[1]).text != second
    answers = [{'text': first.text, 'answer_start': first.start},
               {'text': second, 'answer_start': 0}]
    eval_file = _squad_file(tmp_path / 'eval.json', 'e', converted.texts[:2], answers)
    capsys.readouterr()
    assert run_squad.main(['evaluate', '--model-dir', converted.folder, '--threads', '1',
                           '--no-progress', '--eval-file', eval_file, '--output-dir',
                           str(tmp_path), '--version-2-with-negative', '0']) == 0
    metrics = json.loads((tmp_path / 'evaluate' / 'metrics.json').read_text())
    assert (metrics['total'], metrics['exact']) == (2, 50.0)
