"""AdamW as a registered MXNet optimizer, for ``gluon.Trainer`` (``Trainer(params, 'adamw', ...)``).

Adam with decoupled weight decay (Loshchilov & Hutter 2019) and bias correction, one fused
update per parameter: float32 parameters on a CPU run the kernel library's threaded
``ga_adamw_update`` (:mod:`gluon_attention.core.fused_adamw`: MXNet's arithmetic to the bit, on
every thread instead of one), others MXNet's ``adamw_update`` operator. Per-parameter learning-rate and decay
multipliers are the Gluon ones (``Parameter.lr_mult``, ``Parameter.wd_mult``); biases and
LayerNorm ``gamma``/``beta`` are not decayed (a name pattern, :data:`NO_DECAY`).

The update of step t (1-based, counted per parameter), with ``g`` the gradient times
``rescale_grad`` (``1 / batch_size`` under ``Trainer.update(batch_size)``)::

    m = beta1 * m + (1 - beta1) * g
    v = beta2 * v + (1 - beta2) * g * g
    w -= lr * lr_mult * (sqrt(1 - beta2^t) / (1 - beta1^t) * m / (sqrt(v) + epsilon)
                         + wd * wd_mult * w)

``epsilon`` is added to the uncorrected ``sqrt(v)``, as in Kingma & Ba (2015, section 2) and
BERT's optimizer. The state of a parameter is ``(m, v)``, float32 ``mx.nd`` arrays shaped like
the weight; the step counts are MXNet's per-device counts (``Optimizer._index_update_count``).

Its state is saved and restored with the checkpoints
(:func:`~jobs.engine.checkpoints.trainer_state_dict`).
"""
import math
import re

import mxnet as mx
import numpy as onp

from gluon_attention import checks
from gluon_attention.core import fused_adamw

__all__ = ['AdamW', 'NO_DECAY']

#: Parameters whose name matches this pattern get no weight decay (biases, LayerNorm gamma/beta).
NO_DECAY = r'(bias|gamma|beta)$'


def _classic(array):
    """The ``mx.nd`` view of an ``mx.np`` array (shared memory); an ``mx.nd`` array as it is."""
    return array.as_nd_ndarray() if isinstance(array, mx.np.ndarray) else array


@mx.optimizer.register
class AdamW(mx.optimizer.Optimizer):
    """Adam with decoupled weight decay and bias correction (registered as ``'adamw'``).

    Parameters
    ----------
    learning_rate : float
        The peak rate; schedules call ``Trainer.set_learning_rate`` every step.
    beta1, beta2 : float in [0, 1)
        Decay rates of the first and second moment estimates.
    epsilon : float > 0
        Added to ``sqrt(v)`` (see the module docstring).
    no_decay : str or None
        Parameters whose name matches this regular expression (``re.search``) are not decayed;
        None decays every parameter. Default :data:`NO_DECAY`.
    **kwargs
        ``wd`` (decoupled decay, default 0), ``rescale_grad``, ``clip_gradient`` (element-wise,
        before the moments), ``multi_precision``, ``param_dict``: as for every MXNet optimizer.

    Raises
    ------
    ValueError
        A beta outside [0, 1), an epsilon that is not a finite number > 0, or a negative ``wd``.
    TypeError
        ``no_decay`` is neither a string nor None.

    Weights and gradients may be float32 ``mx.np`` or ``mx.nd`` arrays (float16 weights with
    ``multi_precision=True``). A non-finite or zero ``rescale_grad`` skips the update (the
    operator's rule).
    """

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-6,
                 no_decay=NO_DECAY, **kwargs):
        super().__init__(learning_rate=learning_rate, **kwargs)
        self.beta1 = checks.check_probability('beta1', beta1)
        self.beta2 = checks.check_probability('beta2', beta2)
        self.epsilon = checks.check_positive_real('epsilon', epsilon)
        if not self.wd >= 0:
            checks.fail('wd must be a number >= 0', wd=self.wd)
        if no_decay is not None and not isinstance(no_decay, str):
            checks.fail_type('no_decay must be a regular expression (str) or None',
                              no_decay=no_decay)
        self.no_decay = no_decay
        self._rescale = {}          # context -> (value, (1,) array holding it)

    def create_state(self, index, weight):
        weight = _classic(weight)
        return (mx.nd.zeros(weight.shape, ctx=weight.context, dtype='float32'),
                mx.nd.zeros(weight.shape, ctx=weight.context, dtype='float32'))

    def _name(self, index):
        if index in self.param_dict:
            return self.param_dict[index].name
        return self.idx2name.get(index, str(index))

    def _rescale_array(self, ctx):
        """``rescale_grad`` as the (1,) float32 array the operator takes, one per context."""
        value = float(self.rescale_grad)
        cached = self._rescale.get(ctx)
        if cached is None or cached[0] != value:
            cached = (value, mx.nd.full((1,), value, ctx=ctx, dtype='float32'))
            self._rescale[ctx] = cached
        return cached[1]

    def update(self, index, weight, grad, state):
        self._update_count(index)
        step = self._index_update_count[index]
        wd = self._get_wd(index)
        if self.no_decay is not None and re.search(self.no_decay, self._name(index)):
            wd = 0.0
        weight, grad = _classic(weight), _classic(grad)
        mean, var = state
        scalars = dict(lr=math.sqrt(1 - self.beta2 ** step) / (1 - self.beta1 ** step),
                       eta=self._get_lr(index), beta1=self.beta1, beta2=self.beta2,
                       epsilon=self.epsilon, wd=wd, clip_gradient=self.clip_gradient or -1.0)
        if _threaded(weight, grad):
            fused_adamw.adamw_update(weight, grad, mean, var, float(self.rescale_grad),
                                     **scalars)
        else:
            mx.nd.contrib.adamw_update(weight, grad, mean, var, out=weight,
                                       rescale_grad=self._rescale_array(weight.context),
                                       **scalars)


def _threaded(weight, grad):
    """Whether the library's threaded update (the same numbers as MXNet's adamw_update)
    serves these arrays: float32 on a CPU, the kernel library loadable."""
    return (weight.dtype == grad.dtype == onp.float32 and weight.context.device_type == 'cpu'
            and fused_adamw.available())
