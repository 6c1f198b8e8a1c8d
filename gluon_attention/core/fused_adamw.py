"""The AdamW update of a float32 parameter on all the CPU's threads, bit for bit MXNet's own.

MXNet 1.9.1's ``mx.nd.contrib.adamw_update`` runs on one thread, scalar code (about 11 ns per
entry on an Intel Xeon with AMX: some 120 ms per step for the 10.8 million trained entries of a
MiniLM SQuAD model, more than its bfloat16 products take). ``ga_adamw_update``, an operator of
the fused kernel library (:mod:`gluon_attention.core.fused`), computes the same float32
operations in the same order (vectorized and split over ``OMP_NUM_THREADS`` threads), so that
weight, mean and var come out exactly as MXNet's operator leaves them (Loshchilov & Hutter,
2019, decoupled weight decay; the formula is MXNet's, below). The one difference: MXNet's
operator also overwrites ``grad`` with the rescaled gradient; this one leaves it as it is.
"""
import math

import mxnet as mx
import numpy as onp

from .. import _checks
from . import fused_library as _fused

__all__ = ['ADAMW_OP', 'adamw_update']

ADAMW_OP = 'ga_adamw_update'


def _float32_cpu(**arrays):
    for name, x in arrays.items():
        if not isinstance(x, mx.nd.NDArray) or x.dtype != onp.float32 or \
                x.ctx.device_type != 'cpu':
            _checks.fail_type('{} must be a float32 mx.nd array on a CPU'.format(name),
                              **{name: '{} {} on {}'.format(type(x).__name__,
                                                            getattr(x, 'dtype', None),
                                                            getattr(x, 'ctx', None))})
    shapes = {name: x.shape for name, x in arrays.items()}
    if len(set(shapes.values())) != 1:
        _checks.fail('weight, grad, mean and var must have one shape', shapes=shapes)


def adamw_update(weight, grad, mean, var, rescale_grad, lr, eta, beta1=0.9, beta2=0.999,
                 epsilon=1e-8, wd=0.0, clip_gradient=-1.0):
    """Update ``weight``, ``mean`` and ``var`` in place as ``mx.nd.contrib.adamw_update(weight,
    grad, mean, var, rescale_grad, lr, eta, beta1, beta2, epsilon, wd, clip_gradient,
    out=weight)`` does, to the bit.

    With ``g = clip(grad * rescale_grad)`` (to [-clip_gradient, clip_gradient] when
    clip_gradient >= 0), in float32::

        mean = beta1 * mean + (1 - beta1) * g
        var = beta2 * var + (1 - beta2) * (g * g)
        weight = weight - eta * (lr * mean / (sqrt(var) + epsilon) + wd * weight)

    Parameters
    ----------
    weight, grad, mean, var : float32 mx.nd arrays on a CPU, one shape (any)
        ``grad`` is left unchanged.
    rescale_grad : float
        Rounded to float32 (as MXNet's operator reads it from a float32 array); 0 or not
        finite: nothing changes (MXNet's rule).
    lr, eta, beta1, beta2, epsilon, wd, clip_gradient : float
        As MXNet's operator takes them (``lr`` the bias correction, ``eta`` the learning rate
        in :class:`jobs.engine.optim.AdamW`).

    Returns
    -------
    weight : the updated array (the same object).

    Raises
    ------
    RuntimeError
        The kernel library is not built or not loadable (:func:`available` is False).
    TypeError, ValueError
        Arrays that are not float32 CPU ``mx.nd`` arrays of one shape.
    """
    if not available():
        raise RuntimeError(_fused.load_error())
    _float32_cpu(weight=weight, grad=grad, mean=mean, var=var)
    # rescale_grad as MXNet's operator reads it, from a float32 (1,) array; the other scalars
    # as the same decimal text MXNet's attributes get
    rescale_grad = float(onp.float32(rescale_grad))
    scalars = dict(rescale_grad=rescale_grad, lr=lr, eta=eta, beta1=beta1, beta2=beta2,
                   epsilon=epsilon, wd=wd, clip_gradient=clip_gradient)
    if not math.isfinite(rescale_grad):        # the operator's rule, without parsing 'nan'
        return weight
    getattr(mx.nd, ADAMW_OP)(weight, grad, mean, var, out=weight,
                             **{k: repr(float(v)) for k, v in scalars.items()})
    return weight


def available():
    """Whether ``ga_adamw_update`` runs here (the kernel library is built and loadable)."""
    return _fused.load()
