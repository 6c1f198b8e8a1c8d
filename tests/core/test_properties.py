"""Property tests (hypothesis) with generated shapes (including 1), layouts, dtypes and masks.

Examples per test: ``GA_HYPOTHESIS_EXAMPLES`` (default 15); e.g. ``GA_HYPOTHESIS_EXAMPLES=200
make test`` for a longer search. The profile is registered here, not in conftest.py.

Properties: rows of the weights sum to 1, or to 0 when fully masked; masked weights are exactly 0;
NaN written into padded keys/values never reaches an output; the causal receptive field, seen
through gradients; every layout equal to NKT on outputs and gradients; hybridized equal to
imperative; the same for the blocks and the decomposable-attention alignment.
"""
import os

import mxnet as mx
import numpy as onp
from hypothesis import HealthCheck, given, settings, strategies as st
from mxnet import autograd, np

import gluon_attention as ga
from gluon_attention.core import cells
from gluon_attention.core import functional as fn
from gluon_attention.core import softmax as sm
from gluon_attention.models.nli import Attend

EXAMPLES = int(os.environ.get('GA_HYPOTHESIS_EXAMPLES', '15'))
settings.register_profile('gluon_attention_properties', max_examples=EXAMPLES, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow,
                                                 HealthCheck.data_too_large])
PROFILE = settings.get_profile('gluon_attention_properties')
TOL = dict(rtol=1e-5, atol=1e-6)
F16_TOL = dict(rtol=1e-2, atol=1e-2)

dims = st.integers(1, 5)
seeds = st.integers(0, 2 ** 31 - 1)
LAYOUT_SHAPES = {'NKT': lambda b, k, t, c: (b, k, t, c), 'NTK': lambda b, k, t, c: (b, t, k, c),
                 'TNK': lambda b, k, t, c: (t, b, k, c)}
TO_NKT = {'NKT': (0, 1, 2, 3), 'NTK': (0, 2, 1, 3), 'TNK': (1, 2, 0, 3)}


def _f(x, dtype='float32'):
    return np.array(onp.asarray(x), dtype=dtype)


def _check_rows(weights, keep, axis=-1):
    """Masked entries exactly 0; each row sums to 1 when anything is kept, else to 0."""
    weights = weights.astype('float64')
    keep = onp.broadcast_to(keep, weights.shape)
    assert onp.all(weights[~keep] == 0)
    sums = weights.sum(axis=axis)
    expected = keep.any(axis=axis).astype('float64')
    onp.testing.assert_allclose(sums, expected, rtol=2e-3, atol=2e-3)


@st.composite
def masked_softmax_cases(draw):
    rank = draw(st.integers(1, 4))
    shape = tuple(draw(dims) for _ in range(rank))
    mask_shape = tuple(s if draw(st.booleans()) else 1 for s in shape)
    axis = draw(st.integers(-rank, rank - 1))
    dtype = draw(st.sampled_from(['float32', 'float16']))
    mask_dtype = draw(st.sampled_from(['bool', 'int32', 'float32']))
    temperature = draw(st.sampled_from([None, 0.5, 3.0]))
    return shape, mask_shape, axis, dtype, mask_dtype, temperature, draw(seeds)


@PROFILE
@given(masked_softmax_cases())
def test_masked_softmax_rows_and_masked_zeros(case):
    shape, mask_shape, axis, dtype, mask_dtype, temperature, seed = case
    rng = onp.random.RandomState(seed)
    scores = rng.normal(scale=5.0, size=shape)
    keep = rng.rand(*mask_shape) < 0.6
    weights = sm.masked_softmax(_f(scores, dtype), _f(keep, mask_dtype), axis, temperature)
    assert weights.shape == shape and weights.dtype == onp.dtype(dtype)
    out = weights.asnumpy()
    assert onp.all(onp.isfinite(out))
    _check_rows(out, keep, axis)
    log_w = sm.masked_log_softmax(_f(scores, dtype), _f(keep, mask_dtype), axis).asnumpy()
    full_keep = onp.broadcast_to(keep, shape)
    assert onp.all(log_w[~full_keep] == -onp.inf)
    if temperature is None:
        onp.testing.assert_allclose(onp.exp(log_w[full_keep].astype('float64')),
                                    out.astype('float64')[full_keep], **F16_TOL)


