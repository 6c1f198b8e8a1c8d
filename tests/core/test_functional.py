"""Functional core against the float64 oracle: l2_normalize, dot_attn_score,
multi_head_dot_attn (every layout, both use_einsum settings), select_vectors_by_position.
"""
import itertools

import mxnet as mx
import numpy as onp
import pytest
from mxnet import np

import reference as ref
from conftest import hybridize_mode, sweep, tol
from gluon_attention.core import functional as fn

LAYOUTS = ('NKT', 'NTK', 'TNK')


def _rand(shape, dtype='float32', scale=1.0):
    return np.array(onp.random.normal(scale=scale, size=shape), dtype=dtype)


def _layout_shape(batch_size, heads, length, units, layout):
    return {'NKT': (batch_size, heads, length, units), 'NTK': (batch_size, length, heads, units),
            'TNK': (length, batch_size, heads, units)}[layout]


def _mask(batch_size, query_length, mem_length, shape=None):
    """Random 0/1 (B, L_q, L_m) mask with one fully masked query row and one full row."""
    mask = (onp.random.rand(batch_size, query_length, mem_length) > 0.3).astype('float32')
    mask[0, 0, :] = 0.0
    mask[-1, -1, :] = 1.0
    if shape is not None:
        mask = mask[tuple(slice(0, s) for s in shape)]
    return mask


# ----------------------------------------------------------------------------- oracle self-check
def test_oracle_gradients_match_finite_differences():
    """The analytic backward of the oracle agrees with float64 central differences."""
    rs = onp.random.RandomState(0)
    q, k, v = rs.normal(size=(1, 2, 3, 4)), rs.normal(size=(1, 2, 5, 4)), rs.normal(
        size=(1, 2, 5, 3))
    edge = rs.normal(size=(2, 3, 5))
    mask = (rs.rand(1, 3, 5) > 0.3).astype(float)
    mask[0, 0] = 0
    hc, hs, hw = rs.normal(size=(1, 3, 6)), rs.normal(size=(1, 2, 3, 5)), rs.normal(
        size=(1, 2, 3, 5))
    kwargs = dict(mask=mask, scaled=True, normalized=True, layout='NKT')

    def total(qq, kk, vv, ee):
        c, s, w = ref.multi_head_dot_attn(qq, kk, vv, edge_scores=ee, **kwargs)
        return onp.sum(c * hc) + onp.sum(s * hs) + onp.sum(w * hw)

    grads = ref.multi_head_dot_attn_vjp(q, k, v, hc, hs, hw, edge_scores=edge, **kwargs)
    numeric = [ref.numeric_grad(lambda x: total(x, k, v, edge), q, 1.0),
               ref.numeric_grad(lambda x: total(q, x, v, edge), k, 1.0),
               ref.numeric_grad(lambda x: total(q, k, x, edge), v, 1.0),
               ref.numeric_grad(lambda x: total(q, k, v, x), edge, 1.0)]
    for analytic, num in zip(grads, numeric):
        onp.testing.assert_allclose(analytic, num, rtol=1e-6, atol=1e-7)
    wq, wk, wv = rs.normal(size=(3, 4)), rs.normal(size=(3, 2)), rs.normal(size=(1, 3))
    qa, ka, va = rs.normal(size=(2, 3, 4)), rs.normal(size=(2, 5, 2)), rs.normal(size=(2, 5, 3))
    vl = onp.array([0, 3])
    head = rs.normal(size=(2, 3, 3))
    grads = ref.additive_attention_vjp(qa, ka, va, wq, wk, wv, head, vl)
    args = dict(query=qa, key=ka, value=va, w_q=wq, w_k=wk, w_v=wv)
    for name, value in args.items():
        def f(x, name=name):
            kw = dict(args, **{name: x})
            return ref.additive_attention(valid_length=vl, **kw)[0]
        onp.testing.assert_allclose(grads[name], ref.numeric_grad(f, value, head),
                                    rtol=1e-6, atol=1e-7)
    dq = ref.dot_product_attention_vjp(qa[..., :2], ka, va, head, valid_length=vl)
    num = ref.numeric_grad(lambda x: ref.dot_product_attention(x, ka, va, vl)[0], qa[..., :2],
                           head)
    onp.testing.assert_allclose(dq[0], num, rtol=1e-6, atol=1e-7)


