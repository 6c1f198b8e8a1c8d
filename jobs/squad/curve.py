"""``run_squad.py curve``: the learning curve of a train run, computed from its checkpoints after
the run (or while it goes on).

Every intact checkpoint in ``<output-dir>/checkpoints`` (``train --keep-checkpoints 0`` keeps
them all) is loaded over the run's recipe (``run_config.json``); its null threshold is chosen on
the held-out articles as ``train`` chooses it
(:func:`~jobs.squad.evaluation.calibrate_threshold`), and it is scored on the run's
evaluation questions (:func:`~jobs.squad.evaluation.evaluate`). Each checkpoint
gives one row of ``<output-dir>/curve.csv`` (:data:`CURVE_COLUMNS`), rewritten atomically after each
one; ``curve.png`` draws the rows, the training loss of ``train_log.jsonl`` and the machine's load
average when each checkpoint was saved.
"""
import csv
import dataclasses
import math
import os

import mxnet as mx

from gluon_attention.checks import fail
from gluon_attention.data import squad

from ..engine.checkpoints import CheckpointManager
from ..engine.common import atomic_path
from ..engine.config import RUN_CONFIG, read_run_config
from ..engine.train_log import TRAIN_LOG, read_train_log
from .config import NEVER_NULL, NullThreshold, TrainConfig
from .data import heldout_examples, load_eval_examples
from .evaluation import EvalSet, calibrate_threshold, contexts_of, evaluate, infer
from .folder import model_folder
from .model import build_model

__all__ = ['CURVE_COLUMNS', 'PLOTS_EXTRA', 'run_of', 'curve_name', 'CurveJob', 'prepare_curve',
           'score_checkpoint', 'write_curve', 'read_curve', 'draw_curve', 'run_curve']

#: The columns of ``curve.csv``: the step and training seconds of the checkpoint (seconds empty
#: when unknown); null-odds AUC; F1 on the answerable questions at the held-out threshold
#: (``HasAns_f1``, as ``metrics.json``) and when always answering (the spans alone); the F1 of
#: the best threshold on the evaluation answers (``best_f1``, the official script's sweep); the F1
#: at the threshold chosen on the held-out articles (``calibrated_f1``: what ``train`` reports as
#: ``f1``) and that threshold, with its F1 on the held-out questions; the load averages (1, 5, 15 minutes) and cores of the
#: machine when the checkpoint was saved. F1 in percent; empty cells where a value does not
#: apply (SQuAD 1.1).
CURVE_COLUMNS = ('step', 'train_seconds', 'null_odds_auc', 'HasAns_f1',
                 'always_answer_HasAns_f1', 'best_f1', 'calibrated_f1', 'threshold',
                 'heldout_f1', 'load_1m', 'load_5m', 'load_15m', 'cpu_count')
PLOTS_EXTRA = 'pip install gluon_attention[plots]'
_DIGITS = {'train_seconds': 1, 'null_odds_auc': 4, 'threshold': 4, 'load_1m': 2, 'load_5m': 2,
           'load_15m': 2}


def run_of(config):
    """The run's :class:`~jobs.squad.config.TrainConfig` from its
    ``run_config.json``, with the output folder, devices, threads, progress bars and batch size
    of ``config`` (a :class:`~jobs.squad.config.CurveConfig`).

    Raises
    ------
    ValueError
        ``--output-dir`` holds no ``run_config.json``, or one with options unknown here.
    """
    if not os.path.isfile(os.path.join(config.output_dir, RUN_CONFIG)):
        fail('--output-dir must be the folder of a train run (with {} and checkpoints/)'.format(
            RUN_CONFIG), output_dir=config.output_dir)
    run = read_run_config(config.output_dir, TrainConfig)
    return dataclasses.replace(run, output_dir=config.output_dir, ctx=config.ctx,
                               threads=config.threads, progress=config.progress,
                               eval_batch_size=config.eval_batch_size,
                               max_eval_examples=config.max_eval_examples or run.max_eval_examples)


def curve_name(config):
    """The file stem of the curve: ``curve``, or ``curve-first<N>`` with ``--max-eval-examples
    N`` (so that rows scored on other questions are never mixed)."""
    return 'curve-first{}'.format(config.max_eval_examples) if config.max_eval_examples else 'curve'


@dataclasses.dataclass(frozen=True)
class CurveJob:
    """What :func:`prepare_curve` reads for :func:`run_curve`.

    Attributes
    ----------
    run : TrainConfig
        The run's recipe (:func:`run_of`).
    checkpoint_dir : str
        ``<output-dir>/checkpoints``.
    entries : list of dict
        Its intact checkpoints, oldest first
        (:meth:`~jobs.engine.checkpoints.CheckpointManager.entries`).
    contexts : list of mx.Context
        The one device to score on.
    tokenizer : tokenizers.Tokenizer
        The tokenizer of the run's pretrained folder.
    heldout_examples : list of SquadExample
        The questions of the run's ``--threshold-titles`` articles (empty without SQuAD 2.0).
    eval_set : EvalSet
        The run's evaluation questions and their features.
    """
    run: TrainConfig
    checkpoint_dir: str
    entries: list[dict]
    contexts: list[mx.Context]
    tokenizer: 'tokenizers.Tokenizer'
    heldout_examples: list[squad.SquadExample]
    eval_set: EvalSet