@PROFILE
@given(masked_softmax_cases())
def test_masked_softmax_hybridized_equals_imperative_with_gradients(case):
    shape, mask_shape, axis, _, mask_dtype, temperature, seed = case
    rng = onp.random.RandomState(seed)
    scores, keep = rng.normal(size=shape), rng.rand(*mask_shape) < 0.6
    coef = _f(rng.normal(size=shape))

    @mx.util.use_np
    class Softmax(mx.gluon.HybridBlock):
        def hybrid_forward(self, F, x, mask):
            return sm.masked_softmax(x, mask, axis, temperature)

    results = []
    for hybrid in (False, True):
        block = Softmax()
        if hybrid:
            block.hybridize()
        x = _f(scores)
        x.attach_grad()
        with autograd.record():
            w = block(x, _f(keep, mask_dtype))
            (w * coef).sum().backward()
        results.append((w.asnumpy(), x.grad.asnumpy()))
    for a, b in zip(*results):
        assert onp.all(onp.isfinite(a))
        onp.testing.assert_allclose(a, b, **TOL)
    grad = results[0][1]
    assert onp.all(grad[~onp.broadcast_to(keep, shape)] == 0)


@st.composite
def attention_cases(draw):
    b, k, lq, lm, ck, cv = (draw(dims) for _ in range(6))
    layout = draw(st.sampled_from(['NKT', 'NTK', 'TNK']))
    mask_kind = draw(st.sampled_from(['none', 'keys', 'full', 'causal']))
    return b, k, lq, lm, ck, cv, layout, mask_kind, draw(st.booleans()), draw(seeds)


def _mask(rng, b, lq, lm, kind):
    if kind == 'none':
        return None
    if kind == 'keys':
        length = rng.randint(0, lm + 1, size=b)
        return (onp.arange(lm)[None, None, :] < length[:, None, None])     # (B, 1, L_m)
    if kind == 'causal':
        return onp.broadcast_to(onp.tril(onp.ones((lq, lm), bool)), (b, lq, lm))
    return rng.rand(b, lq, lm) < 0.5


def _per_head(rng, layout, b, k, t, c):
    return rng.normal(size=LAYOUT_SHAPES[layout](b, k, t, c))


def _run_mhda(q, kk, v, mask, layout, use_einsum=False):
    arrays = [_f(x) for x in (q, kk, v)]
    for a in arrays:
        a.attach_grad()
    with autograd.record():
        context, (scores, weights) = fn.multi_head_dot_attn(
            *arrays, None if mask is None else _f(mask, 'bool'), layout=layout,
            use_einsum=use_einsum)
        shape = context.shape if layout != 'TNK' else (context.shape[1], context.shape[0],
                                                        context.shape[2])
        coef = np.cos(np.arange(context.size).reshape(shape) * 0.37)       # batch-major
        coef = coef.transpose(1, 0, 2) if layout == 'TNK' else coef
        (context * coef).sum().backward()
    return context.asnumpy(), scores.asnumpy(), weights.asnumpy(), [a.grad.asnumpy()
                                                                   for a in arrays]


@PROFILE
@given(attention_cases())
def test_multi_head_layouts_equal_nkt_and_rows_sum(case):
    """Every layout (and the einsum path) equals NKT on outputs and gradients; weight rows sum to
    1 or 0; masked weights 0."""
    b, k, lq, lm, ck, cv, layout, mask_kind, use_einsum, seed = case
    rng = onp.random.RandomState(seed)
    q, kk, v = (_per_head(rng, layout, b, k, t, c) for t, c in ((lq, ck), (lm, ck), (lm, cv)))
    mask = _mask(rng, b, lq, lm, mask_kind)
    context, scores, weights, grads = _run_mhda(q, kk, v, mask, layout, use_einsum)
    perm = TO_NKT[layout]
    ref = _run_mhda(*(x.transpose(perm) for x in (q, kk, v)), mask, 'NKT')
    expected_context = ref[0] if layout != 'TNK' else ref[0].transpose(1, 0, 2)
    onp.testing.assert_allclose(context, expected_context, **TOL)
    onp.testing.assert_allclose(scores, ref[1], **TOL)
    onp.testing.assert_allclose(weights, ref[2], **TOL)
    for g, g_ref in zip(grads, ref[3]):
        onp.testing.assert_allclose(g.transpose(perm), g_ref, rtol=1e-4, atol=1e-5)
    keep = onp.ones((b, 1, lq, lm), bool) if mask is None else onp.asarray(mask)[:, None]
    _check_rows(weights, keep)
    assert all(onp.all(onp.isfinite(g)) for g in grads)


