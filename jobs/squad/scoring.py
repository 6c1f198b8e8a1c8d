"""Scoring SQuAD 2.0 answers once decoded: the official metrics with the null-odds AUC, and the
null threshold of best F1 on held-out questions. Pure NumPy and Python: no model runs here.
"""
import math
import sys

import numpy as onp

from gluon_attention.data import squad
from gluon_attention.pipelines import NullThreshold

__all__ = ['v2_metrics', 'null_odds_auc', 'choose_threshold']


def v2_metrics(examples, predictions, final, null_odds):
    """The SQuAD 2.0 metrics of :func:`~jobs.squad.evaluation.evaluate` from decoded answers.

    Parameters
    ----------
    examples : list of SquadExample
        The questions, with their gold answers.
    predictions : dict of str -> str
        The best non-null span of every question (answering every question).
    final : dict of str -> str
        The answers scored: '' where the question is judged impossible.
    null_odds : dict of str -> float
        The null score of every question (higher: more likely impossible).

    Returns
    -------
    dict
        The official SQuAD 2.0 keys of ``final`` (``best_*`` swept over ``null_odds``; left out,
        with a warning on stderr, when the null odds are constant or NaN), ``full_range_best_*``
        and ``always_answer_HasAns_*`` of ``predictions`` (every span kept, whatever its null
        odds), and ``null_odds_auc``.
    """
    reason = squad.degenerate_null_odds([null_odds[e.qas_id] for e in examples])
    if reason:
        print('warning: {}: no null threshold sweep, so metrics.json has no best_* keys'
              .format(reason), file=sys.stderr)
    swept = None if reason else null_odds
    metrics = squad.squad_evaluate(examples, final, na_probs=swept)
    # answering every question: no null odds may turn a span into '' (the official script's
    # default na_prob_thresh of 1.0 would, for null odds above 1)
    always = squad.squad_evaluate(examples, predictions, na_probs=swept, na_prob_thresh=math.inf)
    for key in ('best_exact', 'best_exact_thresh', 'best_f1', 'best_f1_thresh'):
        metrics['full_range_' + key] = always.get(key)
    for key in ('HasAns_exact', 'HasAns_f1'):
        metrics['always_answer_' + key] = always.get(key)
    metrics['null_odds_auc'] = null_odds_auc(examples, null_odds)
    return metrics


def null_odds_auc(examples, null_odds):
    """How well the null odds rank impossible questions above answerable ones.

    The Mann-Whitney AUC: the probability that a random impossible question has a larger score
    difference than a random answerable one (ties count 1/2). 0.5 is chance, 1.0 perfect.

    Parameters
    ----------
    examples : list of SquadExample
        The questions (an example without answers is impossible).
    null_odds : dict of str -> float
        Score difference per question id (``null_odds.json``).

    Returns
    -------
    float or None
        None when either class is empty.
    """
    impossible = onp.array([null_odds[e.qas_id] for e in examples if not e.answers], 'float64')
    answerable = onp.array([null_odds[e.qas_id] for e in examples if e.answers], 'float64')
    if not len(impossible) or not len(answerable):
        return None
    ranks = _average_ranks(onp.concatenate([impossible, answerable]))
    wins = ranks[:len(impossible)].sum() - len(impossible) * (len(impossible) + 1) / 2
    return float(wins / (len(impossible) * len(answerable)))


def _average_ranks(values):
    """1-based ranks, ties sharing their average rank."""
    order = onp.argsort(values, kind='stable')
    ranks = onp.empty(len(values))
    ranks[order] = onp.arange(1, len(values) + 1)
    unique, inverse = onp.unique(values, return_inverse=True)
    sums = onp.bincount(inverse, weights=ranks, minlength=len(unique))
    return (sums / onp.bincount(inverse, minlength=len(unique)))[inverse]


def choose_threshold(examples, spans, null_odds, source_suffix=''):
    """The null threshold of best F1 on the held-out ``examples`` (rule ``'between'``, as
    :func:`~jobs.squad.evaluation.calibrate_threshold` describes).

    Parameters
    ----------
    examples : list of SquadExample
        The held-out questions, with their gold answers (at least one).
    spans : dict of str -> str
        The best non-null span of every question.
    null_odds : dict of str -> float
        The null score of every question (higher: more likely impossible).
    source_suffix : str
        Appended to the recorded source (``'held-out articles A, B'``).

    Returns
    -------
    (NullThreshold, dict)
        As :func:`~jobs.squad.evaluation.calibrate_threshold`.
    """
    gains = {e.qas_id: max(squad.f1_score(gold, spans[e.qas_id]) for gold in
                           squad.gold_answers(e)) - (not e.answers) for e in examples}
    best, threshold = squad.sweep_null_threshold(
        {e.qas_id: null_odds[e.qas_id] for e in examples}, gains,
        float(sum(1 for e in examples if not e.answers)), 'between')
    f1 = 100.0 * best / len(examples)
    names = sorted({e.title for e in examples}, key=[e.title for e in examples].index)
    source = 'held-out articles {}{}'.format(', '.join(names), source_suffix)
    return NullThreshold(threshold, source), {
        'heldout_f1': f1, 'heldout_null_odds_auc': null_odds_auc(examples, null_odds),
        'heldout_total': len(examples)}
