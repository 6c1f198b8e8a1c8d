"""The training log of every job: a line on stdout and a row of ``train_log.jsonl`` every N steps.

:func:`~jobs.engine.loop.train_steps` feeds a :class:`TrainLog` after each step;
the chief (rank 0) prints and writes. A row holds the mean loss of the steps since the previous
row (this worker's examples, with the job's named parts, e.g. the SQuAD ``span`` and
``answerable`` terms, gathered by a :class:`LossParts`), the learning rate and gradient norm of
its last step, the training speed and the time left. Nothing here draws random numbers or runs
an operator: the training computation is the same with or without the log.

Resuming: a resumed run keeps the rows up to the step of the checkpoint it resumes from and
drops the later ones (steps that the killed run did after its last checkpoint, which the
resumed run repeats), so every step is in the file once, from the run that went on.
"""
import json
import math
import os
import sys
import time

from tqdm import tqdm

from gluon_attention import checks

from .common import atomic_path

__all__ = ['LossParts', 'TrainLog', 'TRAIN_LOG', 'read_train_log', 'default_log_every']

#: The log file's name in a run folder.
TRAIN_LOG = 'train_log.jsonl'
#: About this many rows in a run whose ``log_every`` is 0.
ROWS_PER_RUN = 20


def default_log_every(total_steps, every=0):
    """``every``, or for 0 the interval that gives about :data:`ROWS_PER_RUN` rows."""
    return every if every > 0 else max(1, math.ceil(total_steps / ROWS_PER_RUN))


def read_train_log(path):
    """The rows of a ``train_log.jsonl`` (dicts, in file order); a last line cut short by a kill
    is left out. [] when the file does not exist."""
    if not os.path.isfile(path):
        return []
    rows = []
    with open(path, encoding='utf-8') as handle:
        for line in handle:
            try:
                rows.append(json.loads(line))
            except ValueError:
                break
    return rows


class LossParts:
    """Named terms of a job's loss, added by its loss function and taken once per step.

    The loss function adds each term summed over the examples of its part
    (``parts.add(span=..., answerable=...)``, () arrays or floats); :class:`TrainLog` takes the
    sums after the step and divides by the step's examples. The arrays are read only after the
    backward pass (as the loss itself is), so the computation does not change.
    """

    def __init__(self):
        self._terms = {}

    def add(self, **terms):
        for name, value in terms.items():
            self._terms.setdefault(name, []).append(value)

    def take(self):
        """{name: float sum} of what was added since the last call."""
        sums = {name: sum(float(v) for v in values) for name, values in self._terms.items()}
        self._terms = {}
        return sums


class TrainLog:
    """What :func:`~jobs.engine.loop.train_steps` logs.

    Parameters
    ----------
    folder : str or None
        The run folder: rows go to ``<folder>/train_log.jsonl`` (None: printed only).
    every : int
        A row every N steps and after the last one (0: about :data:`ROWS_PER_RUN` rows).
    unit : str
        What a step's examples are called on the line (``features``, ``pairs``); the row's key
        is ``<unit>_per_second``.
    parts : LossParts, optional
        The job's loss terms, logged beside the loss under their names.

    Each row: ``step`` (steps done, 1-based, as checkpoints count), ``loss`` (mean per example
    over the steps since the previous row), each part likewise, ``lr``, ``grad_norm`` (of the
    row's step), ``<unit>_per_second`` (all workers' examples over the seconds spent in those
    steps), ``train_seconds`` (the whole run's, resumed calls summed) and ``seconds_left``
    (remaining steps at this call's mean wall time per step, end-of-epoch work included).

    Raises
    ------
    ValueError
        ``every`` negative.
    """

    def __init__(self, folder=None, every=0, unit='examples', parts=None):
        if not isinstance(every, int) or every < 0:
            checks.fail('log every must be an integer >= 0 (0: about {} rows)'.format(
                ROWS_PER_RUN), every=every)
        self.path = os.path.join(folder, TRAIN_LOG) if folder else None
        self.every, self.unit, self.parts = every, unit, parts
        self.chief, self.total, self.begin, self.opened = False, 0, 0, 0.0
        self._reset()

    def _reset(self):
        self.sums, self.examples, self.seen, self.step_seconds = {}, 0, 0, 0.0

    def open(self, begin, total, chief):
        """Called once before the first step of a call (``begin``: steps already done)."""
        self.chief, self.total, self.begin, self.opened = chief, total, begin, time.time()
        self.every = default_log_every(total, self.every)
        self._reset()
        if chief and self.path:
            kept = [row for row in read_train_log(self.path) if row.get('step', 0) <= begin]
            os.makedirs(os.path.dirname(self.path) or '.', exist_ok=True)
            with atomic_path(self.path) as tmp, open(tmp, 'w', encoding='utf-8') as handle:
                handle.writelines(json.dumps(row) + '\n' for row in kept)

    def record(self, result, seconds, step_seconds, global_examples):
        """After a step: add its :class:`~.loop.StepResult`; print and write a row when due.

        ``seconds``: the run's training seconds so far; ``step_seconds``: this step's;
        ``global_examples``: the step's examples over all workers.
        """
        parts = self.parts.take() if self.parts is not None else {}
        for name, value in dict(loss=result.loss_sum, **parts).items():
            self.sums[name] = self.sums.get(name, 0.0) + value
        self.examples += result.examples
        self.seen += global_examples
        self.step_seconds += step_seconds
        done = result.step + 1
        if not self.chief or (done % self.every and done != self.total):
            return
        row = {'step': done}
        row.update({name: value / max(1, self.examples) for name, value in self.sums.items()})
        per_step = (time.time() - self.opened) / max(1, done - self.begin)
        row.update({'lr': result.lr, 'grad_norm': result.grad_norm,
                    self.unit + '_per_second': round(self.seen / max(self.step_seconds, 1e-9), 2),
                    'train_seconds': seconds,
                    'seconds_left': round(per_step * (self.total - done), 1)})
        self._reset()
        self._emit(row, list(parts))

    def _emit(self, row, parts):
        shown = ', '.join('{} {:.4f}'.format(name, row[name]) for name in parts)
        tqdm.write('step {}/{}: loss {:.4f}{}, lr {:.2e}, {:.1f} {}/s, {} left'.format(
            row['step'], self.total, row['loss'], ' ({})'.format(shown) if shown else '',
            row['lr'], row[self.unit + '_per_second'], self.unit,
            _duration(row['seconds_left'])), file=sys.stdout)
        sys.stdout.flush()
        if self.path:
            with open(self.path, 'a', encoding='utf-8') as handle:
                handle.write(json.dumps(row) + '\n')


def _duration(seconds):
    minutes, seconds = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return '{}h{:02d}m'.format(hours, minutes) if hours else '{}m{:02d}s'.format(minutes, seconds)