@PROFILE
@given(attention_cases())
def test_multi_head_nan_in_unattended_memory_never_reaches_output(case):
    b, k, lq, lm, ck, cv, layout, _, use_einsum, seed = case
    rng = onp.random.RandomState(seed)
    q, kk, v = (_per_head(rng, layout, b, k, t, c) for t, c in ((lq, ck), (lm, ck), (lm, cv)))
    length = rng.randint(0, lm + 1, size=b)
    keep = onp.arange(lm)[None, None, :] < length[:, None, None]             # (B, 1, L_m)
    clean = _run_mhda(q, kk, v, keep, layout, use_einsum)[0]
    time_axis = {'NKT': 2, 'NTK': 1, 'TNK': 0}[layout]
    batch_axis = 1 if layout == 'TNK' else 0
    for x in (kk, v):
        for bi in range(b):
            index = [slice(None)] * 4
            index[batch_axis], index[time_axis] = bi, slice(length[bi], None)
            x[tuple(index)] = onp.nan
    dirty = _run_mhda(q, kk, v, keep, layout, use_einsum)[0]
    assert onp.all(onp.isfinite(dirty))
    onp.testing.assert_allclose(dirty, clean, **TOL)


@PROFILE
@given(st.integers(1, 3), st.integers(1, 3), st.integers(2, 7), st.integers(1, 4),
       st.sampled_from(['NKT', 'NTK', 'TNK']), seeds)
def test_causal_receptive_field_through_gradients(b, k, length, c, layout, seed):
    """With a causal mask (and padding), output position i has zero gradient with respect to
    keys and values at positions j > i, and to the queries of other positions."""
    rng = onp.random.RandomState(seed)
    valid = rng.randint(0, length + 1, size=b)
    data = np.zeros((b, length, 1))
    mask = ga.gen_self_attn_mask(data, _f(valid, 'int32'), attn_type='causal')
    q, kk, v = (_f(_per_head(rng, layout, b, k, length, c)) for _ in range(3))
    i = int(rng.randint(0, length))
    for x in (q, kk, v):
        x.attach_grad()
    with autograd.record():
        context, _ = fn.multi_head_dot_attn(q, kk, v, mask, layout=layout)
        row = context[i] if layout == 'TNK' else context[:, i]
        row.sum().backward()
    perm = TO_NKT[layout]
    gq, gk, gv = (x.grad.asnumpy().transpose(perm) for x in (q, kk, v))   # (B, K, T, C)
    assert onp.all(gk[:, :, i + 1:] == 0) and onp.all(gv[:, :, i + 1:] == 0)
    others = [t for t in range(length) if t != i]
    assert onp.all(gq[:, :, others] == 0)
    for bi in range(b):
        if i >= valid[bi]:                               # a padded query row sees nothing
            assert onp.all(gk[bi] == 0) and onp.all(gv[bi] == 0) and onp.all(gq[bi] == 0)


@st.composite
def block_cases(draw):
    b, lq, lm, c, cv = (draw(dims) for _ in range(5))
    name = draw(st.sampled_from(['dot', 'additive', 'multihead']))
    per_query = draw(st.booleans())
    return name, b, lq, lm, c, cv, per_query, draw(seeds)


def _block(name):
    block = {'dot': lambda: cells.DotProductAttention(),
             'additive': lambda: cells.AdditiveAttention(3),
             'multihead': lambda: cells.MultiHeadAttention(6, 2)}[name]()
    block.initialize(mx.init.Normal(0.5))
    return block


