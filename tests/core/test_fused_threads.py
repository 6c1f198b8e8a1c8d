"""The fused operators' worker threads: the OpenMP thread pool of the calling thread (the
default) and threads started for each call (``GA_THREAD_POOL=std``) give the same numbers, bit
for bit, forward and backward, at several thread counts: the work is split the same way (row
chunks, (batch, head) groups), and the parameter gradients are summed in chunk order, not in
the order the threads finish. The float64 oracles of test_fused.py and test_fused_rowwise.py
check the numbers themselves (with OMP_NUM_THREADS=3 there, on the default pool)."""
import numpy as onp
import pytest

from gluon_attention.core import fused
from test_fused import make_inputs, run_fused
from test_fused_rowwise import inputs, run_gelu, run_layer_norm

pytestmark = pytest.mark.skipif(not fused.available(), reason='fused kernel library not built')


def both_pools(monkeypatch, threads, run):
    """``run()`` on the OpenMP thread pool and on started threads, ``threads`` workers each."""
    monkeypatch.setenv('OMP_NUM_THREADS', threads)
    monkeypatch.delenv('GA_THREAD_POOL', raising=False)
    pooled = run()
    monkeypatch.setenv('GA_THREAD_POOL', 'std')
    return pooled, run()


def assert_identical(pooled, started):
    for i, (a, b) in enumerate(zip(pooled, started)):
        assert a.shape == b.shape and onp.array_equal(a, b), 'output {}: max |diff| {}'.format(
            i, float(abs(a - b).max()))


@pytest.mark.parametrize('threads', ['2', '3'])
def test_rowwise_operators_same_on_both_pools(monkeypatch, threads):
    """200 rows of D=384: 4 chunks of 64 rows, so every worker has one."""
    x, res, gamma, beta, head = inputs(onp.random.RandomState(7), (4, 50), 384)
    pooled, started = both_pools(monkeypatch, threads, lambda: run_layer_norm(
        x, res, gamma, beta, head, 1e-12) + run_gelu(x * 4, gamma, head))
    assert_identical(pooled, started)
    assert onp.isfinite(pooled[0]).all() and abs(pooled[0]).max() > 0


@pytest.mark.parametrize('threads', ['2', '3'])
@pytest.mark.parametrize('layout', ['NKT', 'NTK'])
def test_fused_attention_same_on_both_pools(monkeypatch, threads, layout):
    """B=3, K=4: 12 (batch, head) groups over the workers, lengths per sequence."""
    rng = onp.random.RandomState(8)
    q, key, v = make_inputs(rng, layout, 3, 4, 9, 11, 8, 8)
    head = rng.normal(size=(3, 9, 32))
    lengths = onp.array([11, 4, 1])

    def run():
        ctx, grads = run_fused(q, key, v, lengths, layout, head)
        return [ctx] + grads
    assert_identical(*both_pools(monkeypatch, threads, run))
