"""Training utilities: the engine's clipped AdamW step against a float64 reference, the
schedule, contexts."""
import math

import mxnet as mx
import numpy as onp
import pytest
from mxnet import gluon

from gluon_attention.tasks.engine.common import parse_ctx
from gluon_attention.tasks.engine.distributed import DataParallel
from gluon_attention.tasks.engine.training import linear_warmup_decay


def _adamw_steps(weight, grads, lr, wd, betas=(0.9, 0.999), eps=1e-6):
    """float64 AdamW (decoupled decay, bias correction, epsilon on sqrt(v)) over ``grads``."""
    m = onp.zeros_like(weight)
    v = onp.zeros_like(weight)
    for t, g in enumerate(grads, 1):
        m = betas[0] * m + (1 - betas[0]) * g
        v = betas[1] * v + (1 - betas[1]) * g * g
        alpha = math.sqrt(1 - betas[1] ** t) / (1 - betas[0] ** t)
        weight = weight - lr * (alpha * m / (onp.sqrt(v) + eps) + wd * weight)
    return weight


@pytest.mark.parametrize('contexts', [[mx.cpu(0)], [mx.cpu(0), mx.cpu(1)]])
def test_engine_step_matches_float64_adamw_with_clipping_and_decay(contexts):
    """DataParallel.step: mean of the summed gradient, clipped to a global norm of 0.5 (it
    acts: the norms are > 0.5), AdamW with decay on the weight only, on every context."""
    net = gluon.nn.Dense(3, in_units=5)
    net.initialize(mx.init.Normal(1.0), ctx=contexts)
    weights = {'weight': net.weight.data(contexts[0]).asnumpy().astype('float64'),
               'bias': net.bias.data(contexts[0]).asnumpy().astype('float64')}
    engine = DataParallel(net.collect_params(), optimizer_params={'wd': 0.1})
    rng = onp.random.RandomState(0)
    seen = {'weight': [], 'bias': []}
    for _ in range(3):
        x = rng.normal(size=(4, 5)) * 3
        current = {n: p.data(contexts[0]).asnumpy().astype('float64')
                   for n, p in (('weight', net.weight), ('bias', net.bias))}
        y = x @ current['weight'].T + current['bias']          # loss: sum of y ** 2
        mean = {'weight': 2 * y.T @ x / 4, 'bias': 2 * y.sum(0) / 4}
        norm = math.sqrt(sum((g ** 2).sum() for g in mean.values()))
        assert norm > 0.5
        engine.forward_backward(lambda part: (net(part['x']) ** 2).sum(),
                                {'x': x.astype('float32')})
        assert engine.step(4, 0.01, max_grad_norm=0.5) == pytest.approx(norm, rel=1e-5)
        for n in seen:
            seen[n].append(mean[n] * 0.5 / norm)
    for name, param, wd in (('weight', net.weight, 0.1), ('bias', net.bias, 0.0)):
        expected = _adamw_steps(weights[name], seen[name], 0.01, wd)
        for ctx in contexts:        # every context holds the same updated weights
            onp.testing.assert_allclose(param.data(ctx).asnumpy(), expected, rtol=1e-5,
                                        atol=1e-6)


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