@PROFILE
@given(block_cases())
def test_blocks_padding_nan_and_hybrid_parity(case):
    """DPA/AA/MHA: NaN in padded keys/values changes nothing; weights rows sum 1 or 0 with
    padded positions 0; hybridized equals imperative."""
    name, b, lq, lm, c, cv, per_query, seed = case
    rng = onp.random.RandomState(seed)
    if name == 'multihead':
        cv = c
    q, kk, v = rng.normal(size=(b, lq, c)), rng.normal(size=(b, lm, c)), rng.normal(
        size=(b, lm, cv))
    valid = rng.randint(0, lm + 1, size=(b, lq) if per_query else b).astype('int32')
    if per_query and lm > 1 and valid.max() <= 1:
        valid[0, 0] = lm        # all 0/1 per-query lengths are refused as a padding mask
    block = _block(name)
    clean = [o.asnumpy() for o in block(_f(q), _f(kk), _f(v), _f(valid, 'int32'))]
    dirty_k, dirty_v = kk.copy(), v.copy()
    if not per_query:
        for bi in range(b):
            dirty_k[bi, valid[bi]:] = onp.nan
            dirty_v[bi, valid[bi]:] = onp.nan
    dirty = [o.asnumpy() for o in block(_f(q), _f(dirty_k), _f(dirty_v), _f(valid, 'int32'))]
    for a, c_ in zip(dirty, clean):
        assert onp.all(onp.isfinite(a))
        onp.testing.assert_allclose(a, c_, **TOL)
    weights = clean[1] if name != 'multihead' else clean[1].transpose(1, 0, 2, 3)
    lengths = valid if per_query else valid[:, None]
    keep = onp.arange(lm)[None, None, :] < lengths[..., None]
    _check_rows(weights, keep)
    block.hybridize()
    hybrid = [o.asnumpy() for o in block(_f(q), _f(kk), _f(v), _f(valid, 'int32'))]
    for a, c_ in zip(hybrid, clean):
        onp.testing.assert_allclose(a, c_, **TOL)


@PROFILE
@given(dims, st.integers(1, 6), st.integers(1, 6), dims, seeds)
def test_nli_alignment_padding_and_hybrid_parity(b, la, lb, c, seed):
    """Attend: premise and hypothesis of different lengths, each with its own valid length
    (0 allowed): NaN padding never reaches beta/alpha, rows at padded positions are zero, the
    alignment weights sum to 1 or 0; hybridized equals imperative."""
    rng = onp.random.RandomState(seed)
    A, B = rng.normal(size=(b, la, c)), rng.normal(size=(b, lb, c))
    vla, vlb = rng.randint(0, la + 1, size=b), rng.randint(0, lb + 1, size=b)
    block = Attend(4, dropout=0.0)
    block.initialize(mx.init.Normal(0.5))
    lengths = (_f(vla, 'int32'), _f(vlb, 'int32'))
    beta, alpha = (o.asnumpy() for o in block(_f(A), _f(B), *lengths))
    dirty_a, dirty_b = A.copy(), B.copy()
    for bi in range(b):
        dirty_a[bi, vla[bi]:], dirty_b[bi, vlb[bi]:] = onp.nan, onp.nan
    beta2, alpha2 = (o.asnumpy() for o in block(_f(dirty_a), _f(dirty_b), *lengths))
    onp.testing.assert_allclose(beta2, beta, **TOL)
    onp.testing.assert_allclose(alpha2, alpha, **TOL)
    for bi in range(b):
        assert onp.all(beta[bi, vla[bi]:] == 0) and onp.all(alpha[bi, vlb[bi]:] == 0)
        if vlb[bi] == 0:
            assert onp.all(beta[bi] == 0)
    keep = (onp.arange(la)[None, :, None] < vla[:, None, None]) & (
        onp.arange(lb)[None, None, :] < vlb[:, None, None])
    weights_b, weights_a = (w.asnumpy() for w in block._weights(
        mx.nd, _f(A), _f(B), *lengths))
    _check_rows(weights_b, keep, axis=2)
    _check_rows(weights_a, keep, axis=1)
    block.hybridize()
    for a, e in zip(block(_f(A), _f(B), *lengths), (beta, alpha)):
        onp.testing.assert_allclose(a.asnumpy(), e, **TOL)
