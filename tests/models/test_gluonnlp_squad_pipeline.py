"""A GluonNLP 0.10 SQuAD model, converted, answers through the QA pipeline unchanged.

The tiny 0.10-style SQuAD model of the parity tests (``bert.`` + ``span_classifier``), fine-tuned
a few steps, is converted; ``QAPredictor``, ``run_squad.py predict`` and the exported graph
answer with the span that 0.10's own logits give under 0.10's decoding rule (finetune_squad.py
with bert_qa_evaluate.predict: the top 20 starts and top 20 ends over the logits, pairs inside
the context with the start at its maximum context, end >= start, at most 30 tokens, best
start + end logit).
"""
import json

import mxnet as mx
import numpy as onp
import pytest

import gluonnlp_peer as peer
from gluon_attention.convert import from_gluonnlp
from gluon_attention.data import squad
from gluon_attention.models.qa import QAInference
from gluon_attention.pipelines import QAPredictor, load_qa_folder, load_qa_model
from gluon_attention.pipelines.features import eval_features

QUESTION, CONTEXT = 'where the cat sat', ('the dogs ran far away from home while the cat sat on a '
                                          'mat and every bird sang songs of joy')
MODEL = 'bert_12_768_12'


@pytest.fixture(scope='module')
def converted(tmp_path_factory):
    """(0.10 net, converted folder) of a tiny fine-tuned 0.10 SQuAD model."""
    tmp_path = tmp_path_factory.mktemp('squad010')
    vocab = peer.tiny_vocab()
    with peer.legacy():
        net = peer.SquadModel(peer.backbone(MODEL, len(vocab)))
    inputs = peer.batch(onp.random.RandomState(3), len(vocab), length=10)
    peer.randomize(net, 3, lambda: peer.call(net, MODEL, *inputs))
    peer.finetune_span(net, inputs, seed=3)
    peer.save(net, tmp_path / 'net.params')
    (tmp_path / 'net.vocab').write_text(vocab.to_json(), encoding='utf-8')
    from_gluonnlp(tmp_path / 'net.params', MODEL, tmp_path / 'net.vocab', tmp_path / 'model',
                  sizes=peer.sizes_of(MODEL))
    return net, str(tmp_path / 'model')


def _gluonnlp_rule(net, features):
    """(score, text) of 0.10's answer from its own logits (:func:`gluonnlp_peer.span_answer`)."""
    return peer.span_answer(net, MODEL, features, CONTEXT)


def test_predictor_answers_with_gluonnlp_span(converted):
    net, folder = converted
    predictor = QAPredictor.from_folder(folder)
    assert predictor.qa_config['head'] == 'span' and predictor.threshold.value == float('inf')
    features = _features(predictor)
    assert len(features) > 1                     # the context spans several chunks
    score, text = _gluonnlp_rule(net, features)
    answer = predictor.answer(QUESTION, CONTEXT)
    assert answer.text == text != ''
    assert CONTEXT[answer.start:answer.end] == text
    assert abs(answer.score - score) < 1e-4
    assert answer.null_score_diff == -float('inf')


def test_exported_graph_gives_the_same_outputs(converted, tmp_path):
    """QAInference over the span model exports (symbol + params) and reloads unchanged, and
    its ONNX conversion runs in ONNX Runtime with the same outputs."""
    from gluon_attention.export.block import export_and_check  # pylint: disable=import-outside-toplevel
    _, folder = converted
    loaded = load_qa_folder(folder)
    block = QAInference(load_qa_model(loaded, [mx.cpu()]), 5, 5)
    rng = onp.random.RandomState(0)
    batches = []
    for batch, length in ((2, 12), (3, 7)):
        ids = rng.randint(1, 20, (batch, length)).astype('int32')
        p_mask = (rng.rand(batch, length) < 0.7).astype('float32')
        batches.append([ids, onp.zeros_like(ids), onp.full((batch,), length, 'int32'), p_mask])
    _, report = export_and_check(block, str(tmp_path / 'span'), batches,
                                 ['input_ids', 'token_types', 'valid_length', 'p_mask'],
                                 ['int32', 'int32', 'int32', 'float32'])
    assert report['max_abs_diff'] <= 1e-5
    pytest.importorskip('onnxruntime', reason='the [onnx] extra is not installed')
    from gluon_attention.export.onnx import check_onnx  # pylint: disable=import-outside-toplevel
    axes = [('batch', 'sequence')] * 2 + [('batch',), ('batch', 'sequence')]
    assert check_onnx(block, str(tmp_path / 'span'), batches, axes)['max_abs_diff'] <= 1e-5


