"""Scoring the comparison with PyTorch + transformers (``compare_transformers.py score``): each
run's dev outputs decoded the way its head is meant to be decoded, scored by our SQuAD v1.1
scorer, and the table.

Decoding, the same n-best size and longest answer on both sides (the null answer never):

- ours (conditional head: end given start): ``run_squad.py evaluate``'s decoding, the top
  ``start_top_n`` starts of each chunk, the top ``end_top_n`` ends given each, a span kept only
  from the chunk where its start token has its maximum context;
- theirs (``BertForQuestionAnswering``: independent start and end logits): the transformers
  question-answering example's, the top ``n_best_size`` starts and the top ``n_best_size`` ends
  of each chunk's tokens paired, score = start logit + end logit, every chunk proposing its spans.

Both keep spans inside the chunk's context with ``start <= end < start + max_answer_length``; a
question's answer is its best-scoring span over its chunks. EM and F1 are the official v1.1
definitions, the maximum over every reference answer
(:func:`~gluon_attention.data.squad.squad_v11_evaluate`).
"""
import collections
import json
import math
import os
import statistics

import numpy as onp

from gluon_attention.checks import fail
from gluon_attention.data import squad

from ..engine.common import atomic_path, atomic_write_json
from .compare import OUR_OUTPUTS, read_feature_file

__all__ = ['SIDES', 'DECODING', 'decode_run', 'score_predictions', 'score_runs', 'format_table']

#: The two sides, as the table names them.
SIDES = {'ours': 'gluon_attention (MXNet), conditional head',
         'theirs': 'PyTorch + transformers BertForQuestionAnswering'}

#: How each side's outputs become answers (recorded in ``results.json``).
DECODING = {'ours': 'conditional: top start_top_n starts, top end_top_n ends given each, '
                    'max-context chunk of the start',
            'theirs': 'independent: top n_best_size starts x top n_best_size ends, score = '
                      'start + end logit, every chunk'}


def decode_run(side, outputs, examples, features, n_best_size=20, max_answer_length=30):
    """Answer text per question id from one run's dev outputs (see the module docstring).

    Parameters
    ----------
    side : {'ours', 'theirs'}
    outputs : mapping of str to numpy.ndarray
        ``dev_outputs.npz``: ours, :data:`~.compare.OUR_OUTPUTS` (F, ...); theirs,
        ``start_logits`` and ``end_logits`` (F, T), positions past a feature's valid length
        ignored.
    examples, features : list
        The dev questions and features of the feature file.
    """
    if side == 'ours':
        results = list(zip(*[outputs[key] for key in OUR_OUTPUTS]))
    elif side == 'theirs':
        results = [squad.independent_top_spans(outputs['start_logits'][i, :f.valid_length],
                                               outputs['end_logits'][i, :f.valid_length],
                                               n_best_size) for i, f in enumerate(features)]
    else:
        fail("side must be 'ours' or 'theirs'", side=side)
    _, final, _, _ = squad.decode_predictions(examples, features, results, n_best_size,
                                              max_answer_length, math.inf,
                                              max_context=side == 'ours')
    return final


def score_predictions(examples, predictions):
    """``{'exact', 'f1', 'total'}``: the official SQuAD v1.1 EM (the script's ``exact_match``)
    and F1 (percent)."""
    metrics = squad.squad_v11_evaluate(examples, predictions)
    return {'exact': metrics['exact_match'], 'f1': metrics['f1'], 'total': metrics['total']}


def _same_batches(runs):
    """{'seed S, N x B': True when every run of that seed, steps and batch trained the same
    feature indices in the same order (``batches.npz``) and fed the same arrays
    (``batch_digest``)}."""
    groups = collections.defaultdict(list)
    for run in runs:
        with onp.load(os.path.join(run['folder'], 'batches.npz')) as batches:
            groups['seed {seed}, {steps} x {batch}'.format(**run)].append(
                (batches['index'].tobytes(), batches['offsets'].tobytes(), run['batch_digest']))
    return {key: len(set(found)) == 1 for key, found in groups.items()}


