"""The training loop every job runs: :func:`train_steps` over a :class:`DataParallel` engine.

A run is a list of global batches fixed in advance (the same on every worker, from the seed);
step s reseeds ``mx.random`` from ``(seed, s x workers + rank)``, takes this worker's slice of
batch s, splits it into micro-batches, updates at the learning rate of the schedule, and the
chief saves checkpoints from which every worker resumes. A job that counts epochs names the
steps that end them (``epoch_ends``) and gets a hook there (``on_epoch_end``: validation, the
best epoch, what the checkpoint records); a checkpoint is saved at every epoch end.

:class:`~jobs.engine.distributed.DataParallel` is the engine;
:mod:`~jobs.engine.checkpoints` the checkpoints.
"""
import collections
import dataclasses
import sys
import time

import numpy as onp

from gluon_attention import checks

from .checkpoints import CheckpointManager
from .common import seed_step
from .train_log import TrainLog

__all__ = ['StepConfig', 'StepResult', 'TrainingInterrupted', 'exit_interrupted',
           'linear_warmup_decay', 'train_steps']


@dataclasses.dataclass
class StepConfig:
    """The options :func:`train_steps` reads (a job builds one from its own options).

    Attributes
    ----------
    seed : int
        Step s reseeds with ``seed_step(seed, s x num_workers + rank)``.
    lr, warmup_ratio : float
        The default schedule: :func:`linear_warmup_decay` from ``lr`` (unused when
        ``train_steps`` is given a ``schedule``).
    max_grad_norm : float
        Clip the mean gradient to this global L2 norm (0: no clipping).
    grad_accum_steps : int
        Micro-batches per worker and step.
    checkpoint_every : int
        Save every N steps (0: only after the last step and at epoch ends).
    keep_checkpoints : int
        How many of the newest checkpoints stay on disk (0: every one).
    """
    seed: int = 0
    lr: float = 1e-3
    warmup_ratio: float = 0.1
    max_grad_norm: float = 1.0
    grad_accum_steps: int = 1
    checkpoint_every: int = 0
    keep_checkpoints: int = 2


