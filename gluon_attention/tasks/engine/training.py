"""Training utilities shared by the jobs: the learning-rate schedule and checkpoints.

Everything a killed run needs to resume exactly is in a checkpoint: parameters, optimizer state
(:meth:`~gluon_attention.tasks.engine.distributed.DataParallel.state_dict`: moments and step
counts), the step counter and the script's configuration. ``mx.random`` has no state to save, so
scripts reseed it from ``(seed, step)`` at every step
(:func:`~gluon_attention.tasks.engine.common.seed_step`).
"""
import hashlib
import json
import os
import sys

import numpy as onp

from ... import _checks
from .common import atomic_write_json
from .launch import DMLC_VARIABLES, KVSTORES, create_kvstore

__all__ = ['linear_warmup_decay', 'check_kvstore', 'CheckpointManager', 'check_engine_state']


def linear_warmup_decay(step, total_steps, base_lr, warmup_ratio):
    """Learning rate at ``step`` (0-based): linear warm-up from 0, then linear decay to 0."""
    warmup = max(1, int(total_steps * warmup_ratio))
    if step < warmup:
        return base_lr * (step + 1) / warmup
    return base_lr * max(0.0, (total_steps - step) / max(1, total_steps - warmup))


def check_kvstore(kvstore):
    """Check ``--kvstore`` before a job reads its data; returns the number of workers.

    Returns
    -------
    int
        ``DMLC_NUM_WORKER`` under a ``dist_*`` kvstore (set by ``scripts/launch.py``), else 1.

    Raises
    ------
    ValueError
        As :func:`~gluon_attention.tasks.engine.launch.create_kvstore` for a local kvstore (an
        unknown type, a process launched as one of several workers); for a ``dist_*`` kvstore in a
        process that is not a worker of a launched job (a DMLC variable missing). A ``dist_*``
        kvstore is joined later, by the engine.
    """
    if kvstore not in KVSTORES or not kvstore.startswith('dist'):
        create_kvstore(kvstore)       # raises, or returns a local type's name (creates nothing)
        return 1
    missing = [name for name in DMLC_VARIABLES if not os.environ.get(name)]
    if missing or os.environ['DMLC_ROLE'] != 'worker':
        _checks.fail('--kvstore {} trains in the workers of a launched job: start it with '
                     'scripts/launch.py, or set the DMLC variables by hand (README, "More than '
                     'one device or machine")'.format(kvstore),
                     missing=missing, DMLC_ROLE=os.environ.get('DMLC_ROLE'))
    return int(os.environ['DMLC_NUM_WORKER'])


def _sha256(path):
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
        self.keep = _checks.check_positive_int('keep', keep, allow_none=True)
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
            files[kind] = {'file': os.path.basename(path), 'sha256': _sha256(path)}
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
                   _sha256(os.path.join(self.folder, i['file'])) == i['sha256']
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
        <gluon_attention.tasks.engine.distributed.DataParallel.state_dict>`'s arrays
        (``num_update``, ``count_<i>``, ``state_<i>_<j>``): an older version of the jobs wrote it
        with its own optimizer, and resuming would restart the moments from zero.
    """
    path = os.path.join(manager.folder, entry['files']['states']['file'])
    with onp.load(path) as state:
        names = sorted(state.files)
    foreign = [n for n in names if n != 'num_update' and not n.startswith(('count_', 'state_'))]
    if foreign or 'num_update' not in names:
        _checks.fail('{} holds a checkpoint whose optimizer state an older version wrote; it '
                     'cannot resume: use another --output-dir (or delete that folder) to start a '
                     'new run'.format(manager.folder), names=names[:4])
