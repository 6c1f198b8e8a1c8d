"""Every backend through the one attention function, and every attention block's backend
choice, against the float64 NumPy oracle (tests/reference.py): forward and gradients, every
layout, imperative and hybridized alike. Sizes are distinct per dimension, so a wrong transpose
cannot pass."""
import mxnet as mx
import numpy as onp
import pytest
from mxnet import autograd, np

import reference as ref
from conftest import HYBRID_MODES, hybridize_mode, tol
import gluon_attention as ga
from gluon_attention.core import fused

needs_kernel = pytest.mark.skipif(not fused.available(), reason='the fused kernel is not built')
BACKENDS = ['composed', pytest.param('fused', marks=needs_kernel), 'chunked']
B, K, L_Q, L_M, C_K, C_V = 2, 3, 5, 7, 4, 6
_SHAPE = {'NKT': lambda l, c: (B, K, l, c), 'NTK': lambda l, c: (B, l, K, c),
          'TNK': lambda l, c: (l, B, K, c)}


def _per_head(rng, layout):
    return [rng.normal(size=_SHAPE[layout](l, c)).astype('float32')
            for l, c in ((L_Q, C_K), (L_M, C_K), (L_M, C_V))]


def _with_grads(fn, arrays, head):
    """(outputs of fn, gradients of <first output, head> for each array)."""
    inputs = [np.array(x) for x in arrays]
    for x in inputs:
        x.attach_grad()
    with autograd.record():
        out = fn(*inputs)
        first = out[0] if isinstance(out, (tuple, list)) else out
        loss = (first * np.array(head)).sum()
    loss.backward()
    return out, [x.grad.asnumpy() for x in inputs]


def _assert_matches(backend, got, want):
    """(context, weights, gradients) against the oracle's: the weights with 'composed', None
    with the backends that never hold them."""
    onp.testing.assert_allclose(got[0].asnumpy(), want[0], **tol())
    for grad, want_grad in zip(got[2], want[2]):
        onp.testing.assert_allclose(grad, want_grad, **tol())
    if backend == 'composed':
        onp.testing.assert_allclose(got[1].asnumpy(), want[1], **tol())
    else:
        assert got[1] is None


@pytest.mark.parametrize('key_padding', ['valid_length', 'mask'])
@pytest.mark.parametrize('layout', ['NKT', 'NTK', 'TNK'])
@pytest.mark.parametrize('backend', BACKENDS)
def test_attention_matches_the_oracle(backend, layout, key_padding):
    """attention(..., backend=b): the oracle's context and gradients; the weights with
    'composed', None with the others. Masks go to the backends that take them."""
    if backend == 'fused' and key_padding == 'mask':
        pytest.skip("'fused' takes key padding as lengths only (refusal: test_backends.py)")
    rng = onp.random.RandomState(11)
    q, k, v = _per_head(rng, layout)
    lengths = onp.array([[7, 1, 0, 4, 5], [2, 2, 3, 7, 6]], dtype='int32')   # (B, L_q)
    mask = ref.key_mask_from_valid_length(lengths, L_Q, L_M)                 # (B, L_q, L_m)
    given = ((None, np.array(lengths)) if key_padding == 'valid_length'
             else (np.array(mask), None))
    head = rng.normal(size=(L_Q, B, K * C_V) if layout == 'TNK' else (B, L_Q, K * C_V))
    (context, weights), grads = _with_grads(
        lambda *t: ga.attention(*t, given[0], None, given[1], layout=layout, chunk_size=2,
                                backend=backend), (q, k, v), head)
    want_context, _, want_weights = ref.multi_head_dot_attn(q, k, v, mask, layout=layout)
    want_grads = ref.multi_head_dot_attn_vjp(q, k, v, head, mask=mask, layout=layout)[:3]
    _assert_matches(backend, (context, weights, grads), (want_context, want_weights, want_grads))


def _dot_product(backend, mode):
    block = ga.DotProductAttention(kernels=ga.Kernels(backend))
    return hybridize_mode(block, mode)


