"""Hybridized equals imperative (forward and backward, 1e-6) for masked_softmax along a middle
axis and for the multi-head cell in every layout."""
import mxnet as mx
import numpy as onp
import pytest
from mxnet import np

from block_utils import forward_backward, rand
from conftest import hybridize_mode
import gluon_attention as ga

SHAPES = {'NKT': (2, 3, 4, 5), 'NTK': (2, 4, 3, 5), 'TNK': (4, 2, 3, 5)}


@mx.util.use_np
class _SoftmaxAxis1(mx.gluon.HybridBlock):
    def hybrid_forward(self, F, score, mask):
        return ga.masked_softmax(score, mask, axis=1)


@pytest.mark.parametrize('mode', ['hybridize', 'static'])
def test_masked_softmax_axis_1_hybridized_equals_imperative(mode):
    score = rand(2, 4, 3)
    mask = np.array(onp.random.rand(2, 4, 3) > 0.3)
    head = np.array(onp.linspace(-1, 1, 24).reshape(2, 4, 3), dtype='float32')
    results = []
    for m in ('imperative', mode):
        x = score.copy()
        x.attach_grad()
        block = hybridize_mode(_SoftmaxAxis1(), m)
        with mx.autograd.record():
            out = block(x, mask)
        out.backward(head)
        results.append([out.asnumpy(), x.grad.asnumpy()])
    for a, b in zip(*results):
        onp.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize('mode', ['hybridize', 'static'])
@pytest.mark.parametrize('layout', sorted(SHAPES))
def test_multi_head_cell_hybridized_equals_imperative(layout, mode):
    q, k, v = rand(*SHAPES[layout]), rand(*SHAPES[layout]), rand(*SHAPES[layout])
    mask = np.array(onp.random.rand(2, 4, 4) > 0.3)
    results = []
    for m in ('imperative', mode):
        cell = hybridize_mode(ga.MultiHeadAttentionCell(15, 3, layout=layout), m)
        outs, grads = forward_backward(cell, q, k, v, mask)
        results.append(outs + grads)
    for a, b in zip(*results):
        onp.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6, err_msg=layout)