def test_run_squad_predict_and_evaluate_on_the_converted_folder(converted, capsys, tmp_path):
    run_squad = peer.run_squad()
    net, folder = converted
    predictor = QAPredictor.from_folder(folder)
    want = predictor.answer(QUESTION, CONTEXT)
    capsys.readouterr()
    args = ['predict', '--model-dir', folder, '--threads', '1', '--no-progress',
            '--question', QUESTION, '--context', CONTEXT, '--json']
    assert run_squad.main(args) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed['text'] == want.text == _gluonnlp_rule(net, _features(predictor))[1]
    # evaluate: gold answers 0.10's span (exact 100) and another text (exact 0)
    golds = [(want.text, want.start), ('joy', CONTEXT.index('joy'))]
    assert want.text != 'joy'
    qas = [{'id': str(i), 'question': QUESTION, 'answers': [{'text': t, 'answer_start': a}]}
           for i, (t, a) in enumerate(golds)]
    (tmp_path / 'eval.json').write_text(json.dumps({'version': '1.1', 'data': [{
        'title': 'cats', 'paragraphs': [{'context': CONTEXT, 'qas': qas}]}]}), encoding='utf-8')
    assert run_squad.main(['evaluate', '--model-dir', folder, '--threads', '1', '--no-progress',
                           '--eval-file', str(tmp_path / 'eval.json'), '--output-dir',
                           str(tmp_path / 'run'), '--version-2-with-negative', '0']) == 0
    metrics = json.loads((tmp_path / 'run' / 'evaluate' / 'metrics.json').read_text())
    assert (metrics['total'], metrics['exact']) == (2, 50.0)
    predictions = json.loads((tmp_path / 'run' / 'evaluate' / 'predictions.json').read_text())
    assert predictions == {'0': want.text, '1': want.text}


def _features(predictor):
    """The evaluation features of QUESTION and CONTEXT at the predictor's lengths."""
    return eval_features([squad.SquadExample('0', '', QUESTION, CONTEXT, [], False)],
                         predictor.tokenizer, predictor.qa_config['eval_max_seq_length'],
                         predictor.qa_config['max_query_length'])


def test_server_archive_of_the_converted_folder_answers_alike(converted, tmp_path):
    """The server's archive (exported graph, the folder's settings, tokenizer) loads in its
    handler and answers as the in-process predictor does."""
    import zipfile  # pylint: disable=import-outside-toplevel
    pytest.importorskip('model_archiver', reason='the [serve] extra is not installed')
    from jobs.serve.archive import build_archive, export_graph  # pylint: disable=import-outside-toplevel
    from jobs.serve.handler import QAService  # pylint: disable=import-outside-toplevel
    from jobs.serve.protocol import Limits  # pylint: disable=import-outside-toplevel
    _, folder = converted
    graph, store = str(tmp_path / 'export' / 'qa'), tmp_path / 'store'
    store.mkdir()
    assert export_graph(folder, graph)['max_abs_diff'] <= 1e-5
    path, _ = build_archive(folder, graph, str(store), 'squad', Limits(), 8)
    with zipfile.ZipFile(path) as archive:
        assert {'model/head_config.json', 'model/qa_config.json'} <= set(archive.namelist())
        archive.extractall(tmp_path / 'unpacked')
    served = QAService(str(tmp_path / 'unpacked')).answer([[(QUESTION, CONTEXT)]])[0][0]
    assert served.text == QAPredictor.from_folder(folder).answer(QUESTION, CONTEXT).text != ''
