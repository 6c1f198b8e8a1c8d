"""The null odds of several SQuAD 2.0 runs combined (jobs/squad/combine.py and
scripts/combine_null_odds.py): the mean against a float64 NumPy oracle, the threshold chosen on
the held-out questions only, hand-computed scores."""
import json
import os
import subprocess
import sys

import numpy as onp
import pytest

from gluon_attention.data import squad
from jobs.squad.combine import combine, mean_null_odds, read_run_outputs

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _example(qid, title, *golds):
    return squad.SquadExample(qid, title, 'q?', 'red fox', [(g, 0) for g in golds], not golds)


# held-out: h1 right span, h2 wrong span, h3 and h4 impossible
HELDOUT = [_example('h1', 'A', 'red fox'), _example('h2', 'A', 'red fox'), _example('h3', 'B'),
           _example('h4', 'B')]
HELD_SPANS = {'h1': 'red fox', 'h2': 'blue', 'h3': 'fox', 'h4': 'red'}
HELD_ODDS = ({'h1': -2.0, 'h2': 0.0, 'h3': 1.0, 'h4': 3.0},
             {'h1': 0.0, 'h2': -2.0, 'h3': 3.0, 'h4': 1.0})
# evaluation: e1 answerable (right span), e2 impossible
EVALUATION = [_example('e1', 'C', 'red fox'), _example('e2', 'C')]
EVAL_SPANS = {'e1': 'red fox', 'e2': 'fox'}
EVAL_ODDS = ({'e1': 0.2, 'e2': 0.0}, {'e1': 0.6, 'e2': 2.0})


def test_mean_null_odds_matches_a_float64_oracle():
    rng = onp.random.RandomState(0)
    runs = [{'q%d' % i: float(v) for i, v in enumerate(rng.randn(7).astype(onp.float32))}
            for _ in range(3)]
    got = mean_null_odds(runs)
    oracle = onp.array([[run['q%d' % i] for i in range(7)] for run in runs], onp.float64)
    assert [got['q%d' % i] for i in range(7)] == pytest.approx(list(oracle.mean(0)), abs=1e-15)


def test_two_runs_hand_computed():
    # mean held-out odds: h1 -1, h2 -1, h3 2, h4 2. All '' gives 2 right; answering h1 and h2
    # gives 3 (h2's span is wrong), all four 1: best F1 3/4, threshold midway between -1 and 2.
    results = combine(HELDOUT, EVALUATION, [(HELD_SPANS, o) for o in HELD_ODDS],
                      [(EVAL_SPANS, o) for o in EVAL_ODDS])
    metrics = results['metrics']
    assert metrics['null_threshold'] == 0.5
    assert metrics['heldout_f1'] == 75.0
    assert metrics['null_threshold_source'] == 'held-out articles A, B (mean null odds of 2 runs)'
    # evaluation: e1 mean 0.4 <= 0.5 answered (right), e2 mean 1.0 > 0.5 '' (right)
    assert results['null_odds'] == {'e1': pytest.approx(0.4), 'e2': 1.0}
    assert results['final_predictions'] == {'e1': 'red fox', 'e2': ''}
    assert (metrics['f1'], metrics['HasAns_f1'], metrics['NoAns_f1']) == (100.0, 100.0, 100.0)
    assert metrics['null_odds_auc'] == 1.0 and metrics['runs'] == 2


def test_one_run_keeps_its_own_threshold():
    # run 1 alone: h1 (-2) answered gives 3 first, cut midway between -2 and 0; e1 (0.2) is then
    # left '' (wrong) and e2 (0.0) too (right): F1 50
    results = combine(HELDOUT, EVALUATION, [(HELD_SPANS, HELD_ODDS[0])],
                      [(EVAL_SPANS, EVAL_ODDS[0])])
    assert results['metrics']['null_threshold'] == -1.0
    assert results['metrics']['null_threshold_source'] == 'held-out articles A, B'
    assert results['final_predictions'] == {'e1': '', 'e2': ''}
    assert results['metrics']['f1'] == 50.0


