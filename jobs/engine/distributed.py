"""Data-parallel training over MXNet's kvstore: several devices, processes or machines.

One engine for every layout: :class:`DataParallel` wraps ``gluon.Trainer`` with
``update_on_kvstore=False``. The kvstore (``device`` or ``local`` inside a process, ``dist_sync``
or ``dist_device_sync`` across processes, over ps-lite) only sums gradients; every worker clips
the summed gradient by its global norm and runs the same optimizer update on its own copy of
the parameters and optimizer state, so all copies stay equal.

A step's batch is the *global* batch: every worker computes the same schedule from the seed and
takes its slice (:meth:`DataParallel.shard`), splits it into micro-batches (gradient
accumulation) and each micro-batch over its devices. Losses are summed over examples and the
update divides by the global batch size, so in exact arithmetic a run gives the same parameters
whatever the number of workers, devices and micro-batches; a checkpoint (written by rank 0)
resumes under any layout. The loop the jobs share runs on it
(:func:`~jobs.engine.loop.train_steps`).

Why no updates on the servers: a server runs its loop inside ``import mxnet``, before it could
import our optimizer (unpickling it fails, and the workers still exit 0 with the raw summed
gradient as weights); MXNet's ``Optimizer.__getstate__`` drops the per-parameter multipliers;
``Trainer.save_states`` refuses distributed state. ``dist_async`` needs updates on the servers
and is refused.
"""
import math
import warnings

import mxnet as mx
import numpy as onp
from mxnet import autograd, gluon

from gluon_attention import checks

from . import optim  # noqa: F401 (registers the 'adamw' optimizer)
from .checkpoints import load_trainer_state, trainer_state_dict
from .launch import create_kvstore

__all__ = ['DataParallel']