def prepare_curve(config):
    """The run's recipe, its intact checkpoints, tokenizer, held-out and evaluation questions.

    Raises
    ------
    ValueError
        As :func:`run_of`; ``checkpoints/`` missing or without an intact checkpoint (of a step
        that is a multiple of ``--every``, or the last); a bad
        ``--ctx``; the run's pretrained ``--model-dir`` no longer a model folder.
    """
    run = run_of(config)
    folder = os.path.join(config.output_dir, 'checkpoints')
    entries = CheckpointManager(folder).entries() if os.path.isdir(folder) else []
    if config.every:
        entries = [e for e in entries if e['step'] % config.every == 0 or e is entries[-1]]
    if not entries:
        fail('--output-dir must hold intact checkpoints in checkpoints/ (train with '
             '--keep-checkpoints 0 to keep every one)', output_dir=config.output_dir)
    contexts = contexts_of(run)[:1]
    tokenizer = squad.load_tokenizer(model_folder(run))
    heldout = heldout_examples(run) if run.version_2_with_negative else []
    eval_set = EvalSet.from_examples(load_eval_examples(run), tokenizer, run.eval_max_seq_length,
                                     run.max_query_length)
    return CurveJob(run, folder, entries, contexts, tokenizer, heldout, eval_set)


def score_checkpoint(model, entry, job):
    """Load the checkpoint ``entry`` into ``model`` and score it: one row of ``curve.csv``."""
    run, ctx = job.run, job.contexts[0]
    model.load_parameters(os.path.join(job.checkpoint_dir, entry['files']['params']['file']),
                          ctx=job.contexts)
    threshold, heldout = NullThreshold(math.inf, NEVER_NULL), {}   # SQuAD 1.1: never ''
    if run.version_2_with_negative:
        threshold, heldout = calibrate_threshold(model, job.heldout_examples, job.tokenizer, run,
                                                 ctx)
    outputs = infer(model, job.eval_set.features, run, ctx)[1]
    metrics = evaluate(job.eval_set, outputs, threshold, run.n_best_size, run.max_answer_length,
                       run.version_2_with_negative)['metrics']
    meta = entry['meta']
    load = meta.get('load_average') or [None] * 3
    answerable_f1 = None if run.version_2_with_negative else metrics['f1']
    return {'step': entry['step'], 'train_seconds': meta.get('train_seconds'),
            'null_odds_auc': metrics.get('null_odds_auc'),
            'HasAns_f1': metrics.get('HasAns_f1', answerable_f1),
            'always_answer_HasAns_f1': metrics.get('always_answer_HasAns_f1', answerable_f1),
            'best_f1': metrics.get('best_f1'), 'calibrated_f1': metrics['f1'],
            'threshold': threshold.value if math.isfinite(threshold.value) else None,
            'heldout_f1': heldout.get('heldout_f1'), 'load_1m': load[0],
            'load_5m': load[1], 'load_15m': load[2], 'cpu_count': meta.get('cpu_count')}


def _cell(name, value):
    if value is None:
        return ''
    return round(value, _DIGITS.get(name, 3)) if isinstance(value, float) else value


def write_curve(path, rows):
    """Write ``rows`` (dicts of :data:`CURVE_COLUMNS`) to the CSV file ``path`` atomically."""
    with atomic_path(path) as tmp:
        with open(tmp, 'w', encoding='utf-8', newline='') as handle:
            writer = csv.writer(handle)
            writer.writerow(CURVE_COLUMNS)
            writer.writerows([_cell(name, row.get(name)) for name in CURVE_COLUMNS]
                             for row in rows)


def read_curve(path):
    """The rows of a ``curve.csv``: dicts of floats (``step`` and ``cpu_count`` ints, empty
    cells None)."""
    with open(path, encoding='utf-8', newline='') as handle:
        rows = list(csv.DictReader(handle))
    return [{name: (int(value) if name in ('step', 'cpu_count') else float(value))
             if value != '' else None
             for name, value in row.items()} for row in rows]


def _series(rows, name):
    points = [(row['step'], row[name]) for row in rows if row.get(name) is not None]
    return [step for step, _ in points], [value for _, value in points]


def _draw_scores(f1_axis, auc_axis, rows):
    for name, label, style in (
            ('always_answer_HasAns_f1', 'HasAns F1, always answering (the spans)', 'o-'),
            ('best_f1', 'best F1 (official threshold sweep)', 's-'),
            ('calibrated_f1', 'F1 at the held-out threshold', 'x--')):
        f1_axis.plot(*_series(rows, name), style, label=label)
    f1_axis.set_ylabel('F1 (%)')
    f1_axis.set_ylim(bottom=0)
    steps, auc = _series(rows, 'null_odds_auc')
    auc_axis.plot(steps, auc, 'o-', color='tab:purple', label='null-odds AUC')
    auc_axis.axhline(0.5, color='gray', linestyle=':', label='chance')
    auc_axis.set_ylim(min(auc + [0.45]) - 0.02, max(auc + [0.75]) + 0.02)
    auc_axis.set_ylabel('AUC')