def test_the_threshold_ignores_the_evaluation_answers():
    flipped = [_example('e1', 'C'), _example('e2', 'C', 'red fox')]
    one = combine(HELDOUT, EVALUATION, [(HELD_SPANS, o) for o in HELD_ODDS],
                  [(EVAL_SPANS, o) for o in EVAL_ODDS])
    two = combine(HELDOUT, flipped, [(HELD_SPANS, o) for o in HELD_ODDS],
                  [(EVAL_SPANS, o) for o in EVAL_ODDS])
    assert one['metrics']['null_threshold'] == two['metrics']['null_threshold']
    assert two['metrics']['f1'] == 0.0


def _write_outputs(folder, spans, odds):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, 'nbest_predictions.json'), 'w', encoding='utf-8') as handle:
        json.dump({q: ([{'text': t, 'score': 0.0, 'probability': 1.0}] if t else [])
                   for q, t in spans.items()}, handle)
    with open(os.path.join(folder, 'null_odds.json'), 'w', encoding='utf-8') as handle:
        json.dump(odds, handle)


def test_read_run_outputs_takes_the_first_nbest_text(tmp_path):
    _write_outputs(str(tmp_path), {'a': 'red fox', 'b': ''}, {'a': 1.0, 'b': 2.0})
    assert read_run_outputs(str(tmp_path)) == ({'a': 'red fox', 'b': ''}, {'a': 1.0, 'b': 2.0})


def test_script_on_a_tiny_split(tmp_path):
    """Two run folders whose run_config.json name a tiny data file: the script's metrics are
    those of the hand-computed case above."""
    data = {'version': 'v2.0', 'data': [{'title': title, 'paragraphs': [{
        'context': 'red fox', 'qas': [
            {'id': e.qas_id, 'question': 'q?', 'is_impossible': not e.answers,
             'answers': [{'text': 'red fox', 'answer_start': 0}] if e.answers else []}
            for e in HELDOUT + EVALUATION if e.title == title]}]} for title in 'ABC']}
    path = tmp_path / 'tiny.json'
    path.write_text(json.dumps(data), encoding='utf-8')
    runs, held = [], []
    for k in range(2):
        run = str(tmp_path / 'run{}'.format(k))
        _write_outputs(run, EVAL_SPANS, EVAL_ODDS[k])
        _write_outputs(run + '-held', HELD_SPANS, HELD_ODDS[k])
        with open(os.path.join(run, 'run_config.json'), 'w', encoding='utf-8') as handle:
            json.dump({'train_file': str(path), 'threshold_titles': 'A,B',
                       'eval_file': str(path), 'eval_exclude_titles': 'A,B'}, handle)
        runs += ['--run-dir', run]
        held += ['--heldout-dir', run + '-held']
    out = tmp_path / 'out'
    done = subprocess.run([sys.executable, os.path.join(ROOT, 'scripts', 'combine_null_odds.py')]
                          + runs + held + ['--output-dir', str(out)], capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stderr
    metrics = json.loads((out / 'metrics.json').read_text(encoding='utf-8'))
    assert (metrics['f1'], metrics['null_threshold'], metrics['heldout_f1']) == (100.0, 0.5, 75.0)
    assert json.loads((out / 'predictions.json').read_text()) == {'e1': 'red fox', 'e2': ''}


def test_runs_of_other_splits_are_refused(tmp_path):
    from jobs.squad.combine import run_split
    folders = []
    for k, titles in enumerate(('A,B', 'A')):
        folder = tmp_path / 'run{}'.format(k)
        folder.mkdir()
        (folder / 'run_config.json').write_text(json.dumps({'threshold_titles': titles}))
        folders.append(str(folder))
    with pytest.raises(ValueError) as err:
        run_split(folders)
    assert 'held-out and evaluation questions of the first' in str(err.value)
    assert "threshold_titles='A'" in str(err.value) and 'Received:' in str(err.value)


def test_always_answer_keeps_spans_whose_null_odds_exceed_one():
    """``always_answer_HasAns_f1`` answers every question: the official script's default
    ``na_prob_thresh`` (1.0) must not turn e1's right span (null odds 5) into ''."""
    from jobs.squad.scoring import v2_metrics
    metrics = v2_metrics(EVALUATION, EVAL_SPANS, {'e1': '', 'e2': ''}, {'e1': 5.0, 'e2': 0.0})
    assert metrics['always_answer_HasAns_f1'] == 100.0
    assert metrics['HasAns_f1'] == 0.0 and metrics['f1'] == 50.0
