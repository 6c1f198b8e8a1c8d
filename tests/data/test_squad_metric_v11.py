"""SQuAD 1.1 scored with the official v1.1 definitions, not the v2.0 edge rules."""
import pytest
from conftest import squad_file

from gluon_attention.pipelines.threshold import NullThreshold
from gluon_attention.data import squad
from gluon_attention.data.squad import SquadExample, read_squad
from jobs.squad import evaluation


def _example(qid, *golds):
    return SquadExample(qid, 'T', 'q', 'c', [(t, 0) for t in golds], False)


@pytest.mark.parametrize('gold, prediction, em, f1_v11, f1_v20', [
    ('The', 'the', 1, 0.0, 1.0),          # both normalise to nothing: no shared token
    ('', '', 1, 0.0, 1.0),
    ('the', 'a cat', 0, 0.0, 0.0),
    ('Paris', 'paris!', 1, 1.0, 1.0),
    ('the cat sat on the mat', 'cat on mat', 0, 2 * 0.75 / 1.75, 2 * 0.75 / 1.75),
])
def test_v11_and_v20_token_f1(gold, prediction, em, f1_v11, f1_v20):
    assert squad.exact_match(gold, prediction) == em
    assert squad.f1_score(gold, prediction, '1.1') == pytest.approx(f1_v11)
    assert squad.f1_score(gold, prediction) == pytest.approx(f1_v20)


def test_v11_keeps_gold_answers_that_normalise_to_nothing():
    example = _example('q', 'The', 'Paris')
    assert squad.gold_answers(example, '1.1') == ['The', 'Paris']
    assert squad.gold_answers(example) == ['Paris']


def test_squad_v11_evaluate_hand_example():
    """q1: gold 'The', prediction 'the': EM 1, F1 0 (v2.0 replaces the gold by '', which
    scores 'the' EM 1, F1 1). q2: gold 'big red dog' / 'dog', prediction 'dog': EM 1 (second
    gold), F1 1.
    q3: gold 'cat', prediction 'dog': 0, 0. Totals: EM 2/3, F1 (0 + 1 + 0)/3."""
    examples = [_example('q1', 'The'), _example('q2', 'big red dog', 'dog'),
                _example('q3', 'cat')]
    predictions = {'q1': 'the', 'q2': 'dog', 'q3': 'dog', 'extra': 'x'}
    result = squad.squad_v11_evaluate(examples, predictions)
    assert result == pytest.approx({'exact_match': 200 / 3, 'f1': 100 / 3,
                                    'total': 3})
    old = squad.squad_evaluate(examples, predictions)
    assert old['f1'] == pytest.approx(200 / 3)   # the v2.0 rule: F1 1 for q1


def test_evaluate_without_negatives_uses_the_v11_rules(monkeypatch):
    """The job's SQuAD 1.1 path (``version_2_with_negative`` 0) scores gold 'The' against the
    prediction 'the' EM 100, F1 0, under the keys exact / f1 / total."""
    examples = [_example('q1', 'The')]

    def decoded(*args, **kwargs):
        return {'q1': 'the'}, {'q1': 'the'}, {'q1': 0.0}, {'q1': []}
    monkeypatch.setattr(evaluation.squad, 'decode_predictions', decoded)
    result = evaluation.evaluate(evaluation.EvalSet(examples, []), [],
                                 NullThreshold(0.0, 'argument'), 20, 30, 0)
    assert result['metrics'] == {'exact': 100.0, 'f1': 0.0, 'total': 1}


def test_v11_gold_answers_score_100_on_the_real_file():
    examples = read_squad(squad_file('v1.1-24articles'))
    first = {e.qas_id: e.answers[0][0] for e in examples}
    result = squad.squad_v11_evaluate(examples, first)
    assert result['exact_match'] == 100.0 and result['total'] == 4961
    assert result['f1'] == 100.0
