"""Blocks: AdditiveAttention, DotProductAttention, MultiHeadAttentionCell, MultiHeadAttention.

Oracle parity (forward and gradients) in every hybridize mode, imperative == hybridized,
export / SymbolBlock.imports round trip at a different batch size and length, properties.
"""

import mxnet as mx
import numpy as onp
import pytest
from mxnet import np

import reference as ref
from block_utils import export_and_import, flat
from conftest import HYBRID_TOL, hybridize_mode, tol
from gluon_attention.core import cells

LAYOUTS = ('NKT', 'NTK', 'TNK')


def _rand(shape, dtype='float32'):
    return np.array(onp.random.normal(size=shape), dtype=dtype)


def _int(values):
    return np.array(onp.asarray(values), dtype='int32')


def param_by_shape(block, shape):
    """The unique parameter of ``block`` with ``shape`` (robust to child names)."""
    found = [p for p in block.collect_params().values() if p.shape == shape]
    assert len(found) == 1, (shape, [p.shape for p in block.collect_params().values()])
    return found[0]


# ----------------------------------------------------------------------------- DPA
DPA_LENGTHS = [None, [7, 0], [[1, 7, 0, 3, 2], [0, 0, 4, 5, 6]]]


@pytest.mark.parametrize('valid_length', DPA_LENGTHS, ids=['none', 'B', 'B_Lq'])
@pytest.mark.parametrize('scaled', [True, False])
def test_dot_product_attention_oracle(hybrid_mode, valid_length, scaled):
    q, k, v = _rand((2, 5, 3)), _rand((2, 7, 3)), _rand((2, 7, 11))
    block = hybridize_mode(cells.DotProductAttention(scaled=scaled), hybrid_mode)
    assert len(list(block.collect_params().keys())) == 0
    for x in (q, k, v):
        x.attach_grad()
    args = (q, k, v) + (() if valid_length is None else (_int(valid_length),))
    head_c, head_w = onp.random.normal(size=(2, 5, 11)), onp.random.normal(size=(2, 5, 7))
    with mx.autograd.record():
        ctx, weights = block(*args)
    mx.autograd.backward([ctx, weights], [np.array(head_c, dtype='float32'),
                                          np.array(head_w, dtype='float32')])
    exp_ctx, exp_w = ref.dot_product_attention(q, k, v, valid_length, scaled)
    onp.testing.assert_allclose(ctx.asnumpy(), exp_ctx, **tol())
    onp.testing.assert_allclose(weights.asnumpy(), exp_w, **tol())
    grads = ref.dot_product_attention_vjp(q, k, v, head_c, head_w, valid_length, scaled)
    for x, expected in zip((q, k, v), grads):
        onp.testing.assert_allclose(x.grad.asnumpy(), expected, **tol())
    _check_rows(weights.asnumpy(), valid_length, 5, 7)


def _check_rows(weights, valid_length, lq, lm):
    """Rows sum to 1, or 0 when fully masked; masked weights exactly 0."""
    if valid_length is None:
        onp.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-6, atol=1e-6)
        return
    keep = ref.key_mask_from_valid_length(valid_length, lq, lm)
    if weights.ndim == 4:
        keep = onp.broadcast_to(keep[:, None], weights.shape)
    assert onp.all(weights[~keep] == 0)
    sums = weights.sum(-1)
    empty = ~keep.any(-1)
    assert empty.any(), 'each masked case must contain a fully masked row'
    assert onp.all(sums[empty] == 0)
    onp.testing.assert_allclose(sums[~empty], 1.0, rtol=1e-6, atol=1e-6)


# ----------------------------------------------------------------------------- AA
def _additive(units=5, query_size=3, key_size=2, dropout=0.0):
    block = cells.AdditiveAttention(units, dropout=dropout)
    block.initialize(mx.init.Normal(0.5))
    return block


def _additive_params(block, units, query_size, key_size):
    return dict(w_q=param_by_shape(block, (units, query_size)),
                w_k=param_by_shape(block, (units, key_size)), w_v=param_by_shape(block, (1, units)))


@pytest.mark.parametrize('valid_length', DPA_LENGTHS[:2] + [[[1, 7, 0], [0, 2, 4]]],
                         ids=['none', 'B', 'B_Lq'])