# ----------------------------------------------------------------------------- l2 / scores
def test_l2_normalize_forward_backward():
    x = _rand((3, 5, 7))
    x.attach_grad()
    head = onp.random.normal(size=(3, 5, 7))
    with mx.autograd.record():
        out = fn.l2_normalize(x, axis=-1, eps=1e-6)
    out.backward(np.array(head, dtype='float32'))
    onp.testing.assert_allclose(out.asnumpy(), ref.l2_normalize(x), **tol())
    onp.testing.assert_allclose(x.grad.asnumpy(), ref.l2_normalize_vjp(x, head), **tol())


def test_l2_normalize_zero_vector_and_axis():
    x = onp.random.normal(size=(2, 3, 4)).astype('float32')
    x[0, :, 1] = 0.0
    out = fn.l2_normalize(np.array(x), axis=1, eps=1e-6).asnumpy()
    assert onp.isfinite(out).all()
    onp.testing.assert_allclose(out, ref.l2_normalize(x, axis=1), **tol())


SCORE_SHAPES = sweep([((2, 3), 5, 7, 11), ((1,), 1, 1, 1), ((2,), 5, 3, 7)],
                     [((2, 3), 5, 7, 11), ((1,), 1, 1, 1), ((2,), 5, 3, 7), ((3, 2, 5), 7, 1, 2),
                      ((7,), 3, 5, 13)])


@pytest.mark.parametrize('batch,lq,lm,units', SCORE_SHAPES)
@pytest.mark.parametrize('scaled,normalized', list(itertools.product([True, False], repeat=2)))
def test_dot_attn_score_nt(batch, lq, lm, units, scaled, normalized):
    q, k = _rand(batch + (lq, units)), _rand(batch + (lm, units))
    _check_scores(q, k, scaled, normalized, 'NT')


@pytest.mark.parametrize('scaled,normalized', [(True, False), (True, True), (False, False)])
@pytest.mark.parametrize('batch,lq,lm,units', [(2, 5, 7, 3), (1, 1, 1, 1)])
def test_dot_attn_score_tn(batch, lq, lm, units, scaled, normalized):
    q, k = _rand((lq, batch, units)), _rand((lm, batch, units))
    _check_scores(q, k, scaled, normalized, 'TN')


def _check_scores(q, k, scaled, normalized, layout):
    q.attach_grad()
    k.attach_grad()
    expected = ref.dot_attn_score(q, k, scaled, normalized, layout=layout)
    head = onp.random.normal(size=expected.shape)
    with mx.autograd.record():
        out = fn.dot_attn_score(q, k, scaled=scaled, normalized=normalized, layout=layout)
    out.backward(np.array(head, dtype='float32'))
    onp.testing.assert_allclose(out.asnumpy(), expected, **tol())
    gq, gk = ref.dot_attn_score_vjp(q, k, head, scaled, normalized, layout=layout)
    onp.testing.assert_allclose(q.grad.asnumpy(), gq, **tol())
    onp.testing.assert_allclose(k.grad.asnumpy(), gk, **tol())


# ----------------------------------------------------------------------------- multi-head
def _mhda_inputs(b, k, lq, lm, ck, cv, layout, edge_shape=None, mask_shape=None, masked=True):
    q = _rand(_layout_shape(b, k, lq, ck, layout))
    key = _rand(_layout_shape(b, k, lm, ck, layout))
    v = _rand(_layout_shape(b, k, lm, cv, layout))
    mask = None
    if masked:
        mask = _mask(b, lq, lm)
        if mask_shape is not None:
            mask = mask[tuple(slice(0, s) for s in mask_shape)]
            mask[(0,) * mask.ndim] = 0.0
            mask.reshape(-1)[-1] = 1.0
    edge = None if edge_shape is None else onp.random.normal(size=edge_shape).astype('float32')
    return q, key, v, mask, edge


