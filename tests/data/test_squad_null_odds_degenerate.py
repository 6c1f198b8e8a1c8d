"""Degenerate no-answer scores (constant or NaN) are refused by the metric, and the job scores
without the threshold sweep and says why, instead of reporting a swept threshold."""
import math

import pytest

from gluon_attention.pipelines.threshold import NullThreshold
from gluon_attention.data import squad
from gluon_attention.data.squad import SquadExample
from jobs.squad import evaluation


def _examples():
    return [SquadExample('q1', 'T', 'q', 'c', [('Paris', 0)], False),
            SquadExample('q2', 'T', 'q', 'c', [], True),
            SquadExample('q3', 'T', 'q', 'c', [('red dog', 0)], False)]


PREDICTIONS = {'q1': 'Paris', 'q2': 'x', 'q3': 'dog'}


@pytest.mark.parametrize('odds, reason', [
    ({'q1': 0.0, 'q2': 0.0, 'q3': 0.0}, 'constant no-answer scores'),
    ({'q1': -2.5, 'q2': -2.5, 'q3': -2.5}, 'constant no-answer scores'),
    ({'q1': 0.1, 'q2': math.nan, 'q3': 0.3}, 'a NaN no-answer score'),
])
def test_degenerate_null_odds_are_refused(odds, reason):
    with pytest.raises(ValueError, match=r'expected no-answer scores that can be swept \({}\)\. '
                                         r'Received: num_questions=3'.format(reason)):
        squad.squad_evaluate(_examples(), PREDICTIONS, na_probs=odds)


def test_varying_null_odds_are_swept_and_one_question_is_not_degenerate():
    odds = {'q1': 0.1, 'q2': 0.9, 'q3': 0.1}     # ties allowed: not every value equal
    result = squad.squad_evaluate(_examples(), PREDICTIONS, na_probs=odds)
    # all '' = 1 (q2); +q1 (0.1) -> 2; +q3 -> 2.667 (F1 2/3); +q2 ('x' wrong) -> 1.667
    assert result['best_f1'] == pytest.approx(100 * (2 + 2 / 3) / 3)
    assert result['best_f1_thresh'] == 0.1
    assert squad.degenerate_null_odds([0.0]) is None


def test_the_job_scores_without_the_sweep_and_warns(monkeypatch, capsys):
    examples = _examples()
    odds = dict.fromkeys(PREDICTIONS, 0.0)

    def decoded(*args, **kwargs):
        return PREDICTIONS, PREDICTIONS, odds, {}
    monkeypatch.setattr(evaluation.squad, 'decode_predictions', decoded)
    metrics = evaluation.evaluate(evaluation.EvalSet(examples, []), [],
                                  NullThreshold(0.0, 'argument'), 20, 30, 1)['metrics']
    assert not [k for k in metrics if 'best_' in k and metrics[k] is not None]
    assert metrics['f1'] == pytest.approx(100 * (1 + 0 + 2 / 3) / 3)
    assert 'warning: constant no-answer scores: no null threshold sweep' in capsys.readouterr().err