def test_additive_attention_oracle(hybrid_mode, valid_length):
    lq = 3 if valid_length is not None and onp.ndim(valid_length) == 2 else 5
    q, k, v = _rand((2, lq, 3)), _rand((2, 7, 2)), _rand((2, 7, 11))
    block = _additive()
    args = (q, k, v) + (() if valid_length is None else (_int(valid_length),))
    block(*args)                                           # deferred init
    hybridize_mode(block, hybrid_mode)
    params = _additive_params(block, 5, 3, 2)
    assert len(list(block.collect_params().keys())) == 3, 'AdditiveAttention has exactly W_q, W_k, w_v'
    for x in (q, k, v):
        x.attach_grad()
    head = onp.random.normal(size=(2, lq, 11))
    with mx.autograd.record():
        ctx, weights = block(*args)
    ctx.backward(np.array(head, dtype='float32'))
    values = {n: p.data() for n, p in params.items()}
    exp_ctx, exp_w = ref.additive_attention(q, k, v, valid_length=valid_length, **values)
    onp.testing.assert_allclose(ctx.asnumpy(), exp_ctx, **tol())
    onp.testing.assert_allclose(weights.asnumpy(), exp_w, **tol())
    grads = ref.additive_attention_vjp(q, k, v, grad_context=head, valid_length=valid_length,
                                       **values)
    for name, x in (('query', q), ('key', k), ('value', v)):
        onp.testing.assert_allclose(x.grad.asnumpy(), grads[name], err_msg=name, **tol())
    for name, p in params.items():
        onp.testing.assert_allclose(p.grad().asnumpy(), grads[name], err_msg=name, **tol())
    _check_rows(weights.asnumpy(), valid_length, lq, 7)


# ----------------------------------------------------------------------------- MHA cell
@pytest.mark.parametrize('layout', LAYOUTS)
@pytest.mark.parametrize('use_einsum', [False, True])
def test_multi_head_attention_cell_oracle(hybrid_mode, layout, use_einsum):
    b, k, lq, lm, ck, cv = 2, 3, 5, 7, 4, 2
    shapes = {'NKT': lambda t, c: (b, k, t, c), 'NTK': lambda t, c: (b, t, k, c),
              'TNK': lambda t, c: (t, b, k, c)}[layout]
    q, key, v = _rand(shapes(lq, ck)), _rand(shapes(lm, ck)), _rand(shapes(lm, cv))
    mask = (onp.random.rand(b, lq, lm) > 0.3).astype('float32')
    mask[1, 2] = 0.0
    edge = onp.random.normal(size=(b, k, lq, lm)).astype('float32')
    block = cells.MultiHeadAttentionCell(query_units=k * ck, num_heads=k, layout=layout,
                                         use_einsum=use_einsum)
    assert len(list(block.collect_params().keys())) == 0 and block.layout == layout
    hybridize_mode(block, hybrid_mode)
    for x in (q, key, v):
        x.attach_grad()
    e = np.array(edge)
    e.attach_grad()
    with mx.autograd.record():
        ctx, weights = block(q, key, v, np.array(mask, dtype=bool), e)
    heads = [onp.random.normal(size=a.shape) for a in (ctx, weights)]
    mx.autograd.backward([ctx, weights], [np.array(h, dtype='float32') for h in heads])
    expected = ref.multi_head_dot_attn(q, key, v, mask, edge, layout=layout)
    for got, exp in zip((ctx, weights), expected[::2]):
        onp.testing.assert_allclose(got.asnumpy(), exp, **tol())
    grads = ref.multi_head_dot_attn_vjp(q, key, v, heads[0], None, heads[1], mask=mask,
                                        edge_scores=edge, layout=layout)
    for x, exp in zip((q, key, v, e), grads):
        onp.testing.assert_allclose(x.grad.asnumpy(), exp, **tol())


def test_multi_head_attention_cell_options():
    """query_units sets the scale (query_head_units = query_units // num_heads)."""
    q, key, v = _rand((2, 3, 5, 4)), _rand((2, 3, 7, 4)), _rand((2, 3, 7, 2))
    for kwargs, ref_kwargs in [
            (dict(query_units=27, num_heads=3), dict(query_head_units=9)),
            (dict(scaled=False), dict(scaled=False)),
            (dict(normalized=True, eps=1e-3), dict(normalized=True, eps=1e-3))]:
        block = cells.MultiHeadAttentionCell(layout='NKT', **kwargs)
        ctx, weights = block(q, key, v)
        expected = ref.multi_head_dot_attn(q, key, v, layout='NKT', **ref_kwargs)
        for got, exp in zip((ctx, weights), expected[::2]):
            onp.testing.assert_allclose(got.asnumpy(), exp, err_msg=str(kwargs), **tol())


@pytest.mark.parametrize('lengths', [None, [7, 0], [[7, 3, 0, 1, 5], [0, 0, 2, 7, 6]]],
                         ids=['none', 'B', 'B_Lq'])
