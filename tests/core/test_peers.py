"""Peer parity with gluonnlp 0.10 (legacy MXNet 1.x attention cells), within 1e-5.

gluonnlp 0.10 cells take legacy mx.nd arrays and must run outside numpy mode: they are called
inside ``mx.util.np_array(False)`` / ``mx.util.np_shape(False)`` scopes with ``as_nd_ndarray()``
inputs. Parity is defined through equivalent configurations with parameters copied across.
"""
import mxnet as mx
import numpy as onp
import pytest
from mxnet import np

import reference as ref
from conftest import PEER_TOL, hybridize_mode
from gluon_attention.core import cells

attention_cell = pytest.importorskip('gluonnlp.model.attention_cell')


def _rand(shape):
    return np.array(onp.random.normal(size=shape), dtype='float32')


def _legacy(block_factory):
    with mx.util.np_array(False), mx.util.np_shape(False):
        block = block_factory()
        block.initialize()
    return block


def _call_legacy(block, *args):
    with mx.util.np_array(False), mx.util.np_shape(False):
        out = block(*[None if a is None else a.as_nd_ndarray() for a in args])
        return [o.asnumpy() for o in out]


def _set(param, value):
    with mx.util.np_array(False), mx.util.np_shape(False):
        param.set_data(mx.nd.array(onp.asarray(value), dtype='float32'))


def _lengths_and_mask(lq, lm):
    vl = onp.array([lm, 0, 3], dtype='int32')
    mask = ref.key_mask_from_valid_length(vl, lq, lm).astype('float32')
    return np.array(vl, dtype='int32'), np.array(mask)


def _peer_dot(peer_hybrid):
    peer = _legacy(lambda: attention_cell.DotProductAttentionCell(scaled=True))
    if peer_hybrid:
        with mx.util.np_array(False), mx.util.np_shape(False):
            peer.hybridize()
    return peer


@pytest.mark.parametrize('peer_hybrid', [False, True])
def test_dot_product_attention_matches_gluonnlp(hybrid_mode, peer_hybrid):
    q, k, v = _rand((3, 5, 4)), _rand((3, 7, 4)), _rand((3, 7, 2))
    vl, mask = _lengths_and_mask(5, 7)
    ours = hybridize_mode(cells.DotProductAttention(scaled=True), hybrid_mode)
    ctx, weights = ours(q, k, v, vl)
    peer_ctx, peer_w = _call_legacy(_peer_dot(peer_hybrid), q, k, v, mask)
    onp.testing.assert_allclose(ctx.asnumpy(), peer_ctx, rtol=PEER_TOL, atol=PEER_TOL)
    onp.testing.assert_allclose(weights.asnumpy(), peer_w, rtol=PEER_TOL, atol=PEER_TOL)
    assert onp.all(weights.asnumpy()[1] == 0) and onp.all(peer_w[1] == 0)


def test_additive_attention_matches_gluonnlp_mlp_cell(hybrid_mode):
    units, cq, ck = 5, 3, 2
    q, k, v = _rand((3, 4, cq)), _rand((3, 7, ck)), _rand((3, 7, 6))
    vl, mask = _lengths_and_mask(4, 7)
    ours = cells.AdditiveAttention(units)
    ours.initialize(mx.init.Normal(0.5))
    ours(q, k, v, vl)
    hybridize_mode(ours, hybrid_mode)
    params = {p.shape: p.data().asnumpy() for p in ours.collect_params().values()}
    peer = _legacy(lambda: attention_cell.MLPAttentionCell(units))
    _call_legacy(peer, q, k, v, mask)            # deferred init of the peer
    for name, p in peer.collect_params().items():
        if name.endswith('bias'):
            _set(p, onp.zeros(p.shape))           # the peer's query-side bias: zero
        else:
            _set(p, params[p.shape])
    ctx, weights = ours(q, k, v, vl)
    peer_ctx, peer_w = _call_legacy(peer, q, k, v, mask)
    onp.testing.assert_allclose(ctx.asnumpy(), peer_ctx, rtol=PEER_TOL, atol=PEER_TOL)
    onp.testing.assert_allclose(weights.asnumpy(), peer_w, rtol=PEER_TOL, atol=PEER_TOL)


