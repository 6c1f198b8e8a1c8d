"""A GluonNLP 0.10-style RoBERTa SQuAD model, converted with its merges file, answers through the
QA pipeline: features laid out ``<s> question </s></s> context </s>`` (token types all 0, as its
byte-level BPE tokenizer lays out a pair), and the span of ``QAPredictor`` and ``run_squad.py
predict`` is the one 0.10's own logits give under 0.10's decoding rule
(:func:`gluonnlp_peer.span_answer`)."""
import json

import numpy as onp
import pytest

import gluonnlp_peer as peer
from gluon_attention.data import squad
from gluon_attention.pipelines import QAPredictor
from gluon_attention.pipelines.features import eval_features
from roberta_tiny import MODEL, TOKENS, convert

QUESTION = 'who held red'
CONTEXT = 'hello world he held red dew or old wool we owe her hello world or rod hero word'


@pytest.fixture(scope='module')
def converted(tmp_path_factory):
    """(0.10 net, converted folder) of a tiny 0.10-layout RoBERTa SQuAD model (``bert.`` +
    ``span_classifier``), randomised and fine-tuned a few steps."""
    tmp_path = tmp_path_factory.mktemp('roberta_squad')
    with peer.legacy():
        net = peer.SquadModel(peer.backbone(MODEL, len(TOKENS)))
    inputs = peer.batch(onp.random.RandomState(5), len(TOKENS), length=10, types=False)
    peer.randomize(net, 5, lambda: peer.call(net, MODEL, *inputs))
    peer.finetune_span(net, inputs, seed=5)
    peer.save(net, tmp_path / 'net.params')
    result = convert(tmp_path / 'net.params', tmp_path, peer.sizes_of(MODEL))
    assert result['head'] == 'span' and result['tokenizer']
    return net, result['output_dir']


def _features(predictor):
    return eval_features([squad.SquadExample('0', '', QUESTION, CONTEXT, [], False)],
                         predictor.tokenizer, predictor.qa_config['eval_max_seq_length'],
                         predictor.qa_config['max_query_length'])


def test_features_use_roberta_pair_layout(converted):
    predictor = QAPredictor.from_folder(converted[1])
    features = _features(predictor)
    assert len(features) > 1                      # the context spans several chunks
    query = predictor.tokenizer.encode(QUESTION, add_special_tokens=False).ids
    query = query[:predictor.qa_config['max_query_length']]
    for feature in features:
        low, high = feature.context_range
        assert feature.input_ids[:low] == [0] + query + [2, 2]          # <s> q </s></s>
        assert feature.input_ids[high:] == [2] and high == feature.valid_length - 1
        assert feature.token_types == [0] * feature.valid_length
        assert feature.p_mask == [1] + [0] * (low - 1) + [1] * (high - low) + [0]
        assert feature.valid_length <= predictor.qa_config['eval_max_seq_length']


def test_predictor_answers_with_gluonnlp_span(converted):
    net, folder = converted
    predictor = QAPredictor.from_folder(folder)
    score, text = peer.span_answer(net, MODEL, _features(predictor), CONTEXT)
    answer = predictor.answer(QUESTION, CONTEXT)
    assert answer.text == text != ''
    assert CONTEXT[answer.start:answer.end] == answer.text
    assert abs(answer.score - score) < 1e-4


def test_run_squad_predict_on_the_converted_roberta_folder(converted, capsys):
    run_squad = peer.run_squad()
    _, folder = converted
    want = QAPredictor.from_folder(folder).answer(QUESTION, CONTEXT)
    capsys.readouterr()
    assert run_squad.main(['predict', '--model-dir', folder, '--threads', '1', '--no-progress',
                           '--question', QUESTION, '--context', CONTEXT, '--json']) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed['text'] == want.text != ''