#: One finished step: index, this worker's mean loss, learning rate, gradient norm, examples
#: (this worker's), and the loss summed over those examples.
StepResult = collections.namedtuple('StepResult', 'step loss lr grad_norm examples loss_sum')


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C (KeyboardInterrupt) during :func:`train_steps`: where it stopped and what a rerun
    resumes from.

    Attributes
    ----------
    done, total : int
        Steps finished and steps of the run.
    checkpoint : int or None
        The step of the newest intact checkpoint, which a rerun resumes from (None: none).
    folder : str or None
        The checkpoint folder.
    """

    def __init__(self, done, total, checkpoint, folder):
        super().__init__(done, total, checkpoint, folder)
        self.done, self.total, self.checkpoint, self.folder = done, total, checkpoint, folder

    def message(self):
        """One line: the step it stopped at, the last checkpoint, how to resume."""
        if self.checkpoint is None:
            return ('stopped at step {} of {}, before the first checkpoint: rerun the same command '
                    'to start again'.format(self.done, self.total))
        return ('stopped at step {} of {}; the last checkpoint is step {} ({}): rerun the same '
                'command to resume from it'.format(self.done, self.total, self.checkpoint,
                                                    self.folder))


def exit_interrupted(prog, error, resumable):
    """Ctrl-C in a script: one line on stderr (where training stopped for a
    :class:`TrainingInterrupted`), no traceback, exit status 130 (as a shell reports SIGINT).
    ``resumable``: the command resumes from its checkpoints when rerun."""
    if isinstance(error, TrainingInterrupted):
        line = error.message()
    else:
        line = 'interrupted{}'.format(': rerun the same command to resume from its last '
                                      'checkpoint, if any' if resumable else '')
    print('{}: {}'.format(prog, line), file=sys.stderr, flush=True)
    raise SystemExit(130)


def linear_warmup_decay(step, total_steps, base_lr, warmup_ratio):
    """Learning rate at ``step`` (0-based): linear warm-up from 0, then linear decay to 0."""
    warmup = max(1, int(total_steps * warmup_ratio))
    if step < warmup:
        return base_lr * (step + 1) / warmup
    return base_lr * max(0.0, (total_steps - step) / max(1, total_steps - warmup))


def _check_epoch_ends(epoch_ends, total):
    """{step count that ends an epoch: the epoch (1-based)}."""
    ends = [int(e) for e in epoch_ends]
    if any(b <= a for a, b in zip(ends, ends[1:])) or any(not 0 < e <= total for e in ends):
        checks.fail('epoch_ends must be increasing step counts in [1, {}]'.format(total),
                     epoch_ends=ends)
    return {end: epoch for epoch, end in enumerate(ends, 1)}


def _resume(manager, net, engine, total, epochs):
    """(first step, training seconds so far) of the newest intact checkpoint, restored."""
    entry = manager.latest() if manager else None
    if entry is None:
        return 0, 0.0
    manager.restore(entry, net, engine, engine.contexts)
    begin = entry['step']
    if engine.is_chief:
        after = ' (after epoch {})'.format(epochs[begin]) if begin in epochs else ''
        print('resuming from step {} of {}{}'.format(begin, total, after), flush=True)
    return begin, float(entry['meta'].get('train_seconds', 0.0))


def train_steps(net, engine, loss_fn, batches, load_batch, config, checkpoint_dir=None,
                meta=None, on_step=None, schedule=None, epoch_ends=(), on_epoch_end=None,
                log=None):
    """Run (or resume) the steps of ``batches`` with ``engine``; returns (first step, seconds).

    Parameters
    ----------
    net : gluon.Block
        The model whose parameters are checkpointed.
    engine : DataParallel
    loss_fn : callable
        As in :meth:`DataParallel.forward_backward`.
    batches : list of sequences of int
        The global batches of the whole run, the same on every worker.
    load_batch : callable
        ``load_batch(indices)`` -> dict of NumPy arrays for those examples (axis 0).
    config : StepConfig
    checkpoint_dir : str, optional
        Resume from the newest intact checkpoint there; rank 0 saves (every worker must read
        the same folder: a shared file system across machines).
    meta : dict, optional
        Stored with each checkpoint, plus ``train_seconds`` summed over resumed runs.
    on_step : callable, optional
        Called on every worker with a :class:`StepResult` after each step.
    schedule : callable, optional
        ``schedule(step, total_steps)`` -> learning rate; default :func:`linear_warmup_decay`
        from ``config.lr`` over ``config.warmup_ratio``.
    epoch_ends : sequence of int, optional
        Increasing step counts at which an epoch ends (the last one ``len(batches)``).
    on_epoch_end : callable, optional
        ``on_epoch_end(epoch, steps)`` (epoch 1-based, steps run so far) on every worker after
        the last step of an epoch, before the checkpoint saved there; a dict it returns
        updates ``meta`` from that checkpoint on.
    log : TrainLog, optional
        Fed after every step (after ``on_step``); the chief prints a line and writes a row of
        ``train_log.jsonl`` every ``log.every`` steps. None: a :class:`TrainLog` that prints
        about 20 lines and writes no file.

    Returns
    -------
    (int, float)
        The step this call started from (0, or the resumed checkpoint's), and the training
        seconds of the whole run.

    Raises
    ------
    TrainingInterrupted
        On Ctrl-C (KeyboardInterrupt) during the steps, naming the last checkpoint.
    TypeError
        ``config`` is not a :class:`StepConfig`.
    ValueError
        ``epoch_ends`` not increasing within ``[1, len(batches)]``.
    """
    if not isinstance(config, StepConfig):
        checks.fail_type('config must be a StepConfig', config=type(config).__name__)
    epochs = _check_epoch_ends(epoch_ends, len(batches))
    manager = CheckpointManager(checkpoint_dir, config.keep_checkpoints or None) \
        if checkpoint_dir else None
    begin, earlier = _resume(manager, net, engine, len(batches), epochs)
    schedule = schedule or (lambda s, n: linear_warmup_decay(s, n, config.lr, config.warmup_ratio))
    meta, started, seconds = dict(meta or {}), time.time(), earlier
    log = log if log is not None else TrainLog()
    log.open(begin, len(batches), engine.is_chief)
    done = begin
    try:
        for step in range(begin, len(batches)):
            step_started = time.time()
            seed_step(config.seed, step * engine.num_workers + engine.rank)
            shard, loss = engine.shard(batches[step]), 0.0
            for ids in onp.array_split(shard, config.grad_accum_steps):
                loss += engine.forward_backward(loss_fn, load_batch(ids)) if len(ids) else 0.0
            lr = schedule(step, len(batches))
            norm = engine.step(len(batches[step]), lr, config.max_grad_norm)
            done, seconds = step + 1, round(earlier + time.time() - started, 1)
            result = StepResult(step, loss / max(1, len(shard)), lr, norm, len(shard), loss)
            if on_step is not None:
                on_step(result)
            log.record(result, seconds, time.time() - step_started, len(batches[step]))
            if step + 1 in epochs and on_epoch_end is not None:
                meta.update(on_epoch_end(epochs[step + 1], step + 1) or {})
            every = config.checkpoint_every
            due = step + 1 == len(batches) or step + 1 in epochs or (
                every and (step + 1) % every == 0)
            if manager and engine.is_chief and due:
                manager.save(step + 1, net, engine, dict(meta, train_seconds=seconds))
    except KeyboardInterrupt:
        entry = manager.latest() if manager else None     # what a rerun resumes from
        raise TrainingInterrupted(done, len(batches), entry and entry['step'],
                                  checkpoint_dir) from None
    return begin, seconds