def test_multi_head_attention_cell_scale_follows_query_size(hybrid_mode, lengths):
    """Without query_units the scale is 1/sqrt(C_k) of each call's query, also when a
    hybridized cell (whose graph reads it from the query's shape) sees another C_k;
    valid_length is the key mask."""
    block = hybridize_mode(cells.MultiHeadAttentionCell(layout='NKT'), hybrid_mode)
    for ck in (4, 9, 4):
        q, key, v = _rand((2, 3, 5, ck)), _rand((2, 3, 7, ck)), _rand((2, 3, 7, 2))
        mask = None
        if lengths is not None:
            mask = ref.key_mask_from_valid_length(onp.array(lengths), 5, 7).astype('float32')
        ctx, weights = block(q, key, v, None, None, None if lengths is None else _int(lengths))
        expected = ref.multi_head_dot_attn(q, key, v, mask, layout='NKT')
        for got, exp in zip((ctx, weights), expected[::2]):
            onp.testing.assert_allclose(got.asnumpy(), exp, err_msg=str(ck), **tol())


# ----------------------------------------------------------------------------- MHA
def _mha(units=6, heads=3, use_bias=False, dropout=0.0):
    block = cells.MultiHeadAttention(units, heads, dropout=dropout, use_bias=use_bias)
    block.initialize(mx.init.Normal(0.5))
    return block


def _mha_params(block):
    out = {}
    for short, child in (('q', block.query_proj), ('k', block.key_proj), ('v', block.value_proj),
                         ('o', block.out_proj)):
        out[short + '_weight'] = child.weight.data().asnumpy()
        if child.bias is not None:
            out[short + '_bias'] = child.bias.data().asnumpy()
    return out


@pytest.mark.parametrize('use_bias', [False, True])
@pytest.mark.parametrize('valid_length', DPA_LENGTHS, ids=['none', 'B', 'B_Lq'])
def test_multi_head_attention_oracle(hybrid_mode, use_bias, valid_length):
    q, k, v = _rand((2, 5, 3)), _rand((2, 7, 2)), _rand((2, 7, 11))
    block = _mha(use_bias=use_bias)
    args = (q, k, v) + (() if valid_length is None else (_int(valid_length),))
    block(*args)
    hybridize_mode(block, hybrid_mode)
    for x in (q, k, v):
        x.attach_grad()
    with mx.autograd.record():
        out, weights = block(*args)
    out.backward()
    params = _mha_params(block)
    exp_out, exp_w = ref.multi_head_attention(q, k, v, 3, params, valid_length)
    assert out.shape == (2, 5, 6) and weights.shape == (2, 3, 5, 7)
    onp.testing.assert_allclose(out.asnumpy(), exp_out, **tol())
    onp.testing.assert_allclose(weights.asnumpy(), exp_w, **tol())
    _check_rows(weights.asnumpy(), valid_length, 5, 7)
    # gradients: the oracle of the unprojected path, through the projections by chain rule
    grads = _mha_grads(q, k, v, params, valid_length)
    for x, exp in zip((q, k, v), grads):
        onp.testing.assert_allclose(x.grad.asnumpy(), exp, **tol())