@mx.util.use_np
class DataParallel:
    """``gluon.Trainer`` over a kvstore with the jobs' step: sum, clip, update.

    Parameters
    ----------
    params : list of gluon.Parameter or ParameterDict
        Initialized on the devices to train on (``initialize(ctx=[...])``); those with
        ``grad_req='null'`` are left out. Their ``grad_req`` becomes ``'add'`` (micro-batches
        accumulate; :meth:`step` zeroes the gradients). ``lr_mult``/``wd_mult`` are honoured.
    kvstore : str
        One of :data:`~jobs.engine.launch.KVSTORES`
        (:func:`~jobs.engine.launch.create_kvstore`).
    optimizer : str or mx.optimizer.Optimizer
        Default ``'adamw'`` (:class:`~jobs.engine.optim.AdamW`).
    optimizer_params : dict, optional
        Passed to the optimizer, e.g. ``{'wd': 0.01}``. No ``lr_scheduler``: :meth:`step` sets
        each step's learning rate (a schedule is given to
        :func:`~jobs.engine.loop.train_steps` as ``schedule``).

    Raises
    ------
    ValueError
        As ``create_kvstore``, or a parameter whose shape is still unknown (deferred
        initialization: run one forward pass first), or no trainable parameter, or an
        ``lr_scheduler`` in ``optimizer_params`` or on ``optimizer`` (MXNet would accept it,
        then fail at the first :meth:`step`).

    Attributes
    ----------
    trainer : gluon.Trainer
    contexts : list of mx.Context
    rank, num_workers : int
        This worker's kvstore rank and the number of workers (0 and 1 without ``dist_*``).
    is_chief : bool
        ``rank == 0``: the worker that evaluates and writes files.
    """

    def __init__(self, params, kvstore='device', optimizer='adamw', optimizer_params=None):
        scheduler = (optimizer_params or {}).get('lr_scheduler') or getattr(
            optimizer, 'lr_scheduler', None)
        if scheduler is not None:
            checks.fail('expected no lr_scheduler (in optimizer_params or the optimizer): the '
                         'engine sets the learning rate of every step; give the schedule to '
                         'train_steps(schedule=...) as schedule(step, total_steps) -> rate',
                         lr_scheduler=scheduler)
        params = list(params.values()) if hasattr(params, 'values') else list(params)
        self.params = [p for p in params if p.grad_req != 'null']
        deferred = [p.name for p in self.params
                    if p._deferred_init]  # pylint: disable=protected-access
        if deferred or not self.params:
            checks.fail('expected trainable parameters of known shapes (run one forward pass '
                         'before building the engine)', deferred=deferred,
                         trainable=len(self.params))
        store = create_kvstore(kvstore)
        for param in self.params:
            param.grad_req = 'add'
        self.trainer = gluon.Trainer(self.params, optimizer, optimizer_params, kvstore=store,
                                     update_on_kvstore=False)
        # Join the kvstore now: rank 0's parameters reach every worker before the first forward.
        self.trainer._init_kvstore()  # pylint: disable=protected-access
        self.trainer._init_params()  # pylint: disable=protected-access
        self.contexts = list(self.trainer._contexts)  # pylint: disable=protected-access
        dist = isinstance(store, mx.kv.KVStore)
        self.rank, self.num_workers = (store.rank, store.num_workers) if dist else (0, 1)
        self.is_chief = self.rank == 0
        self._fed = set()
        self._zero_grads()

    def shard(self, batch):
        """This worker's contiguous slice of a global batch (a sequence of example indices).

        Slice sizes differ by at most one; a worker may get none of a batch smaller than the
        number of workers.
        """
        return onp.array_split(onp.asarray(batch), self.num_workers)[self.rank]

    def forward_backward(self, loss_fn, arrays):
        """Split ``arrays`` over the devices, record ``loss_fn`` on each part, backpropagate.

        Parameters
        ----------
        loss_fn : callable
            ``loss_fn(part)`` -> the loss *summed* over the part's examples, a () or (B,) array
            (``part`` maps the keys of ``arrays`` to ``mx.np`` arrays on one device).
        arrays : dict of str to numpy.ndarray
            This worker's examples along axis 0, the same number N >= 0 in every array; the
            first min(N, devices) devices get contiguous parts.

        Returns
        -------
        float
            The summed loss of these examples. Gradients add to those already accumulated.
        """
        sizes = {len(value) for value in arrays.values()}
        if len(sizes) != 1:
            checks.fail('expected the same number of examples in every array',
                         sizes={k: len(v) for k, v in arrays.items()})
        size = sizes.pop()
        if size == 0:
            return 0.0
        contexts = self.contexts[:size]
        loaded = {key: gluon.utils.split_and_load(
            mx.np.array(value, dtype=value.dtype, ctx=contexts[0]), contexts, even_split=False)
                  for key, value in arrays.items()}
        parts = [{key: loaded[key][i] for key in arrays} for i in range(len(contexts))]
        with autograd.record():
            losses = [loss_fn(part) for part in parts]
        autograd.backward(losses)
        self._fed.update(contexts)
        return sum(float(loss.sum()) for loss in losses)

    def step(self, batch_size, lr, max_grad_norm=None):
        """Sum the gradients over devices and workers, clip, update, zero the gradients.

        Parameters
        ----------
        batch_size : int
            Examples in the global batch (all workers): the update uses the summed gradient
            divided by it.
        lr : float
            Learning rate of this step (times each parameter's ``lr_mult``).
        max_grad_norm : float, optional
            Clip the mean gradient to this global L2 norm; 0 or None: no clipping.

        Returns
        -------
        float
            The global norm of the mean gradient before clipping. When it is not finite the
            update is skipped (every worker sees the same sum, so all skip) with a warning.
        """
        batch_size = checks.check_positive_int('batch_size', batch_size)
        for ctx in self.contexts:
            if ctx not in self._fed:    # no example here this step: zero gradients count
                for param in self.params:
                    param.data(ctx)._fresh_grad = True  # pylint: disable=protected-access
        self.trainer.allreduce_grads()
        grads = [p.grad(self.contexts[0]).as_nd_ndarray() for p in self.params]
        # after allreduce every device holds the same sum: the first one gives the norm
        squares = mx.nd.multi_sum_sq(*grads, num_arrays=len(grads))
        summed_norm = float(mx.nd.sqrt(squares.sum()).asscalar())
        norm = summed_norm / batch_size
        if math.isfinite(norm):
            # gluon.utils.clip_global_norm's factor, applied by the update's gradient rescaling
            # (rescale_grad = factor / batch_size) instead of a pass over every gradient
            limit = max_grad_norm * batch_size if max_grad_norm else math.inf
            factor = min(1.0, limit / (summed_norm + 1e-8))
            self.trainer.set_learning_rate(lr)
            self.trainer.update(batch_size / factor)
        else:
            warnings.warn('gradient norm is {}: update skipped'.format(norm))
        self._zero_grads()
        return norm

    def _zero_grads(self):
        grads = [grad.as_nd_ndarray() for param in self.params for grad in param.list_grad()]
        mx.nd.reset_arrays(*grads, num_arrays=len(grads))   # one operator for all of them
        self._fed.clear()

    def state_dict(self):
        """The optimizer state as NumPy arrays (:func:`~.checkpoints.trainer_state_dict`); the
        same on every worker, so rank 0 saves it for all."""
        return trainer_state_dict(self.trainer)

    def load_state_dict(self, state):
        """Load a :meth:`state_dict`, also one saved under another layout of workers and
        devices (:func:`~.checkpoints.load_trainer_state`)."""
        load_trainer_state(self.trainer, state)
