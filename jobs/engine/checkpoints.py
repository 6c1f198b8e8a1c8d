"""Checkpoints: what a killed run needs to resume exactly, written atomically and verified.

A checkpoint holds the parameters, the optimizer state (:func:`trainer_state_dict`: moments and
step counts of a ``gluon.Trainer``, saved here because ``Trainer.save_states`` refuses a
distributed kvstore), the step counter and the job's metadata (its recipe: the options that
shape the trained model). ``mx.random`` has no state to save, so the jobs reseed it from
``(seed, step)`` at every step (:func:`~jobs.engine.common.seed_step`).
:func:`check_resume` is the one check, for every job, that a run may resume the checkpoints of
its output folder.
"""
import contextlib
import hashlib
import io
import json
import os
import sys

import numpy as onp

from gluon_attention import checks

from .common import atomic_write_json

__all__ = ['CheckpointManager', 'check_engine_state', 'check_resume', 'trainer_state_dict',
           'load_trainer_state', 'sha256_file']


def sha256_file(path):
    """The hex sha256 of a file's bytes (read in 1 MiB blocks)."""
    digest = hashlib.sha256()
    with open(path, 'rb') as f:
        for block in iter(lambda: f.read(1 << 20), b''):
            digest.update(block)
    return digest.hexdigest()


def _machine_load():
    """The load averages and core count now; {} where ``os.getloadavg`` is missing."""
    try:
        load = [round(value, 2) for value in os.getloadavg()]
    except (AttributeError, OSError):
        return {}
    return {'load_average': load, 'cpu_count': os.cpu_count()}


class CheckpointManager:
    """Atomic, verified checkpoints in ``folder``: parameters, optimizer state and metadata.

    Each checkpoint is ``ckpt-<step>.params`` and ``ckpt-<step>.states.npz``, listed with their
    sha256 in ``checkpoints.json`` (written last, atomically). :meth:`latest` returns the newest
    checkpoint whose files exist and match their hashes, so a file cut short on disk is skipped
    and the previous good checkpoint is used. The ``keep`` newest are kept (None: every one).
    Each entry's ``meta`` also records the machine's load when it was saved
    (``load_average``: ``os.getloadavg()``, 1, 5 and 15 minutes; ``cpu_count``).
    """

    def __init__(self, folder, keep=2):
        self.folder = folder
        self.keep = checks.check_positive_int('keep', keep, allow_none=True)
        os.makedirs(folder, exist_ok=True)
        self.index_path = os.path.join(folder, 'checkpoints.json')

    def _index(self):
        try:
            with open(self.index_path, encoding='utf-8') as f:
                return json.load(f)
        except (OSError, ValueError):
            return []

    def save(self, step, block, optimizer, meta):
        """Save ``block``'s parameters, ``optimizer``'s state and ``meta`` (a JSON dict)."""
        files = {}
        for kind, suffix in (('params', '.params'), ('states', '.states.npz')):
            path = os.path.join(self.folder, 'ckpt-{}{}'.format(step, suffix))
            tmp = path + '.tmp'
            if kind == 'params':
                block.save_parameters(tmp)
            else:
                with open(tmp, 'wb') as f:
                    onp.savez(f, **optimizer.state_dict())
            os.replace(tmp, path)
            files[kind] = {'file': os.path.basename(path), 'sha256': sha256_file(path)}
        index = [e for e in self._index() if e['step'] != step]
        index.append({'step': step, 'files': files, 'meta': dict(meta, **_machine_load())})
        index.sort(key=lambda e: e['step'])
        kept = index[-self.keep:] if self.keep else index
        for old in index[:len(index) - len(kept)]:
            for info in old['files'].values():
                try:
                    os.remove(os.path.join(self.folder, info['file']))
                except OSError:
                    pass
        atomic_write_json(self.index_path, kept)

    def _intact(self, entry):
        return all(os.path.exists(os.path.join(self.folder, i['file'])) and
                   sha256_file(os.path.join(self.folder, i['file'])) == i['sha256']
                   for i in entry['files'].values())

    def entries(self):
        """Every listed checkpoint entry whose files are intact, oldest first."""
        return [entry for entry in self._index() if self._intact(entry)]

    def latest(self):
        """The newest intact checkpoint entry (dict with step, files, meta) or None."""
        for entry in reversed(self._index()):
            if self._intact(entry):
                return entry
            print('checkpoint of step {} in {} is missing or fails its sha256 check; trying an '
                  'older one'.format(entry['step'], self.folder), file=sys.stderr)
        return None

    def restore(self, entry, block, optimizer, ctx):
        """Load the parameters and optimizer state of ``entry`` (from :meth:`latest`)."""
        block.load_parameters(os.path.join(self.folder, entry['files']['params']['file']),
                              ctx=ctx)
        with onp.load(os.path.join(self.folder, entry['files']['states']['file'])) as state:
            optimizer.load_state_dict(dict(state))


