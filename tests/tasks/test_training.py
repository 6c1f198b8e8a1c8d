"""Training utilities: AdamW against a float64 reference, schedule, contexts."""
import math

import mxnet as mx
import numpy as onp
import pytest
from mxnet import autograd, gluon

from gluon_attention.tasks.common import parse_ctx
from gluon_attention.tasks.training import AdamW, linear_warmup_decay


def _reference_adamw(weight, grads, lr, wd, scale, steps, betas=(0.9, 0.999), eps=1e-6):
    m = onp.zeros_like(weight)
    v = onp.zeros_like(weight)
    for t, g in enumerate(grads, 1):
        g = g * scale
        m = betas[0] * m + (1 - betas[0]) * g
        v = betas[1] * v + (1 - betas[1]) * g * g
        alpha = math.sqrt(1 - betas[1] ** t) / (1 - betas[0] ** t)
        weight = weight - lr * (alpha * m / (onp.sqrt(v) + eps) + wd * weight)
    return weight


@pytest.mark.parametrize('contexts', [[mx.cpu(0)], [mx.cpu(0), mx.cpu(1)]])
def test_adamw_matches_float64_reference_with_clipping_and_decay(contexts):
    net = gluon.nn.Dense(3, in_units=5)
    net.initialize(mx.init.Normal(1.0), ctx=contexts)
    start = {n: p.data(contexts[0]).asnumpy().astype('float64')
             for n, p in [('weight', net.weight), ('bias', net.bias)]}
    optimizer = AdamW(list(net.collect_params().values()), weight_decay=0.1)
    rng = onp.random.RandomState(0)
    seen = {'weight': [], 'bias': []}
    scales = []
    for _ in range(3):
        x = rng.normal(size=(4, 5)).astype('float32') * 3
        parts = onp.array_split(x, len(contexts))
        with autograd.record():
            losses = [(net(mx.np.array(p, ctx=c)) ** 2).sum() for p, c in zip(parts, contexts)]
        autograd.backward(losses)
        grads = {n: sum(p.grad(c).asnumpy() for c in contexts).astype('float64')
                 for n, p in [('weight', net.weight), ('bias', net.bias)]}
        norm = math.sqrt(sum((g ** 2).sum() for g in grads.values()))
        scales.append(min(1.0, 0.5 / (norm + 1e-6)))
        got_norm = optimizer.step(0.01, max_grad_norm=0.5)
        assert got_norm == pytest.approx(norm, rel=1e-5)
        for n in seen:
            seen[n].append(grads[n] * scales[-1])
    for name, param, wd in (('weight', net.weight, 0.1), ('bias', net.bias, 0.0)):
        expected = _reference_adamw(start[name], seen[name], 0.01, wd, 1.0, 3)
        for ctx in contexts:        # every context holds the same updated weights
            onp.testing.assert_allclose(param.data(ctx).asnumpy(), expected, rtol=1e-5,
                                        atol=1e-6)


def test_adamw_lr_mult_scales_each_parameters_step():
    """lr_mult multiplies one parameter's learning rate (and its decoupled decay) only."""
    net = gluon.nn.Dense(3, in_units=5)
    net.initialize(mx.init.Normal(1.0))
    start = {n: p.data().asnumpy().astype('float64') for n, p in
             (('weight', net.weight), ('bias', net.bias))}
    optimizer = AdamW([net.weight, net.bias], weight_decay=0.1, lr_mult=[3.0, 0.0])
    x = mx.np.array(onp.random.RandomState(1).normal(size=(4, 5)).astype('float32'))
    with autograd.record():
        loss = (net(x) ** 2).sum()
    loss.backward()
    grad = net.weight.grad().asnumpy().astype('float64')
    optimizer.step(0.01, max_grad_norm=0)
    expected = _reference_adamw(start['weight'], [grad], 0.03, 0.1, 1.0, 1)
    onp.testing.assert_allclose(net.weight.data().asnumpy(), expected, rtol=1e-5, atol=1e-6)
    onp.testing.assert_array_equal(net.bias.data().asnumpy(), start['bias'].astype('float32'))
    with pytest.raises(ValueError, match='one multiplier per parameter'):
        AdamW([net.weight], lr_mult=[1.0, 2.0])


def test_linear_warmup_then_decay_to_zero():
    lrs = [linear_warmup_decay(s, 20, 1.0, 0.1) for s in range(20)]
    assert lrs[0] == pytest.approx(0.5) and lrs[1] == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(lrs[1:], lrs[2:]))
    assert lrs[-1] == pytest.approx(1 / 18)


@pytest.mark.parametrize('text, expected', [
    ('cpu', [mx.cpu(0)]), ('gpu', [mx.gpu(0)]), ('gpu(1)', [mx.gpu(1)]), ('cpu(3)', [mx.cpu(3)]),
    ('cpu(0),cpu(1)', [mx.cpu(0), mx.cpu(1)]), (' gpu(0), gpu(1) ', [mx.gpu(0), mx.gpu(1)])])
def test_parse_ctx_accepts_the_one_grammar(text, expected):
    assert parse_ctx(text) == expected


@pytest.mark.parametrize('text', ['tpu', 'gpu0', 'cpu1', 'cpu(0', 'cpu0)', 'cpu()', '', 'cpu,',
                                  'gpu(-1)', 'cpu,cpu', 'cpu(0),cpu'])
def test_parse_ctx_rejects_every_other_form_naming_the_accepted_ones(text):
    with pytest.raises(ValueError, match=r"'cpu', 'gpu', 'cpu\(N\)', 'gpu\(N\)'") as info:
        parse_ctx(text)
    assert 'Received: ctx=' in str(info.value)
