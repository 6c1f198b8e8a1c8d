"""gluon_attention.compat.gluonnlp: GluonNLP 0.10's attention cells as drop-ins.

A 0.10 cell, seeded and randomly initialised, saves its parameters; the drop-in cell built with
the same arguments loads them strictly (same names and shapes) and returns 0.10's context and
weights within 1e-5, imperatively and hybridized, with a mask holding a fully masked row.
"""
import mxnet as mx
import numpy as onp
import pytest
from conftest import requires_gpu

from gluon_attention.compat import gluonnlp as compat

attention_cell = pytest.importorskip('gluonnlp.model.attention_cell')
ATOL = 1e-5


def _legacy():
    return _Scope()


class _Scope:
    """Legacy (non-numpy) mode for the block of the ``with`` (conftest sets numpy mode)."""

    def __enter__(self):
        self._scopes = [mx.util.np_array(False), mx.util.np_shape(False)]
        for scope in self._scopes:
            scope.__enter__()

    def __exit__(self, *exc):
        for scope in reversed(self._scopes):
            scope.__exit__(*exc)


CONFIGS = {  # name -> (module -> cell)
    'dot-plain': lambda m: m.DotProductAttentionCell(),
    'dot-unscaled-projected': lambda m: m.DotProductAttentionCell(units=6, scaled=False),
    'dot-luong': lambda m: m.DotProductAttentionCell(units=5, luong_style=True),
    'dot-normalized-no-bias': lambda m: m.DotProductAttentionCell(units=6, normalized=True,
                                                                  use_bias=False),
    'mlp': lambda m: m.MLPAttentionCell(units=7),
    'mlp-normalized': lambda m: m.MLPAttentionCell(units=7, normalized=True),
    'multi-head-dot': lambda m: m.MultiHeadAttentionCell(m.DotProductAttentionCell(), 8, 8, 10,
                                                         num_heads=2),
    'multi-head-mlp-no-bias': lambda m: m.MultiHeadAttentionCell(
        m.MLPAttentionCell(units=3), 6, 6, 4, num_heads=2, use_bias=False),
}


def _inputs(seed, with_value=True):
    rng = onp.random.RandomState(seed)
    query, key = rng.normal(size=(3, 4, 5)), rng.normal(size=(3, 6, 5))
    value = rng.normal(size=(3, 6, 9)) if with_value else None
    mask = (rng.rand(3, 4, 6) > 0.3).astype(onp.float32)
    mask[1, 2] = 0                 # a query that may attend nothing
    mask[:, :, 0] = onp.where(onp.arange(3)[:, None] == 1, mask[:, :, 0], 1)
    return [None if x is None else mx.nd.array(x) for x in (query, key, value, mask)]


def _peer_and_ours(name, tmp_path, seed):
    inputs = _inputs(seed)
    with _legacy():
        mx.random.seed(seed)
        peer = CONFIGS[name](attention_cell)
        peer.initialize(mx.init.Normal(0.5))
        expected = [x.asnumpy() for x in peer(*inputs)]
        peer.save_parameters(str(tmp_path / 'cell.params'))
        ours = CONFIGS[name](compat)
        ours.load_parameters(str(tmp_path / 'cell.params'))   # strict: names and shapes
    return ours, inputs, expected


@pytest.mark.parametrize('hybridize', [False, True])
@pytest.mark.parametrize('name', sorted(CONFIGS))
def test_drop_in_cell_loads_and_matches_gluonnlp(name, hybridize, tmp_path):
    ours, inputs, expected = _peer_and_ours(name, tmp_path, seed=len(name))
    with _legacy():
        if hybridize:
            ours.hybridize()
        got = [x.asnumpy() for x in ours(*inputs)]
    assert [g.shape for g in got] == [e.shape for e in expected]
    for g, e in zip(got, expected):
        finite = onp.isfinite(e)
        assert finite.all()     # 0.10 is finite here (float32, -1e18 fill), fully masked row too
        assert onp.abs(g - e).max() < ATOL
    weights = got[1] if got[1].ndim == 3 else got[1][:, 0]
    assert (weights[1, 2] == 0).all()   # the fully masked row: zero weights


def test_value_defaults_to_key(tmp_path):
    ours, inputs, _ = _peer_and_ours('dot-plain', tmp_path, seed=3)
    with _legacy():
        onp.testing.assert_array_equal(ours(inputs[0], inputs[1], None, inputs[3])[0].asnumpy(),
                                       ours(inputs[0], inputs[1], inputs[1],
                                            inputs[3])[0].asnumpy())


def test_numpy_mode_arrays_are_refused():
    with _legacy():
        cell = compat.DotProductAttentionCell()
        cell.initialize()
        query = mx.nd.ones((1, 2, 3))
        with pytest.raises(TypeError, match=r"legacy mx.nd arrays.*Received: key="
                                            r"'mxnet.numpy.ndarray'"):
            cell(query, mx.np.ones((1, 2, 3)))
    with pytest.raises(TypeError, match=r'outside numpy mode.*Received: mx.util.is_np_array\(\)'
                                        r'=True'):
        cell(query, query)


def test_bad_constructor_arguments():
    with pytest.raises(ValueError, match=r'luong_style=True needs units.*Received: units=None'):
        compat.DotProductAttentionCell(luong_style=True)
    with pytest.raises(ValueError, match=r'value_units must be divisible.*value_units=5'):
        compat.MultiHeadAttentionCell(compat.DotProductAttentionCell(), 4, 4, 5, num_heads=2)
    with pytest.raises(TypeError, match=r"base_cell must be.*Received: base_cell="
                                        r"'DotProductAttentionCell'"):
        compat.MultiHeadAttentionCell(attention_cell.DotProductAttentionCell(), 4, 4, 4, 2)


@requires_gpu
@pytest.mark.parametrize('name', ['dot-plain', 'multi-head-dot'])
def test_float16_cell_on_gpu_matches_float32(name, tmp_path):
    """float16 runs on a GPU (the CPU refuses it: tests/errors/test_bad_inputs_compat.py): the
    cell cast to float16 gives the float32 cell's outputs within float16 precision, the fully
    masked row zero weights."""
    ours, inputs, expected = _peer_and_ours(name, tmp_path, seed=5)
    with _legacy():
        ours.reset_ctx(mx.gpu(0))
        ours.cast('float16')
        half = [None if x is None else x.as_in_context(mx.gpu(0)).astype('float16')
                for x in inputs]
        got = [x.asnumpy().astype(onp.float32) for x in ours(*half)]
    for g, e in zip(got, expected):
        assert onp.abs(g - e).max() < 2e-2
    weights = got[1] if got[1].ndim == 3 else got[1][:, 0]
    assert (weights[1, 2] == 0).all()