def check_engine_state(manager, entry):
    """Refuse a checkpoint whose optimizer state the engine cannot load.

    Parameters
    ----------
    manager : CheckpointManager
    entry : dict
        A checkpoint of ``manager`` (from :meth:`CheckpointManager.latest`).

    Raises
    ------
    ValueError
        The states file holds anything but :meth:`DataParallel.state_dict
        <jobs.engine.distributed.DataParallel.state_dict>`'s arrays
        (``num_update``, ``count_<i>``, ``state_<i>_<j>``): an older version of the jobs wrote it
        with its own optimizer, and resuming would restart the moments from zero.
    """
    path = os.path.join(manager.folder, entry['files']['states']['file'])
    with onp.load(path) as state:
        names = sorted(state.files)
    foreign = [n for n in names if n != 'num_update' and not n.startswith(('count_', 'state_'))]
    if foreign or 'num_update' not in names:
        checks.fail('{} holds a checkpoint whose optimizer state an older version wrote; it '
                     'cannot resume: use another --output-dir (or delete that folder) to start a '
                     'new run'.format(manager.folder), names=names[:4])


def _flag(name):
    """How an option is named to the user: ``--flag-name`` for a field name, else as it is."""
    return '--' + name.replace('_', '-') if name.isidentifier() else name


def check_resume(folder, wanted, defaults=None, compared=None):
    """The newest intact checkpoint in ``folder`` if this run may resume it (None when there is
    none), after checking that it was written with the same recipe.

    Parameters
    ----------
    folder : str
        The checkpoint folder (``<output-dir>/checkpoints``); nothing is written.
    wanted : dict
        The recipe of this run, as compared: option name -> value (a field name is shown as its
        flag, another name as it is). Only these names are compared.
    defaults : dict, optional
        The default of each recipe option: an option that a checkpoint does not name did not
        exist yet when it was written, and that run had its default.
    compared : callable, optional
        ``compared(recipe, meta)`` -> a checkpoint's recipe (defaults filled in) in the terms
        of ``wanted``, given the checkpoint's ``meta``; default: the recipe as it is.

    Returns
    -------
    dict or None
        The entry (:meth:`CheckpointManager.latest`; a damaged newer checkpoint is reported by
        the training loop, not here).

    Raises
    ------
    ValueError
        Naming every option whose value differs there and now (``Received: options=[...]``), or
        a checkpoint that recorded no recipe; as :func:`check_engine_state`.
    """
    manager = CheckpointManager(folder) if os.path.isdir(folder) else None
    with contextlib.redirect_stderr(io.StringIO()):   # the loop reports a damaged checkpoint
        entry = manager.latest() if manager else None
    if entry is None:
        return None
    before = entry['meta'].get('recipe')
    if before is None:
        differ, names = 'options not recorded (an older version wrote them)', []
    else:
        before = dict(defaults or {}, **before)
        before = compared(before, entry['meta']) if compared else before
        names = sorted(k for k, v in wanted.items() if before.get(k) != v)
        differ = '; '.join('{}: {!r} there, {!r} now'.format(_flag(k), before.get(k), wanted[k])
                           for k in names)
    if differ:
        checks.fail('{} holds the checkpoints of a run with other options ({}); resume it with '
                     'those options, or use another --output-dir (or delete that folder) to '
                     'start a new run'.format(folder, differ), options=names)
    check_engine_state(manager, entry)
    return entry


