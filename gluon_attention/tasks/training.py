"""Training utilities shared by the jobs: AdamW, schedules, clipping, checkpoints.

Everything a killed run needs to resume exactly is in a checkpoint: parameters, optimizer moments,
the step counter and the script's configuration. ``mx.random`` has no state to save, so scripts
reseed it from ``(seed, step)`` at every step (:func:`~gluon_attention.tasks.common.seed_step`).
"""
import hashlib
import json
import math
import os
import re
import sys

import mxnet as mx
import numpy as onp

from .. import _checks
from .common import atomic_write_json

__all__ = ['AdamW', 'linear_warmup_decay', 'split_batch', 'CheckpointManager']


def linear_warmup_decay(step, total_steps, base_lr, warmup_ratio):
    """Learning rate at ``step`` (0-based): linear warm-up from 0, then linear decay to 0."""
    warmup = max(1, int(total_steps * warmup_ratio))
    if step < warmup:
        return base_lr * (step + 1) / warmup
    return base_lr * max(0.0, (total_steps - step) / max(1, total_steps - warmup))


def split_batch(arrays, contexts):
    """Split a dict of NumPy arrays along axis 0 into one dict of mx.np arrays per context."""
    size = len(next(iter(arrays.values())))
    bounds = onp.linspace(0, size, len(contexts) + 1).astype(int)
    return [{k: mx.np.array(v[lo:hi], dtype=v.dtype, ctx=ctx) for k, v in arrays.items()}
            for ctx, lo, hi in zip(contexts, bounds[:-1], bounds[1:]) if hi > lo]


class AdamW:
    """Adam with decoupled weight decay (Loshchilov & Hutter 2019) over Gluon parameters.

    Parameters
    ----------
    params : list of gluon.Parameter
        Trainable parameters (``grad_req != 'null'``), possibly on several contexts.
    weight_decay : float
        Applied to every parameter except biases and LayerNorm gamma/beta.
    beta1, beta2, epsilon : float

    :meth:`step` reads the gradients summed over contexts, clips them to ``max_grad_norm`` and
    updates the parameters on every context. Moments live on the first context.
    """

    def __init__(self, params, weight_decay=0.01, beta1=0.9, beta2=0.999, epsilon=1e-6,
                 lr_mult=None):
        self.params = list(params)
        # per-parameter learning-rate multipliers (e.g. a faster randomly initialised head)
        self.lr_mult = [1.0] * len(self.params) if lr_mult is None else list(lr_mult)
        if len(self.lr_mult) != len(self.params):
            raise ValueError('lr_mult must give one multiplier per parameter: expected {}. '
                             'Received: {}'.format(len(self.params), len(self.lr_mult)))
        self.decay = [0.0 if re.search(r'(bias|gamma|beta)$', p.name) else weight_decay
                      for p in self.params]
        self.betas, self.epsilon, self.num_update = (beta1, beta2), epsilon, 0
        self.mean = [mx.np.zeros(p.shape, ctx=p.list_ctx()[0]) for p in self.params]
        self.var = [mx.np.zeros(p.shape, ctx=p.list_ctx()[0]) for p in self.params]

    def _summed_grads(self):
        grads = []
        for p in self.params:
            first, *rest = p.list_grad()
            if rest:
                first = first.copy()
                for other in rest:
                    first += other.as_in_ctx(first.ctx)
            grads.append(first)
        return grads

    def step(self, lr, max_grad_norm=1.0, scale=1.0):
        """One update with learning rate ``lr``; gradients are multiplied by ``scale`` first
        and clipped to a global norm of ``max_grad_norm`` (0 or None: no clipping).

        Uses MXNet's fused ``adamw_update`` kernel in place (one pass per parameter):
        ``w -= lr * (sqrt(1 - beta2^t) / (1 - beta1^t) * m / (sqrt(v) + eps) + wd * w)``.
        Returns the gradient norm before clipping (of the scaled gradients).
        """
        grads = self._summed_grads()
        squares = [(g.astype('float32') ** 2).sum() for g in grads]
        norm = scale * math.sqrt(float(mx.np.stack(squares).sum()))   # one synchronisation
        if max_grad_norm and norm > max_grad_norm:
            scale *= max_grad_norm / (norm + 1e-6)
        self.num_update += 1
        (beta1, beta2), t = self.betas, self.num_update
        alpha = math.sqrt(1 - beta2 ** t) / (1 - beta1 ** t)
        for p, g, m, v, wd, mult in zip(self.params, grads, self.mean, self.var, self.decay,
                                        self.lr_mult):
            weight = p.data(m.ctx).as_nd_ndarray()
            mx.nd.contrib.adamw_update(
                weight, g.as_nd_ndarray(), m.as_nd_ndarray(), v.as_nd_ndarray(),
                rescale_grad=mx.nd.array([scale], ctx=m.ctx), lr=alpha, eta=lr * mult,
                beta1=beta1,
                beta2=beta2, epsilon=self.epsilon, wd=wd, out=weight)
            if len(p.list_ctx()) > 1:
                p.set_data(p.data(m.ctx))
        return norm

    def state_dict(self):
        state = {'num_update': onp.array(self.num_update)}
        for i, (m, v) in enumerate(zip(self.mean, self.var)):
            state['mean_%d' % i], state['var_%d' % i] = m.asnumpy(), v.asnumpy()
        return state

    def load_state_dict(self, state):
        self.num_update = int(state['num_update'])
        for i, (m, v) in enumerate(zip(self.mean, self.var)):
            m[:] = mx.np.array(state['mean_%d' % i], ctx=m.ctx)
            v[:] = mx.np.array(state['var_%d' % i], ctx=v.ctx)


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
