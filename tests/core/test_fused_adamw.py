"""The threaded AdamW update (gluon_attention.core.fused_adamw) against MXNet's own
adamw_update, bit for bit (weight, mean, var), and against a float64 NumPy oracle of the
formula; the skip rule, clipping, several steps, threads, and the refusals."""
import math

import mxnet as mx
import numpy as onp
import pytest

from conftest import SEED
from gluon_attention.core import fused_adamw

pytestmark = pytest.mark.skipif(not fused_adamw.available(),
                                reason='fused kernel library not built')


def case(rng, shape):
    return [rng.normal(size=shape).astype('float32'),
            (rng.normal(size=shape) * 3).astype('float32'),
            (rng.normal(size=shape) * 0.1).astype('float32'),
            abs(rng.normal(size=shape) * 0.1).astype('float32')]


def both(arrays, steps, **scalars):
    """(MXNet's w, m, v; ours) after ``steps`` updates from the same arrays; MXNet's grad is
    restored before each step (its operator overwrites it with the rescaled gradient)."""
    theirs, ours = ([mx.nd.array(a) for a in arrays] for _ in range(2))
    for _ in range(steps):
        theirs[1] = mx.nd.array(arrays[1])
        mx.nd.contrib.adamw_update(*theirs, rescale_grad=mx.nd.full((1,), scalars[
            'rescale_grad']), out=theirs[0], **{k: v for k, v in scalars.items()
                                                 if k != 'rescale_grad'})
        fused_adamw.adamw_update(*ours, **scalars)
    return ([theirs[i].asnumpy() for i in (0, 2, 3)], [ours[i].asnumpy() for i in (0, 2, 3)],
            ours[1].asnumpy())


def random_scalars(rng, clip=-1.0):
    step = int(rng.randint(1, 5000))
    return dict(rescale_grad=float(1 / rng.uniform(1, 64)),     # as batch / clipping factor
                lr=math.sqrt(1 - 0.999 ** step) / (1 - 0.9 ** step),
                eta=float(rng.uniform(1e-6, 1e-3)), beta1=0.9, beta2=0.999, epsilon=1e-6,
                wd=float(rng.choice([0.0, 0.01])), clip_gradient=clip)


@pytest.mark.parametrize('shape', [(1,), (384,), (7, 5), (1536, 384), (3, 70001)])
def test_equals_mxnets_adamw_update_bit_for_bit(shape):
    rng = onp.random.RandomState(SEED)
    arrays = case(rng, shape)
    theirs, ours, grad = both(arrays, 3, **random_scalars(rng))
    for name, a, b in zip(('weight', 'mean', 'var'), theirs, ours):
        assert onp.array_equal(a, b), '{}: {} entries differ'.format(name, int((a != b).sum()))
    assert onp.array_equal(grad, arrays[1])          # the gradient is read only


def test_many_learning_rates_parse_as_mxnets():
    # every scalar reaches the operator as decimal text: the rounding to float32 must be
    # MXNet's for any value (bias corrections of steps 1-5000, rates, rescales)
    rng = onp.random.RandomState(SEED + 1)
    arrays = case(rng, (64,))
    for _ in range(40):
        theirs, ours, _ = both(arrays, 1, **random_scalars(rng, clip=float(rng.choice(
            [-1.0, 0.1, 2.0]))))
        for a, b in zip(theirs, ours):
            assert onp.array_equal(a, b)


def test_one_step_against_the_float64_formula():
    rng = onp.random.RandomState(SEED + 2)
    w, g, m, v = case(rng, (300,))
    s = dict(rescale_grad=0.25, lr=0.7, eta=1e-3, beta1=0.9, beta2=0.99, epsilon=1e-6, wd=0.1,
             clip_gradient=0.5)
    _, (w1, m1, v1), _ = both([w, g, m, v], 1, **s)
    gs = onp.clip(g.astype('float64') * 0.25, -0.5, 0.5)
    m64 = 0.9 * m + 0.1 * gs
    v64 = 0.99 * v + 0.01 * gs * gs
    w64 = w - 1e-3 * (0.7 * m64 / (onp.sqrt(v64) + 1e-6) + 0.1 * w)
    for got, want in ((m1, m64), (v1, v64), (w1, w64)):
        onp.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    assert abs(gs).max() == 0.5                      # the clipping was exercised


@pytest.mark.parametrize('rescale', [0.0, float('nan'), float('inf')])
def test_zero_or_non_finite_rescale_changes_nothing(rescale):
    arrays = case(onp.random.RandomState(SEED), (50,))
    ours = [mx.nd.array(a) for a in arrays]
    fused_adamw.adamw_update(*ours, rescale_grad=rescale, lr=1.0, eta=1e-3)
    for got, want in zip(ours, arrays):
        assert onp.array_equal(got.asnumpy(), want)


def test_bad_arrays_are_refused():
    w = mx.nd.zeros((3,))
    with pytest.raises(TypeError, match=r'grad must be a float32 mx.nd array on a CPU\. '
                                        r'Received: grad='):
        fused_adamw.adamw_update(w, mx.nd.zeros((3,), dtype='float16'), w, w, 1.0, 1.0, 1.0)
    with pytest.raises(ValueError, match=r'one shape\. Received: shapes='):
        fused_adamw.adamw_update(w, mx.nd.zeros((4,)), w, w, 1.0, 1.0, 1.0)