def _comparisons(means):
    """The issue's two comparisons where both sides ran: (a) both with our recipe, (b) each
    with its own; F1 difference (ours - theirs) and, for (a), our speed / theirs."""
    by = {(m['side'], m['recipe'], m['steps'], m['batch']): m for m in means}
    found = []
    for (side, recipe, steps, batch), ours in by.items():
        for name, their_recipe in (('a: the same recipe (ours)', 'ours'),
                                   ('b: each its own recipe', 'theirs')):
            theirs = by.get(('theirs', their_recipe, steps, batch))
            if side == 'ours' and recipe == 'ours' and theirs:
                found.append({'comparison': name, 'steps': steps, 'batch': batch,
                              'f1_difference': ours['f1'] - theirs['f1'],
                              'speed_ratio': ours['train_features_per_second']
                              / theirs['train_features_per_second']})
    return found


def _mean_rows(runs):
    """The mean over seeds of each (side, recipe, steps, batch), in the order first met."""
    groups = collections.defaultdict(list)
    for run in runs:
        groups[(run['side'], run['recipe'], run['steps'], run['batch'])].append(run)
    return [{'side': side, 'recipe': recipe, 'steps': steps, 'batch': batch,
             'seeds': [r['seed'] for r in group],
             **{key: statistics.mean(r[key] for r in group)
                for key in ('train_features_per_second', 'exact', 'f1')}}
            for (side, recipe, steps, batch), group in groups.items()]


def score_runs(features_path, run_folders, output_dir, n_best_size=20, max_answer_length=30):
    """Decode and score every run folder; write ``<output-dir>/results.json`` and ``table.md``
    (and each run's ``predictions.json``); returns the results dict.

    Raises
    ------
    ValueError
        A run folder written from another feature file, or no run folder.
    """
    if not run_folders:
        fail('expected at least one run folder', runs=run_folders)
    data = read_feature_file(features_path, train=False)
    runs = []
    for folder in run_folders:
        with open(os.path.join(folder, 'run.json'), encoding='utf-8') as handle:
            run = dict(json.load(handle), folder=folder)
        if run['file_id'] != data['meta']['file_id']:
            fail('expected runs trained on this feature file', run=folder,
                 file_id=run['file_id'], feature_file_id=data['meta']['file_id'])
        with onp.load(os.path.join(folder, 'dev_outputs.npz')) as outputs:
            final = decode_run(run['side'], outputs, data['examples'], data['dev'], n_best_size,
                               max_answer_length)
        atomic_write_json(os.path.join(folder, 'predictions.json'), final)
        runs.append(dict(run, **score_predictions(data['examples'], final)))
    means = _mean_rows(runs)
    results = {'runs': runs, 'means': means, 'comparisons': _comparisons(means),
               'same_batches': _same_batches(runs),
               'n_best_size': n_best_size, 'max_answer_length': max_answer_length,
               'decoding': DECODING,
               'dev_questions': len(data['examples']), 'dev_titles': data['meta']['dev_titles'],
               'train_features': data['meta']['train_features']}
    os.makedirs(output_dir, exist_ok=True)
    atomic_write_json(os.path.join(output_dir, 'results.json'), results)
    table = format_table(results)
    with atomic_path(os.path.join(output_dir, 'table.md')) as tmp:
        with open(tmp, 'w', encoding='utf-8') as handle:
            handle.write(table + '\n')
    print(table)
    for key, same in results['same_batches'].items():
        if not same:
            print('warning: the runs of {} trained different batches'.format(key))
    return results


def format_table(results):
    """The Markdown table: one row per run, then the mean over seeds of each side and recipe."""
    lines = ['| side | recipe | seed | steps x batch | train features/s | EM | F1 |',
             '|---|---|---|---|---:|---:|---:|']
    row = '| {} | {} | {} | {} x {} | {:.2f} | {:.2f} | {:.2f} |'
    for run in results['runs']:
        lines.append(row.format(SIDES[run['side']], run['recipe'], run['seed'], run['steps'],
                                run['batch'], run['train_features_per_second'], run['exact'],
                                run['f1']))
    for mean in results['means']:
        lines.append(row.format(SIDES[mean['side']], mean['recipe'], 'mean of {}'.format(
            ', '.join(map(str, mean['seeds']))), mean['steps'], mean['batch'],
            mean['train_features_per_second'], mean['exact'], mean['f1']))
    for found in results['comparisons']:
        lines.append('\n({comparison}, {steps} x {batch}: F1 ours - theirs {f1_difference:+.2f}, '
                     'training speed ours / theirs {speed_ratio:.2f}x)'.format(**found))
    return '\n'.join(lines)
