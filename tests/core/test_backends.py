"""The attention backends (gluon_attention.core.backends): one signature and one return
structure, chosen when a block is built; a call a backend cannot serve raises ValueError naming
the alternative; a block's result depends on its arguments only, never on the calls before."""
import mxnet as mx
import numpy as onp
import pytest
from mxnet import np
from mxnet.gluon import HybridBlock

import reference as ref
from conftest import hybridize_mode, tol
from gluon_attention import Kernels, MultiHeadAttentionCell, TransformerEncoder, attention
from gluon_attention.core import fused

needs_kernel = pytest.mark.skipif(not fused.available(), reason='the fused kernel is not built')
BACKENDS = ['composed', pytest.param('fused', marks=needs_kernel), 'chunked']


def _heads(rng, b, lq, lm, k=3, c=4, cv=2):
    """NTK query, key, value as float32 mx.np arrays."""
    return [np.array(rng.normal(size=shape), dtype='float32')
            for shape in ((b, lq, k, c), (b, lm, k, c), (b, lm, k, cv))]


def _calls(rng, backend, mode):
    """Three calls (query, key, value, mask, edge_scores, valid_length) of other shapes and
    kinds of key padding: (B,) lengths; another B, L_q, L_m with a mask (imperatively, not
    'fused'; else lengths: a hybridized MXNet block keeps the None pattern of its first call);
    (B, L_q) lengths."""
    first = _heads(rng, 2, 5, 7) + [None, None, np.array([7, 3], dtype='int32')]
    if mode == 'imperative' and backend != 'fused':
        second = _heads(rng, 3, 4, 6) + [np.array(rng.uniform(size=(3, 4, 6)) > 0.3), None, None]
    else:
        second = _heads(rng, 3, 4, 6) + [None, None, np.array([6, 0, 2], dtype='int32')]
    per_query = np.array(rng.randint(0, 8, size=(2, 5)), dtype='int32')
    third = _heads(rng, 2, 5, 8) + [None, None, per_query]
    return first, second, third


def _oracle(query, key, value, mask, valid_length):
    """(context, weights) of the float64 oracle; lengths as the equivalent key mask."""
    q, k, v = (x.asnumpy() for x in (query, key, value))
    if valid_length is not None:
        lengths = valid_length.asnumpy()
        mask = ref.key_mask_from_valid_length(lengths, q.shape[1], k.shape[1])
    elif mask is not None:
        mask = mask.asnumpy()
    context, _, weights = ref.multi_head_dot_attn(q, k, v, mask, layout='NTK')
    return context, weights


@pytest.mark.parametrize('mode', ['imperative', 'static'])
@pytest.mark.parametrize('backend', BACKENDS)
def test_cell_result_depends_on_its_arguments_only(backend, mode):
    """One cell called with (B,) lengths, then other shapes (with a mask where it can), then
    (B, L_q) lengths, then the first arguments again: each call matches the float64 oracle, the
    last gives the first result bit for bit, and every call returns (context, weights or
    None)."""
    cell = hybridize_mode(MultiHeadAttentionCell(12, 3, kernels=Kernels(backend), chunk_size=2), mode)
    assert cell.backend == backend
    calls = _calls(onp.random.RandomState(3), backend, mode)
    results = []
    for args in calls + (calls[0],):
        context, weights = cell(*args)
        want_context, want_weights = _oracle(*args[:4], args[5])
        onp.testing.assert_allclose(context.asnumpy(), want_context, **tol())
        if backend == 'composed':
            onp.testing.assert_allclose(weights.asnumpy(), want_weights, **tol())
        else:
            assert weights is None
        results.append(context.asnumpy())
    onp.testing.assert_array_equal(results[-1], results[0])


@pytest.mark.parametrize('backend', BACKENDS)
def test_backend_functions_share_one_signature_and_return_structure(backend):
    rng = onp.random.RandomState(4)
    query, key, value = _heads(rng, 2, 5, 7)
    lengths = np.array([[7, 1, 0, 4, 5], [2, 2, 3, 7, 6]], dtype='int32')
    context, weights = attention(query, key, value, None, None, lengths, layout='NTK',
                                 chunk_size=2, backend=backend)
    want_context, want_weights = _oracle(query, key, value, None, lengths)
    onp.testing.assert_allclose(context.asnumpy(), want_context, **tol())
    if backend == 'composed':
        onp.testing.assert_allclose(weights.asnumpy(), want_weights, **tol())
    else:
        assert weights is None