def _peer_multi_head(units, heads, use_bias):
    return _legacy(lambda: attention_cell.MultiHeadAttentionCell(
        attention_cell.DotProductAttentionCell(scaled=True), units, units, units, heads,
        use_bias=use_bias))


def _copy_projections(ours, peer, use_bias):
    for mine, theirs in (('query_proj', 'proj_query'), ('key_proj', 'proj_key'),
                         ('value_proj', 'proj_value')):
        child, other = getattr(ours, mine), getattr(peer, theirs)
        _set(other.weight, child.weight.data().asnumpy())
        if use_bias:
            _set(other.bias, child.bias.data().asnumpy())


@pytest.mark.parametrize('use_bias', [False, True])
def test_multi_head_attention_matches_gluonnlp(hybrid_mode, use_bias):
    """Our output projection set to the identity (bias 0): equal to the peer (no out proj)."""
    units, heads = 6, 3
    q, k, v = _rand((3, 5, 4)), _rand((3, 7, 2)), _rand((3, 7, 5))
    vl, mask = _lengths_and_mask(5, 7)
    ours = cells.MultiHeadAttention(units, heads, use_bias=use_bias)
    ours.initialize(mx.init.Normal(0.5))
    ours(q, k, v, vl)
    ours.out_proj.weight.set_data(np.eye(units))
    if use_bias:
        for child in (ours.query_proj, ours.key_proj, ours.value_proj):
            child.bias.set_data(_rand(child.bias.shape))
        ours.out_proj.bias.set_data(np.zeros((units,)))
    hybridize_mode(ours, hybrid_mode)
    peer = _peer_multi_head(units, heads, use_bias)
    _call_legacy(peer, q, k, v, mask)
    _copy_projections(ours, peer, use_bias)
    out, weights = ours(q, k, v, vl)
    peer_out, peer_w = _call_legacy(peer, q, k, v, mask)
    onp.testing.assert_allclose(out.asnumpy(), peer_out, rtol=PEER_TOL, atol=PEER_TOL)
    onp.testing.assert_allclose(weights.asnumpy(), peer_w, rtol=PEER_TOL, atol=PEER_TOL)


@pytest.mark.parametrize('layout', ['NKT', 'NTK', 'TNK'])
def test_multi_head_attention_cell_matches_gluonnlp(layout):
    """Project with the peer's own Dense layers, split heads, run our parameter-free cell."""
    units, heads = 6, 2
    q, k, v = _rand((3, 5, 4)), _rand((3, 7, 3)), _rand((3, 7, 2))
    _, mask = _lengths_and_mask(5, 7)
    peer = _peer_multi_head(units, heads, True)
    peer_out, peer_w = _call_legacy(peer, q, k, v, mask)
    projected = []
    for name, x in (('proj_query', q), ('proj_key', k), ('proj_value', v)):
        dense = getattr(peer, name)
        y = ref.dense(x, dense.weight.data().asnumpy(), dense.bias.data().asnumpy())
        y = y.reshape(y.shape[0], y.shape[1], heads, -1).transpose(0, 2, 1, 3)   # NKT
        projected.append(np.array(ref.from_nkt(y, layout), dtype='float32'))
    cell = cells.MultiHeadAttentionCell(query_units=units, num_heads=heads, layout=layout)
    ctx, weights = cell(*projected, np.array(mask, dtype=bool))
    ctx = ctx.asnumpy()
    if layout == 'TNK':
        ctx = ctx.transpose(1, 0, 2)
    onp.testing.assert_allclose(ctx, peer_out, rtol=PEER_TOL, atol=PEER_TOL)
    onp.testing.assert_allclose(weights.asnumpy(), peer_w, rtol=PEER_TOL, atol=PEER_TOL)