def _run_mhda(q, k, v, mask, edge, layout, use_einsum, heads, **kwargs):
    """Forward + backward with random head gradients on all three outputs; returns dict."""
    q, k, v = q.copy(), k.copy(), v.copy()
    for x in (q, k, v):
        x.attach_grad()
    e = None
    if edge is not None:
        e = np.array(edge)
        e.attach_grad()
    m = None if mask is None else np.array(mask, dtype=bool)
    with mx.autograd.record():
        ctx, (scores, weights) = fn.multi_head_dot_attn(q, k, v, m, e, layout=layout,
                                                        use_einsum=use_einsum, **kwargs)
    heads_ = [np.array(h, dtype='float32') for h in heads(ctx.shape, scores.shape)]
    mx.autograd.backward([ctx, scores, weights], heads_)
    return dict(ctx=ctx, scores=scores, weights=weights, gq=q.grad, gk=k.grad, gv=v.grad,
                ge=None if e is None else e.grad, heads=[h.asnumpy() for h in heads_])


def _random_heads(ctx_shape, score_shape):
    return (onp.random.normal(size=ctx_shape), onp.random.normal(size=score_shape),
            onp.random.normal(size=score_shape))


MHDA_SHAPES = sweep(
    [(2, 3, 5, 7, 11, 13), (1, 1, 1, 1, 1, 1), (3, 2, 1, 5, 7, 2)],
    [(2, 3, 5, 7, 11, 13), (1, 1, 1, 1, 1, 1), (3, 2, 1, 5, 7, 2), (5, 1, 3, 2, 13, 1),
     (2, 7, 11, 3, 5, 3), (1, 5, 13, 1, 2, 7)])


def _check_mhda(q, k, v, mask, edge, layout, use_einsum, **kwargs):
    got = _run_mhda(q, k, v, mask, edge, layout, use_einsum, _random_heads, **kwargs)
    hc, hs, hw = got['heads']
    ctx, scores, weights = ref.multi_head_dot_attn(q, k, v, mask, edge, layout=layout, **kwargs)
    onp.testing.assert_allclose(got['ctx'].asnumpy(), ctx, **tol())
    onp.testing.assert_allclose(got['scores'].asnumpy(), scores, **tol())
    onp.testing.assert_allclose(got['weights'].asnumpy(), weights, **tol())
    grads = ref.multi_head_dot_attn_vjp(q, k, v, hc, hs, hw, mask, edge, layout=layout, **kwargs)
    for name, expected in zip(('gq', 'gk', 'gv', 'ge'), grads):
        if expected is not None:
            onp.testing.assert_allclose(got[name].asnumpy(), expected, err_msg=name, **tol())
    if mask is not None:
        full = onp.broadcast_to(mask[:, None], weights.shape) == 0
        assert onp.all(got['weights'].asnumpy()[full] == 0)
    return got


@pytest.mark.parametrize('layout', LAYOUTS)
@pytest.mark.parametrize('use_einsum', [False, True])
@pytest.mark.parametrize('b,k,lq,lm,ck,cv', MHDA_SHAPES)
def test_multi_head_dot_attn_oracle(layout, use_einsum, b, k, lq, lm, ck, cv):
    """Masked (one fully masked row), with (K, L_q, L_m) edge scores, scaled."""
    q, key, v, mask, edge = _mhda_inputs(b, k, lq, lm, ck, cv, layout, edge_shape=(k, lq, lm))
    _check_mhda(q, key, v, mask, edge, layout, use_einsum)


OPTIONS = [dict(scaled=False), dict(scaled=True, normalized=True),
           dict(scaled=False, normalized=True, eps=1e-3), dict(scaled=True, query_head_units=7)]


@pytest.mark.parametrize('layout', LAYOUTS)
@pytest.mark.parametrize('use_einsum', [False, True])
@pytest.mark.parametrize('options', OPTIONS, ids=lambda o: '-'.join('{}={}'.format(*kv)
                                                                     for kv in o.items()))
def test_multi_head_dot_attn_options(layout, use_einsum, options):
    q, key, v, mask, edge = _mhda_inputs(2, 3, 5, 7, 4, 2, layout, edge_shape=(2, 3, 5, 7))
    _check_mhda(q, key, v, mask, edge, layout, use_einsum, **options)


@pytest.mark.parametrize('layout', LAYOUTS)
@pytest.mark.parametrize('edge_shape,mask_shape', [
    (None, None), ((5, 7), (2, 1, 7)), ((1, 3, 1, 7), (1, 5, 7)), ((2, 1, 5, 1), (2, 5, 1))])