@mx.util.use_np
class _Parent(HybridBlock):
    def __init__(self, cell):
        super().__init__()
        self.cell = cell

    def hybrid_forward(self, F, query, key, value):  # pylint: disable=arguments-differ
        return self.cell(query, key, value)[0]


@needs_kernel
def test_calls_a_backend_cannot_serve_raise_naming_the_alternative():
    query, key, value = _heads(onp.random.RandomState(5), 2, 5, 7)
    mask, edges = np.ones((2, 5, 7)), np.zeros((2, 3, 5, 7))
    cases = [('fused', (mask,), "backend 'fused' cannot take a mask .*use backend='composed'"),
             ('fused', (None, edges), "backend 'fused' cannot take edge_scores: use "
                                      "backend='composed'"),
             ('chunked', (None, edges), "backend 'chunked' cannot take edge_scores: use "
                                        "backend='composed'")]
    for backend, extra, message in cases:
        cell = MultiHeadAttentionCell(12, 3, kernels=Kernels(backend))
        with pytest.raises(ValueError, match=message):
            cell(query, key, value, *extra)
        assert cell.backend == backend and cell(query, key, value)[1] is None   # unchanged
    with pytest.raises(ValueError, match="attention='chunked' has no attention dropout"):
        MultiHeadAttentionCell(kernels=Kernels('chunked'), attention_dropout=0.1)
    with pytest.raises(ValueError, match="backend 'fused' cannot take attention dropout"):
        attention(query, key, value, dropout=0.1, layout='NTK', backend='fused')
    parent = _Parent(MultiHeadAttentionCell(12, 3, kernels=Kernels('chunked')))
    parent.hybridize()
    with pytest.raises(ValueError, match="backend 'chunked' cannot take symbols.*use "
                                         "backend='composed' or 'fused' inside"):
        parent(query, key, value)


def test_auto_is_resolved_once_at_construction():
    fused_here = 'fused' if fused.available() else 'composed'
    assert Kernels().resolve(mx.cpu(), 0.0).attention == fused_here
    assert Kernels().resolve(mx.cpu(), 0.1).attention == 'composed'
    assert Kernels().resolve(mx.gpu(0), 0.0).attention == 'composed'
    assert MultiHeadAttentionCell().backend == 'composed'       # a cell returns its weights
    assert TransformerEncoder(1, 8, 12, 2, attention_dropout=0.0).kernels.attention == fused_here
    with pytest.raises(ValueError, match="attention must be one of 'auto', 'composed', 'fused', "
                                         "'chunked'. Received: attention='flash'"):
        Kernels(attention='flash')


@pytest.mark.parametrize('fused_flags', [(False, False), pytest.param((True, True),
                                                                      marks=needs_kernel)])
def test_encoder_result_depends_on_its_arguments_only(fused_flags):
    """An encoder called with lengths, then other shapes (and a mask where the composed
    attention takes one), then the first arguments: the first result again, imperatively and
    hybridized (same None pattern there)."""
    enc = TransformerEncoder(1, 8, 12, 2, dropout=0.0, attention_dropout=0.0,
                             kernels=Kernels(*('fused' if f else 'composed' for f in fused_flags)))
    assert (enc.fused_attention, enc.fused_rowwise) == fused_flags
    enc.initialize(mx.init.Normal(0.3))
    rng = onp.random.RandomState(6)
    first = (np.array(rng.normal(size=(2, 5, 8)), dtype='float32'), np.array([5, 2]))
    other = (np.array(rng.normal(size=(3, 4, 8)), dtype='float32'), np.array([4, 1, 3]))
    want = enc(*first).asnumpy()
    if not fused_flags[0]:
        enc(*other, np.array(rng.uniform(size=(3, 4, 4)) > 0.5))
    enc.hybridize(static_alloc=True)
    before = enc(*first).asnumpy()
    onp.testing.assert_allclose(before, want, rtol=1e-6, atol=1e-6)
    enc(*other)
    onp.testing.assert_array_equal(enc(*first).asnumpy(), before)
    if fused_flags[0]:
        with pytest.raises(ValueError, match="attention='fused', rowwise='fused' takes key "
                                             'padding as valid_length only, no mask: build it '
                                             r"with Kernels\(attention='composed'\)"):
            enc(*first, np.ones((2, 5, 5)))
