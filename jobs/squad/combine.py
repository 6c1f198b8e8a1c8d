"""``scripts/combine_null_odds.py``: the null decision of several SQuAD 2.0 runs of one split,
combined with nothing chosen on the evaluation answers.

Each run gives one null score per question (``log P(impossible) - log P(answerable)``, the
``null_odds.json`` of :func:`~jobs.squad.evaluation.evaluate`) on the evaluation questions (the
train run's own output files) and on the articles held out for the threshold (the same files,
written by ``run_squad.py evaluate`` on those articles). The combined null score of a question
is the mean of the runs' scores, all differences of log-probabilities on one scale; the spans
are those of the first run; the threshold is the one of best F1 on the held-out articles
(:func:`~jobs.squad.scoring.choose_threshold`), and the evaluation questions are scored at it
(:func:`~jobs.squad.scoring.v2_metrics`).
"""
import dataclasses
import json
import os

import numpy as onp

from gluon_attention.checks import fail

from ..engine.config import read_run_config
from .config import TrainConfig
from .data import heldout_examples, load_eval_examples
from .scoring import choose_threshold, v2_metrics

__all__ = ['SPLIT_OPTIONS', 'read_run_outputs', 'mean_null_odds', 'combine', 'run_split']

#: The options of a train run that fix its held-out and evaluation questions: combined runs
#: must agree on each.
SPLIT_OPTIONS = ('train_file', 'threshold_titles', 'eval_file', 'eval_exclude_titles',
                 'max_eval_examples', 'version_2_with_negative')


def read_run_outputs(folder):
    """``(spans, null_odds)`` of the output files in ``folder``: the best span of every question
    (the first text of ``nbest_predictions.json``, '' for an empty list) and ``null_odds.json``.
    ValueError when either file is missing."""
    loaded = []
    for name in ('nbest_predictions.json', 'null_odds.json'):
        path = os.path.join(folder, name)
        if not os.path.isfile(path):
            fail('folder must hold {} (a train run, or run_squad.py evaluate\'s '
                 'evaluate/ folder)'.format(name), folder=folder)
        with open(path, encoding='utf-8') as handle:
            loaded.append(json.load(handle))
    nbest, null_odds = loaded
    return {q: (best[0]['text'] if best else '') for q, best in nbest.items()}, null_odds


def mean_null_odds(runs):
    """The mean null score of every question over ``runs`` (a non-empty sequence of dicts
    question id -> float, all with the same ids), summed in float64. ValueError otherwise."""
    if not runs:
        fail('runs must hold at least one run', num_runs=0)
    ids = set(runs[0])
    for index, run in enumerate(runs[1:], 1):
        if set(run) != ids:
            fail('every run must score the same questions', run=index,
                 missing=sorted(ids - set(run))[:3], extra=sorted(set(run) - ids)[:3])
    return {q: float(onp.mean(onp.array([run[q] for run in runs], onp.float64))) for q in runs[0]}


def _covered(examples, null_odds, where):
    missing = [e.qas_id for e in examples if e.qas_id not in null_odds]
    if missing:
        fail('the runs must score every {} question'.format(where), num_missing=len(missing),
             first_missing=missing[0])


def combine(heldout, evaluation, heldout_runs, eval_runs):
    """Score the evaluation questions with the mean null odds of several runs.

    Parameters
    ----------
    heldout, evaluation : list of SquadExample
        The held-out questions (the threshold is chosen on their answers) and the evaluation
        questions (scored only).
    heldout_runs, eval_runs : list of (dict, dict)
        Per run, in the same order: ``(spans, null_odds)`` on each set (:func:`read_run_outputs`).

    Returns
    -------
    dict
        ``metrics`` (:func:`~jobs.squad.scoring.v2_metrics` at the held-out threshold, with
        ``null_threshold``, ``null_threshold_source`` (ending in ``' (mean null odds of N runs)'``
        for N > 1), ``heldout_f1``,
        ``heldout_null_odds_auc``, ``heldout_total`` and ``runs``), ``final_predictions``,
        ``null_odds`` (the mean).

    Raises
    ------
    ValueError
        No runs, not one held-out entry per evaluation run, runs scoring different questions,
        or a question of either set without a null score.
    """
    if len(heldout_runs) != len(eval_runs):
        fail('expected one held-out output per run', num_runs=len(eval_runs),
             num_heldout=len(heldout_runs))
    held_odds = mean_null_odds([odds for _, odds in heldout_runs])
    _covered(heldout, held_odds, 'held-out')
    suffix = ' (mean null odds of {} runs)'.format(len(eval_runs)) if len(eval_runs) > 1 else ''
    threshold, record = choose_threshold(heldout, heldout_runs[0][0], held_odds, suffix)
    odds = mean_null_odds([odds for _, odds in eval_runs])
    _covered(evaluation, odds, 'evaluation')
    spans = {e.qas_id: eval_runs[0][0].get(e.qas_id, '') for e in evaluation}
    final = {q: ('' if odds[q] > threshold.value else text) for q, text in spans.items()}
    metrics = dict(v2_metrics(evaluation, spans, final, odds), runs=len(eval_runs), **record,
                   **threshold.record())
    return {'metrics': metrics, 'final_predictions': final, 'null_odds': odds}


def run_split(folders, data_dir=''):
    """The held-out and evaluation questions of the train runs in ``folders`` (read from each
    ``run_config.json``; ``data_dir`` other than '' replaces the recorded data folder).
    ValueError when the runs differ in an option of :data:`SPLIT_OPTIONS`."""
    runs = [read_run_config(folder, TrainConfig) for folder in folders]
    for folder, run in zip(folders[1:], runs[1:]):
        differ = {k: getattr(run, k) for k in SPLIT_OPTIONS if getattr(run, k) !=
                  getattr(runs[0], k)}
        if differ:
            fail('every run must have the held-out and evaluation questions of the first',
                 folder=folder, **differ)
    first = dataclasses.replace(runs[0], data_dir=data_dir) if data_dir else runs[0]
    return heldout_examples(first), load_eval_examples(first)