@pytest.mark.parametrize('backend', BACKENDS)
def test_dot_product_attention_backends_match_the_oracle(backend):
    """DotProductAttention(kernels=Kernels(b)) in every mode: the oracle's context, weights
    ('composed'; None otherwise) and gradients; every mode gives the imperative result."""
    rng = onp.random.RandomState(12)
    q, k, v = (rng.normal(size=s).astype('float32')
               for s in ((B, L_Q, C_K), (B, L_M, C_K), (B, L_M, C_V)))
    lengths = onp.array([7, 3], dtype='int32')
    head = rng.normal(size=(B, L_Q, C_V))
    want_context, want_weights = ref.dot_product_attention(q, k, v, lengths)
    want_grads = ref.dot_product_attention_vjp(q, k, v, head, valid_length=lengths)
    results = []
    for mode in HYBRID_MODES:
        block = _dot_product(backend, mode)
        assert block.backend == backend
        (context, weights), grads = _with_grads(
            lambda *t, blk=block: blk(*t, np.array(lengths)), (q, k, v), head)
        _assert_matches(backend, (context, weights, grads), (want_context, want_weights,
                                                             want_grads))
        results.append([context.asnumpy()] + grads)
    for other in results[1:]:
        for got, want in zip(other, results[0]):
            onp.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize('backend', BACKENDS)
def test_multi_head_attention_backends_match_the_oracle(backend):
    """MultiHeadAttention(kernels=Kernels(b)): the projections around the oracle's multi-head
    attention, in every mode, with the 'composed' weights or None."""
    rng = onp.random.RandomState(13)
    units, c_q = K * C_K, 5
    x_q, x_m = (rng.normal(size=(B, l, c_q)).astype('float32') for l in (L_Q, L_M))
    lengths = onp.array([7, 3], dtype='int32')
    for mode in HYBRID_MODES:
        block = ga.MultiHeadAttention(units, K, kernels=ga.Kernels(backend))
        block.initialize(mx.init.Normal(0.5))
        block = hybridize_mode(block, mode)
        out = block(np.array(x_q), np.array(x_m), np.array(x_m), np.array(lengths))
        output, weights = out
        w = {name.split('_', 1)[1]: p.data().asnumpy().astype('float64')
             for name, p in block.collect_params().items()}
        heads = [(x @ w[n + '_weight'].T).reshape(B, -1, K, C_K)
                 for x, n in ((x_q, 'query'), (x_m, 'key'), (x_m, 'value'))]
        mask = ref.key_mask_from_valid_length(lengths, L_Q, L_M)
        context, _, want_weights = ref.multi_head_dot_attn(*heads, mask, layout='NTK')
        onp.testing.assert_allclose(output.asnumpy(), context @ w['out_weight'].T, **tol())
        if backend == 'composed':
            onp.testing.assert_allclose(weights.asnumpy(), want_weights, **tol())
        else:
            assert weights is None


@pytest.mark.parametrize('backend', BACKENDS)
def test_multi_head_attention_cell_gradients_match_the_oracle(backend):
    """MultiHeadAttentionCell(kernels=Kernels(b)): the oracle's gradients, every mode."""
    rng = onp.random.RandomState(14)
    q, k, v = _per_head(rng, 'NTK')
    lengths = onp.array([6, 2], dtype='int32')
    head = rng.normal(size=(B, L_Q, K * C_V))
    mask = ref.key_mask_from_valid_length(lengths, L_Q, L_M)
    want = ref.multi_head_dot_attn_vjp(q, k, v, head, mask=mask, layout='NTK')[:3]
    for mode in HYBRID_MODES:
        cell = hybridize_mode(ga.MultiHeadAttentionCell(kernels=ga.Kernels(backend),
                                                        chunk_size=2), mode)
        _, grads = _with_grads(lambda *t, c=cell: c(*t, None, None, np.array(lengths)),
                               (q, k, v), head)
        for got, exp in zip(grads, want):
            onp.testing.assert_allclose(got, exp, **tol())