def _leaves(state):
    """The arrays of an optimizer state (an array, None, or nested tuples/lists of them)."""
    if state is None:
        return []
    if isinstance(state, (tuple, list)):
        return [leaf for item in state for leaf in _leaves(item)]
    return [state]


def trainer_state_dict(trainer):
    """The optimizer state of ``trainer`` (its first device's copy) as NumPy arrays, for a
    ``gluon.Trainer`` with updates on the workers (any optimizer).

    Keys: ``num_update``, ``count_<i>`` (the updates of parameter i, what bias correction
    counts) and ``state_<i>_<j>`` (the j-th array of its state, e.g. AdamW's m and v), i
    indexing the trainer's parameters in order. For ``numpy.savez``.
    """
    # pylint: disable=protected-access
    optimizer, updater = trainer.optimizer, trainer._updaters[0]
    counts = optimizer._all_index_update_counts.get(trainer._contexts[0].device_id, {})
    state = {'num_update': onp.array(optimizer.num_update)}
    for index in sorted(updater.states):
        state['count_%d' % index] = onp.array(counts.get(index, 0))
        for j, leaf in enumerate(_leaves(updater.states[index])):
            state['state_%d_%d' % (index, j)] = leaf.asnumpy()
    return state


def load_trainer_state(trainer, state):
    """Load a :func:`trainer_state_dict` into every device's copy of ``trainer``'s state.

    The state of a parameter not updated yet is created first (the optimizer's
    ``create_state_multi_precision``), then overwritten.

    Raises
    ------
    ValueError
        A parameter index, array count or shape that does not fit this trainer's parameters
        and optimizer.
    """
    # pylint: disable=protected-access
    optimizer = trainer.optimizer
    counts = {int(k[len('count_'):]): int(v) for k, v in state.items() if k.startswith('count_')}
    for updater, ctx in zip(trainer._updaters, trainer._contexts):
        for index in counts:
            _load_param_state(trainer, updater, ctx, index, state)
        optimizer._all_index_update_counts[ctx.device_id] = dict(counts)
    optimizer._set_current_context(trainer._contexts[0].device_id)
    optimizer.num_update = int(state['num_update'])


def _load_param_state(trainer, updater, ctx, index, state):
    # pylint: disable=protected-access
    params, optimizer = trainer._params, trainer.optimizer
    if index >= len(params):
        checks.fail('expected an optimizer state for {} parameters'.format(len(params)),
                     index=index)
    if index not in updater.states:
        weight = params[index].data(ctx)
        if not getattr(optimizer, 'allow_np_array', False):
            weight = weight.as_nd_ndarray()
        updater.states[index] = optimizer.create_state_multi_precision(index, weight)
    updater.states_synced[index] = True
    leaves = _leaves(updater.states[index])
    saved = [state.get('state_%d_%d' % (index, j)) for j in range(len(leaves))]
    extra = 'state_%d_%d' % (index, len(leaves)) in state
    if extra or any(s is None or s.shape != l.shape for s, l in zip(saved, leaves)):
        checks.fail('the optimizer state does not fit parameter {} ({}, state shapes {})'.format(
            index, params[index].name, [l.shape for l in leaves]),
            saved=[None if s is None else s.shape for s in saved])
    for leaf, value in zip(leaves, saved):
        leaf[:] = value