def test_multi_head_dot_attn_broadcast_mask_and_edges(layout, edge_shape, mask_shape):
    q, key, v, mask, edge = _mhda_inputs(2, 3, 5, 7, 4, 6, layout, edge_shape, mask_shape)
    _check_mhda(q, key, v, mask, edge, layout, False)


@pytest.mark.parametrize('layout', LAYOUTS)
def test_multi_head_dot_attn_unmasked(layout):
    q, key, v, _, _ = _mhda_inputs(2, 3, 5, 7, 4, 6, layout, masked=False)
    _check_mhda(q, key, v, None, None, layout, True)


def test_multi_head_dot_attn_layouts_agree():
    b, k, lq, lm, ck, cv = 2, 3, 5, 7, 11, 13
    qn, kn, vn = (onp.random.normal(size=s) for s in [(b, k, lq, ck), (b, k, lm, ck),
                                                         (b, k, lm, cv)])
    mask = np.array(_mask(b, lq, lm), dtype=bool)
    outs = {}
    for layout in LAYOUTS:
        args = [np.array(ref.from_nkt(x, layout), dtype='float32') for x in (qn, kn, vn)]
        for use_einsum in (False, True):
            ctx, (scores, weights) = fn.multi_head_dot_attn(*args, mask, layout=layout,
                                                            use_einsum=use_einsum)
            ctx = ctx.asnumpy()
            outs[layout, use_einsum] = (ctx.transpose(1, 0, 2) if layout == 'TNK' else ctx,
                                        scores.asnumpy(), weights.asnumpy())
    base = outs['NKT', False]
    for key, value in outs.items():
        for a, b_ in zip(base, value):
            onp.testing.assert_allclose(a, b_, rtol=1e-6, atol=1e-6, err_msg=str(key))


VALID_LENGTHS = {'B': onp.array([7, 0]), 'B,Lq': onp.array([[7, 3, 0, 1, 5], [0, 0, 2, 7, 6]])}


def _run_with_lengths(q, key, v, mask, edge, valid_length, layout, use_einsum):
    """Our output with ``valid_length`` (int32) next to the oracle's with the equivalent mask."""
    lq, lm = (ref.to_nkt(x, layout).shape[2] for x in (q, key))
    equivalent = ref.key_mask_from_valid_length(valid_length, lq, lm)
    if mask is not None:
        equivalent = equivalent & (onp.asarray(mask) != 0)
    vl = np.array(valid_length, dtype='int32')
    got = _run_mhda(q, key, v, mask, edge, layout, use_einsum, _random_heads, valid_length=vl)
    return got, equivalent.astype('float32')


@pytest.mark.parametrize('layout', LAYOUTS)
@pytest.mark.parametrize('use_einsum', [False, True])
@pytest.mark.parametrize('lengths', sorted(VALID_LENGTHS))
@pytest.mark.parametrize('with_mask', [False, True])
def test_multi_head_dot_attn_valid_length_oracle(layout, use_einsum, lengths, with_mask):
    """The fused length softmax equals the masked oracle, forward and gradients, with zero
    lengths (fully masked rows), edge scores, and combined with a general mask."""
    q, key, v, mask, edge = _mhda_inputs(2, 3, 5, 7, 4, 6, layout, edge_shape=(3, 5, 7),
                                         masked=with_mask)
    got, equivalent = _run_with_lengths(q, key, v, mask, edge, VALID_LENGTHS[lengths], layout,
                                        use_einsum)
    hc, hs, hw = got['heads']
    expected = ref.multi_head_dot_attn(q, key, v, equivalent, edge, layout=layout)
    for name, exp in zip(('ctx', 'scores', 'weights'), expected):
        onp.testing.assert_allclose(got[name].asnumpy(), exp, err_msg=name, **tol())
    grads = ref.multi_head_dot_attn_vjp(q, key, v, hc, hs, hw, equivalent, edge, layout=layout)
    for name, exp in zip(('gq', 'gk', 'gv', 'ge'), grads):
        onp.testing.assert_allclose(got[name].asnumpy(), exp, err_msg=name, **tol())
    blocked = onp.broadcast_to(equivalent[:, None], expected[2].shape) == 0
    assert onp.all(got['weights'].asnumpy()[blocked] == 0)