def _mha_grads(q, k, v, params, valid_length, heads=3):
    """Gradients of sum(out) w.r.t. q, k, v through projections (float64, analytic)."""
    def proj(x, name):
        return ref.dense(x, params[name + '_weight'], params.get(name + '_bias'))

    def split(x):
        b, t, u = x.shape
        return x.reshape(b, t, heads, u // heads)          # NTK

    qp, kp, vp = split(proj(q, 'q')), split(proj(k, 'k')), split(proj(v, 'v'))
    lq, lm = qp.shape[1], kp.shape[1]
    mask = None if valid_length is None else ref.key_mask_from_valid_length(valid_length, lq, lm)
    g_out = onp.ones((q.shape[0], lq, params['o_weight'].shape[0]))
    g_ctx = g_out @ params['o_weight']
    gq, gk, gv, _ = ref.multi_head_dot_attn_vjp(qp, kp, vp, g_ctx, mask=mask, layout='NTK')
    merge = [g.reshape(g.shape[0], g.shape[1], -1) for g in (gq, gk, gv)]
    return [merge[0] @ params['q_weight'], merge[1] @ params['k_weight'],
            merge[2] @ params['v_weight']]


# ----------------------------------------------------------------------------- hybrid parity
def _all_blocks():
    """(name, factory, args_fn(B, L_q, L_m)) for every block, with valid lengths."""
    def qkv_args(b, lq, lm):
        vl = onp.random.randint(0, lm + 1, size=b)
        vl[0] = 0
        return (_rand((b, lq, 3)), _rand((b, lm, 3)), _rand((b, lm, 5)), _int(vl))

    def cell_args(b, lq, lm):
        mask = (onp.random.rand(b, lq, lm) > 0.3)
        mask[0, 0] = False
        return (_rand((b, lq, 2, 3)), _rand((b, lm, 2, 3)), _rand((b, lm, 2, 5)),
                np.array(mask, dtype=bool), _rand((2, lq, lm)))

    return [('DotProductAttention', lambda: cells.DotProductAttention(), qkv_args),
            ('AdditiveAttention', lambda: _additive(units=4), qkv_args),
            ('MultiHeadAttentionCell', lambda: cells.MultiHeadAttentionCell(
                query_units=6, num_heads=2, layout='NTK'), cell_args),
            ('MultiHeadAttention', lambda: _mha(units=6, heads=2, use_bias=True), qkv_args)]


BLOCKS = _all_blocks()


@pytest.mark.parametrize('name,factory,make_args', BLOCKS, ids=[b[0] for b in BLOCKS])
@pytest.mark.parametrize('mode', ['hybridize', 'static'])
def test_imperative_equals_hybridized(name, factory, make_args, mode):
    args = make_args(2, 5, 7)
    block = factory()
    imperative = flat(block(*args))
    grads_imp = _grads(block, args)
    hybridize_mode(block, mode)
    hybrid = flat(block(*args))
    grads_hyb = _grads(block, args)
    for a, b in zip(imperative + grads_imp, hybrid + grads_hyb):
        onp.testing.assert_allclose(a, b, rtol=HYBRID_TOL, atol=HYBRID_TOL, err_msg=name)


def _grads(block, args):
    float_args = [a.copy() for a in args[:3]]
    for a in float_args:
        a.attach_grad()
    with mx.autograd.record():
        out = block(*float_args, *args[3:])
        out = out[0] if isinstance(out, (list, tuple)) else out
    out.backward()
    return [a.grad.asnumpy() for a in float_args]


@pytest.mark.parametrize('name,factory,make_args', BLOCKS, ids=[b[0] for b in BLOCKS])
def test_export_round_trip(name, factory, make_args, tmp_path):
    """Export at (B, L_q, L_m) = (2, 5, 7); the reloaded graph runs (3, 2, 11) and (1, 13, 1)."""
    block = factory()
    first = make_args(2, 5, 7)
    later = [make_args(3, 2, 11), make_args(1, 13, 1)]
    block(*first)
    expected = [flat(block(*args)) for args in later]          # imperative outputs
    block.hybridize(static_alloc=True, static_shape=True)
    block(*first)
    loaded = export_and_import(block, first, tmp_path, name)
    for args, exp in zip(later, expected):
        out = loaded(*args)
        got = flat(out)
        assert all(isinstance(o, np.ndarray) for o in (out if isinstance(out, list) else [out]))
        assert len(got) == len(exp)
        for a, b in zip(got, exp):
            onp.testing.assert_allclose(a, b, rtol=HYBRID_TOL, atol=HYBRID_TOL, err_msg=name)


# ----------------------------------------------------------------------------- properties
@pytest.mark.parametrize('name,factory,make_args', [b for b in BLOCKS if b[2] is BLOCKS[0][2]],
                         ids=[b[0] for b in BLOCKS if b[2] is BLOCKS[0][2]])
def test_nan_padding_never_reaches_output(name, factory, make_args):
    q, k, v, vl = make_args(2, 5, 7)
    vl = _int([3, 7])
    block = factory()
    clean = flat(block(q, k, v, vl))
    kn, vn = k.asnumpy(), v.asnumpy()
    kn[0, 3:] = onp.nan
    vn[0, 3:] = onp.nan
    dirty = flat(block(q, np.array(kn), np.array(vn), vl))
    for a, b in zip(clean, dirty):
        assert onp.isfinite(b).all(), name + ': NaN in padded keys/values reached the output'
        onp.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize('name,factory,make_args', BLOCKS, ids=[b[0] for b in BLOCKS])
def test_float16_on_cpu_returns_float16(name, factory, make_args):
    args = make_args(2, 5, 7)
    block = factory()
    ref32 = flat(block(*args))
    args16 = [a.astype('float16') if a.dtype == onp.float32 else a for a in args]
    out = flat(block(*args16))
    for a, b in zip(ref32, out):
        assert b.dtype == onp.float16, name
        assert onp.isfinite(b).all(), name
        onp.testing.assert_allclose(b, a, **tol('float16'))


@pytest.mark.parametrize('lengths', [(1, 1, 1), (3, 1, 2), (2, 7, 1)])
def test_shape_sweep_blocks(lengths):
    b, lq, lm = lengths
    for name, factory, make_args in BLOCKS:
        args = make_args(b, lq, lm)
        out = flat(factory()(*args))
        assert out[0].shape[:2] == (b, lq), name
        assert all(onp.isfinite(o).all() for o in out), name
