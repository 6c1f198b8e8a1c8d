"""The registered AdamW optimizer: float64 oracle through gluon.Trainer, hyperparameter
checks."""
import math

import mxnet as mx
import numpy as onp
import pytest
from mxnet import autograd, gluon

from conftest import tol
from gluon_attention.core import fused_adamw
from jobs.engine import optim
from jobs.engine.optim import NO_DECAY, AdamW

BETAS, EPS = (0.9, 0.999), 1e-6


def _oracle_step(weight, mean, var, grad, t, lr, wd):
    """One float64 AdamW step (decoupled decay, bias correction, epsilon on sqrt(v))."""
    mean = BETAS[0] * mean + (1 - BETAS[0]) * grad
    var = BETAS[1] * var + (1 - BETAS[1]) * grad * grad
    alpha = math.sqrt(1 - BETAS[1] ** t) / (1 - BETAS[0] ** t)
    return weight - lr * (alpha * mean / (onp.sqrt(var) + EPS) + wd * weight), mean, var


def _small_net():
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(4, in_units=5), gluon.nn.LayerNorm(in_channels=4),
            gluon.nn.Dense(3, in_units=4))
    net.initialize(mx.init.Normal(0.5))
    return net


def test_adamw_is_registered_and_created_by_name():
    assert isinstance(mx.optimizer.create('adamw', learning_rate=0.1), AdamW)


@pytest.mark.parametrize('no_decay', [NO_DECAY, None])
def test_adamw_in_trainer_matches_float64_oracle(no_decay):
    """Three steps with changing lr, rescale 1/batch, lr_mult, wd_mult and no-decay names."""
    net = _small_net()
    params = list(net.collect_params().values())
    params[-2].lr_mult, params[0].wd_mult = 2.5, 0.5          # last weight, first weight
    trainer = gluon.Trainer(params, 'adamw', {'learning_rate': 0.1, 'wd': 0.2,
                                              'no_decay': no_decay})
    weights = [p.data().asnumpy().astype('float64') for p in params]
    moments = [(onp.zeros_like(w), onp.zeros_like(w)) for w in weights]
    rng = onp.random.RandomState(0)
    for t, lr in enumerate((0.05, 0.02, 0.01), 1):
        x = mx.np.array(rng.normal(size=(6, 5)).astype('float32'))
        with autograd.record():
            loss = (net(x) ** 2).sum()
        loss.backward()
        grads = [p.grad().asnumpy().astype('float64') / 6 for p in params]
        trainer.set_learning_rate(lr)
        trainer.step(6)
        for i, param in enumerate(params):
            decayed = no_decay is None or not param.name.endswith(('bias', 'gamma', 'beta'))
            wd = 0.2 * param.wd_mult if decayed else 0.0
            weights[i], *moments[i] = _oracle_step(weights[i], *moments[i], grads[i], t,
                                                   lr * param.lr_mult, wd)
    for param, expected in zip(params, weights):
        onp.testing.assert_allclose(param.data().asnumpy(), expected, **tol())


@pytest.mark.parametrize('kwargs, error, match', [
    ({'beta1': 1.0}, ValueError, 'beta1'),
    ({'beta2': -0.1}, ValueError, 'beta2'),
    ({'epsilon': 0.0}, ValueError, 'epsilon'),
    ({'wd': -0.01}, ValueError, 'wd'),
    ({'no_decay': 3}, TypeError, 'no_decay'),
])
def test_adamw_rejects_bad_hyperparameters(kwargs, error, match):
    with pytest.raises(error, match=match + r'.*Received: ' + match):
        AdamW(**kwargs)


@pytest.mark.skipif(not fused_adamw.available(), reason='fused kernel library not built')
def test_threaded_update_gives_mxnets_parameters_bit_for_bit(monkeypatch):
    """Five trainer steps (clipping, decay, lr_mult) with the library's threaded update and
    with MXNet's adamw_update leave the same float32 parameters and moments, bit for bit."""
    runs = []
    for threaded in (True, False):
        monkeypatch.setattr(optim, '_threaded', lambda w, g, on=threaded: on)
        net = _small_net()
        mx.random.seed(0)
        net.initialize(mx.init.Normal(0.5), force_reinit=True)
        params = list(net.collect_params().values())
        params[-2].lr_mult = 2.5
        trainer = gluon.Trainer(params, 'adamw', {'learning_rate': 0.1, 'wd': 0.2,
                                                  'clip_gradient': 0.3})
        rng = onp.random.RandomState(0)
        for lr in (0.05, 0.02, 0.01, 0.03, 0.004):
            with autograd.record():
                loss = (net(mx.np.array(rng.normal(size=(6, 5)).astype('float32'))) ** 2).sum()
            loss.backward()
            trainer.set_learning_rate(lr)
            trainer.step(6)
        states = trainer._updaters[0].states  # pylint: disable=protected-access
        runs.append([p.data().asnumpy() for p in params] +
                    [s.asnumpy() for i in sorted(states) for s in states[i]])
    for threaded, theirs in zip(*runs):
        onp.testing.assert_array_equal(threaded, theirs)