@pytest.mark.parametrize('layout', LAYOUTS)
def test_multi_head_dot_attn_valid_length_nan_padding(layout):
    """NaN in keys and values past the lengths never reaches an output (as with a mask; the
    query gradient, a product with the keys, does see NaN keys on either path)."""
    q, key, v, _, _ = _mhda_inputs(2, 3, 5, 7, 4, 6, layout, masked=False)
    lengths = onp.array([4, 0])
    kn, vn = to_nkt_copy(key, layout), to_nkt_copy(v, layout)
    for i, length in enumerate(lengths):
        kn[i, :, length:] = onp.nan
        vn[i, :, length:] = onp.nan
    dirty_k = np.array(ref.from_nkt(kn, layout), dtype='float32')
    dirty_v = np.array(ref.from_nkt(vn, layout), dtype='float32')
    ctx, (_, weights) = fn.multi_head_dot_attn(q, dirty_k, dirty_v, layout=layout,
                                               valid_length=np.array(lengths))
    clean, _ = fn.multi_head_dot_attn(q, key, v, layout=layout, valid_length=np.array(lengths))
    assert onp.isfinite(weights.asnumpy()).all() and onp.isfinite(ctx.asnumpy()).all()
    onp.testing.assert_allclose(ctx.asnumpy(), clean.asnumpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize('valid_length, message', [
    (onp.array([1, 2, 3]), r'valid_length must have shape \(B,\) or \(B, L_q\) = \(2, 5\)'),
    (onp.array([[1, 2]] * 2), r'valid_length must have shape'),
    (onp.array([8, 1]), r'valid_length must lie in \[0, 7\]\. Received: valid_length=\[8, 1\]'),
    (onp.array([-1, 1]), r'valid_length must lie in \[0, 7\]'),
    (onp.array([1.5, 1]), r'valid_length must hold integers'),
])
def test_multi_head_dot_attn_valid_length_errors(valid_length, message):
    q, key, v, _, _ = _mhda_inputs(2, 3, 5, 7, 4, 6, 'NKT', masked=False)
    with pytest.raises(ValueError, match=message):
        fn.multi_head_dot_attn(q, key, v, valid_length=np.array(valid_length))


def test_multi_head_dot_attn_float64_with_valid_length():
    """float64 inputs with valid_length (the length softmax keeps its lengths in float32)."""
    q, key, v, _, _ = _mhda_inputs(2, 3, 5, 7, 4, 6, 'NKT', masked=False)
    q64, k64, v64 = (np.array(x.asnumpy(), dtype='float64') for x in (q, key, v))
    lengths = onp.array([7, 3])
    ctx, _ = fn.multi_head_dot_attn(q64, k64, v64, valid_length=np.array(lengths))
    expected = ref.multi_head_dot_attn(q64.asnumpy(), k64.asnumpy(), v64.asnumpy(),
                                       ref.key_mask_from_valid_length(lengths, 5, 7))[0]
    assert ctx.dtype == onp.float64
    onp.testing.assert_allclose(ctx.asnumpy(), expected, **tol('float64'))


def test_multi_head_dot_attn_scale_needs_positive_units():
    q = np.zeros((2, 3, 4, 0))
    with pytest.raises(ValueError, match=r'needs C_k > 0.*Received: query_head_units=0'):
        fn.multi_head_dot_attn(q, q, np.zeros((2, 3, 4, 5)))
    assert fn.multi_head_dot_attn(q, q, np.zeros((2, 3, 4, 5)), scaled=False)[0].shape == \
        (2, 4, 15)


@pytest.mark.parametrize('layout', LAYOUTS)
def test_multi_head_dot_attn_nan_padding_never_reaches_output(layout):
    """Keys and values at fully padded memory positions replaced by NaN: output unchanged."""
    b, k, lq, lm, ck, cv = 2, 3, 5, 7, 4, 6
    q, key, v, _, _ = _mhda_inputs(b, k, lq, lm, ck, cv, layout, masked=False)
    mem_vl = onp.array([4, 0])
    mask = ref.gen_mem_attn_mask(b, lm, mem_vl, lq)
    clean, _ = fn.multi_head_dot_attn(q, key, v, np.array(mask), layout=layout)
    kn, vn = to_nkt_copy(key, layout), to_nkt_copy(v, layout)
    for i, length in enumerate(mem_vl):
        kn[i, :, length:] = onp.nan
        vn[i, :, length:] = onp.nan
    dirty, (_, weights) = fn.multi_head_dot_attn(
        q, np.array(ref.from_nkt(kn, layout), dtype='float32'),
        np.array(ref.from_nkt(vn, layout), dtype='float32'), np.array(mask), layout=layout)
    assert onp.isfinite(weights.asnumpy()).all()
    assert onp.isfinite(dirty.asnumpy()).all(), 'NaN in padded keys/values reached the output'
    onp.testing.assert_allclose(dirty.asnumpy(), clean.asnumpy(), rtol=1e-6, atol=1e-6)


def to_nkt_copy(x, layout):
    return ref.to_nkt(x, layout).copy()


def test_multi_head_dot_attn_causal_receptive_field():
    """With a causal mask, output i has zero gradient w.r.t. keys/values at positions > i."""
    b, k, length, c = 1, 2, 5, 3
    q, key, v = (_rand((b, k, length, c)) for _ in range(3))
    mask = np.array(ref.gen_self_attn_mask(b, length, attn_type='causal'))
    for i in range(length):
        key.attach_grad()
        v.attach_grad()
        with mx.autograd.record():
            ctx, _ = fn.multi_head_dot_attn(q, key, v, mask, layout='NKT')
            out = ctx[:, i].sum()
        out.backward()
        assert onp.all(key.grad.asnumpy()[:, :, i + 1:] == 0)
        assert onp.all(v.grad.asnumpy()[:, :, i + 1:] == 0)
        assert onp.any(v.grad.asnumpy()[:, :, :i + 1] != 0)


@pytest.mark.parametrize('layout', LAYOUTS)
def test_multi_head_dot_attn_float16_finite(layout):
    q, key, v, mask, edge = _mhda_inputs(2, 3, 5, 7, 4, 6, layout)
    args = [np.array(x, dtype='float16') for x in (q, key, v)]
    ctx, (scores, weights) = fn.multi_head_dot_attn(*args, np.array(mask, dtype=bool),
                                                    layout=layout)
    assert ctx.dtype == onp.float16 and weights.dtype == onp.float16
    assert onp.isfinite(ctx.asnumpy()).all() and onp.isfinite(weights.asnumpy()).all()
    expected = ref.multi_head_dot_attn(args[0], args[1], args[2], mask, layout=layout)
    onp.testing.assert_allclose(ctx.asnumpy(), expected[0], **tol('float16'))
    onp.testing.assert_allclose(weights.asnumpy(), expected[2], **tol('float16'))


def test_multi_head_dot_attn_dropout_only_in_training():
    q, key, v, mask, _ = _mhda_inputs(2, 3, 5, 7, 4, 6, 'NKT')
    m = np.array(mask, dtype=bool)
    base = fn.multi_head_dot_attn(q, key, v, m, dropout=0.0)[1][1].asnumpy()
    infer = fn.multi_head_dot_attn(q, key, v, m, dropout=0.5)[1][1].asnumpy()
    onp.testing.assert_allclose(base, infer, rtol=1e-6, atol=1e-6)
    with mx.autograd.record(train_mode=True):
        train = fn.multi_head_dot_attn(q, key, v, m, dropout=0.5)[1][1].asnumpy()
    kept = train != 0
    assert 0 < kept[base != 0].mean() < 1
    onp.testing.assert_allclose(train[kept], 2 * base[kept], rtol=1e-5, atol=1e-6)


@mx.util.use_np
class _MultiHead(mx.gluon.HybridBlock):
    def __init__(self, layout, use_einsum):
        super().__init__()
        self._layout, self._use_einsum = layout, use_einsum

    def hybrid_forward(self, F, q, k, v, mask, edge):
        return fn.multi_head_dot_attn(q, k, v, mask, edge, layout=self._layout,
                                      use_einsum=self._use_einsum)


@pytest.mark.parametrize('layout', LAYOUTS)
@pytest.mark.parametrize('use_einsum', [False, True])
def test_multi_head_dot_attn_hybridized_oracle(hybrid_mode, layout, use_einsum):
    """Inside hybrid_forward: the scale comes from the query's last axis (shape-free)."""
    q, key, v, mask, edge = _mhda_inputs(2, 3, 5, 7, 11, 13, layout, edge_shape=(3, 5, 7))
    block = hybridize_mode(_MultiHead(layout, use_einsum), hybrid_mode)
    for x in (q, key, v):
        x.attach_grad()
    with mx.autograd.record():
        ctx, (scores, weights) = block(q, key, v, np.array(mask, dtype=bool), np.array(edge))
    hc, hs, hw = _random_heads(ctx.shape, scores.shape)
    mx.autograd.backward([ctx, scores, weights], [np.array(h, dtype='float32')
                                                  for h in (hc, hs, hw)])
    expected = ref.multi_head_dot_attn(q, key, v, mask, edge, layout=layout)
    for got, exp in zip((ctx, scores, weights), expected):
        onp.testing.assert_allclose(got.asnumpy(), exp, **tol())
    grads = ref.multi_head_dot_attn_vjp(q, key, v, hc, hs, hw, mask, edge, layout=layout)
    for x, exp in zip((q, key, v), grads):
        onp.testing.assert_allclose(x.grad.asnumpy(), exp, **tol())


@mx.util.use_np
class _MultiHeadLengths(mx.gluon.HybridBlock):
    def __init__(self, layout):
        super().__init__()
        self._layout = layout

    def hybrid_forward(self, F, q, k, v, valid_length):
        return fn.multi_head_dot_attn(q, k, v, layout=self._layout, valid_length=valid_length)


@pytest.mark.parametrize('layout', LAYOUTS)
@pytest.mark.parametrize('lengths', sorted(VALID_LENGTHS))
def test_multi_head_dot_attn_valid_length_hybridized(hybrid_mode, layout, lengths):
    """In a graph (shape-free), lengths above L_m are clipped rather than read past the row."""
    q, key, v, _, _ = _mhda_inputs(2, 3, 5, 7, 4, 6, layout, masked=False)
    block = hybridize_mode(_MultiHeadLengths(layout), hybrid_mode)
    lengths = VALID_LENGTHS[lengths]
    equivalent = ref.key_mask_from_valid_length(lengths, 5, 7).astype('float32')
    expected = ref.multi_head_dot_attn(q, key, v, equivalent, None, layout=layout)
    ctx, (scores, weights) = block(q, key, v, np.array(lengths, dtype='int32'))
    for got, exp in zip((ctx, scores, weights), expected):
        onp.testing.assert_allclose(got.asnumpy(), exp, **tol())
    if hybrid_mode != 'imperative':
        too_long = np.array(onp.minimum(lengths, 7) + 50, dtype='int32')
        ctx, (_, weights) = block(q, key, v, too_long)
        full = ref.multi_head_dot_attn(q, key, v, None, None, layout=layout)
        onp.testing.assert_allclose(weights.asnumpy(), full[2], **tol())


# ----------------------------------------------------------------------------- gather
@mx.util.use_np
class _Select(mx.gluon.HybridBlock):
    def hybrid_forward(self, F, x, pos):
        return fn.select_vectors_by_position(x, pos)


@pytest.mark.parametrize('data_shape,num', [((2, 7, 3), 5), ((3, 5, 2, 3), 1), ((1, 1), 2)])
def test_select_vectors_by_position(hybrid_mode, data_shape, num):
    data = _rand(data_shape)
    positions = onp.random.randint(0, data_shape[1], size=(data_shape[0], num)).astype('int32')
    positions[0, 0] = data_shape[1] - 1
    head = onp.random.normal(size=(data_shape[0], num) + data_shape[2:])
    block = hybridize_mode(_Select(), hybrid_mode)
    data.attach_grad()
    with mx.autograd.record():
        out = block(data, np.array(positions, dtype='int32'))
    out.backward(np.array(head, dtype='float32'))
    onp.testing.assert_allclose(out.asnumpy(), ref.select_vectors_by_position(data, positions),
                                **tol())
    onp.testing.assert_allclose(
        data.grad.asnumpy(),
        ref.select_vectors_by_position_vjp(data_shape, positions, head), **tol())


def test_select_vectors_by_position_float_positions():
    data = _rand((2, 5, 3))
    positions = onp.array([[0, 4], [3, 3]])
    out = fn.select_vectors_by_position(data, np.array(positions, dtype='float32'))
    onp.testing.assert_allclose(out.asnumpy(), ref.select_vectors_by_position(data, positions))