def _draw_load(axis, rows):
    axis.plot(*_series(rows, 'load_1m'), 'o-', color='tab:red',
              label='load average (1 min) at the checkpoint')
    cores = [row['cpu_count'] for row in rows if row.get('cpu_count')]
    if cores:
        axis.axhline(max(cores), color='gray', linestyle=':', label='cores')
    axis.set_ylabel('load')
    axis.set_ylim(bottom=0)


def _draw_loss(axis, log_rows):
    steps = [row['step'] for row in log_rows]
    for name, style in (('loss', 'k.-'), ('span', 'b.--'), ('answerable', 'g.--')):
        if all(name in row for row in log_rows):
            axis.plot(steps, [row[name] for row in log_rows], style, label='training ' + name)
    axis.set_ylabel('loss')
    axis.set_ylim(bottom=0)


def draw_curve(rows, path, title='', log_rows=()):
    """Draw the rows of ``curve.csv`` to the PNG file ``path`` (atomically): F1 (percent), the
    null-odds AUC, the training loss (with its span and answerable terms) of ``log_rows`` (the
    rows of ``train_log.jsonl``, when given) and, where recorded, the 1-minute load average
    against the machine's cores, each against the training step.

    Returns the path, or None (with a line saying ``pip install gluon_attention[plots]``) when
    matplotlib is not installed.
    """
    try:
        from matplotlib.figure import Figure  # pylint: disable=import-outside-toplevel
    except ImportError as error:
        print('curve.png skipped ({}): {}'.format(error, PLOTS_EXTRA))
        return None
    load = any(row.get('load_1m') is not None for row in rows)
    panels = 2 + bool(log_rows) + load
    figure = Figure(figsize=(7, 2.4 * panels + 0.6), layout='constrained')
    axes = figure.subplots(panels, 1, sharex=True, squeeze=False)[:, 0]
    _draw_scores(axes[0], axes[1], rows)
    if log_rows:
        _draw_loss(axes[2], log_rows)
    if load:
        _draw_load(axes[-1], rows)
    for axis in axes:
        axis.grid(alpha=0.3)
        axis.legend(fontsize='small')
    axes[-1].set_xlabel('training step')
    axes[-1].xaxis.get_major_locator().set_params(integer=True)
    seconds = [row['train_seconds'] for row in rows if row.get('train_seconds') is not None]
    minutes = ' ({:.0f} min of training)'.format(seconds[-1] / 60) if seconds else ''
    figure.suptitle((title or 'learning curve') + minutes)
    with atomic_path(path) as tmp:
        figure.savefig(tmp, format='png', dpi=110)
    return path


def _scored_rows(path):
    """The rows of an earlier ``curve.csv`` at ``path`` by (step, train seconds); {} if none."""
    if not os.path.isfile(path):
        return {}
    return {(row['step'], row['train_seconds']): row for row in read_curve(path)}


def run_curve(config, job):
    """Score every checkpoint, rewriting ``curve.csv`` after each; then draw ``curve.png``
    (with ``--plot``). A checkpoint that an earlier ``curve.csv`` already scored (same step and
    training seconds) keeps its row, so the command can follow a run that goes on.
    Returns the exit status."""
    run = job.run
    model = build_model(run.model_dir, run, job.contexts)
    stem = os.path.join(config.output_dir, curve_name(config))
    path, rows = stem + '.csv', []
    scored = _scored_rows(path)
    for entry in job.entries:
        seconds = _cell('train_seconds', entry['meta'].get('train_seconds'))
        row = scored.get((entry['step'], seconds))
        rows.append(row or score_checkpoint(model, entry, job))
        write_curve(path, rows)
        print('step {step}: null-odds AUC {null_odds_auc}, HasAns F1 {HasAns_f1}, best F1 '
              '{best_f1}, F1 {calibrated_f1} at the held-out threshold {threshold}'.format(
                  **{k: _cell(k, v) for k, v in rows[-1].items()}), flush=True)
    kept = sum(row is scored.get((row['step'], row['train_seconds'])) for row in rows)
    print('{} checkpoints: {} scored now, {} kept from the earlier curve: {}'.format(
        len(rows), len(rows) - kept, kept, path))
    if config.plot:
        title = 'learning curve of {}'.format(os.path.basename(os.path.abspath(config.output_dir)))
        drawn = draw_curve(read_curve(path), stem + '.png', title,
                           read_train_log(os.path.join(config.output_dir, TRAIN_LOG)))
        if drawn:
            print('drawn: {}'.format(drawn))
    return 0
