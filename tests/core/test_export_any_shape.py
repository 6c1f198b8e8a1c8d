"""A hybridized block that builds its mask from valid_length, exported once, reloads with
``SymbolBlock.imports`` and runs at other batch sizes and lengths with mx.np outputs."""
import mxnet as mx
import numpy as onp
import pytest
from mxnet import np

from block_utils import export_and_import, flat, ints, rand
from conftest import HYBRID_TOL, requires_gpu
import gluon_attention as ga

BLOCKS = {'DotProductAttention': lambda: ga.DotProductAttention(),
          'AdditiveAttention': lambda: ga.AdditiveAttention(4),
          'MultiHeadAttention': lambda: ga.MultiHeadAttention(6, 2)}


def _self_attention_args(b, t, c=6):
    return (rand(b, t, c), rand(b, t, c), rand(b, t, c),
            ints(onp.random.randint(0, t + 1, size=b)))


@pytest.mark.parametrize('name', sorted(BLOCKS))
def test_exported_graph_runs_other_batch_sizes_and_lengths(name, tmp_path):
    """Exported at B = 2, T = 8; the reloaded graph runs T = 12, T = 5 and B = 3 and matches the
    imperative block."""
    block = BLOCKS[name]()
    block.initialize()
    first = _self_attention_args(2, 8)
    later = [_self_attention_args(2, 12), _self_attention_args(2, 5), _self_attention_args(3, 8)]
    block(*first)
    expected = [flat(block(*a)) for a in later]
    block.hybridize()
    block(*first)
    loaded = export_and_import(block, first, tmp_path, name)
    for args, exp in zip(later, expected):
        for got, e in zip(flat(loaded(*args)), exp):
            onp.testing.assert_allclose(got, e, rtol=HYBRID_TOL, atol=HYBRID_TOL)


def _hybridized_mha():
    block = ga.MultiHeadAttention(16, 4)
    block.initialize()
    block.hybridize()
    return block, (rand(2, 4, 16), rand(2, 4, 16), rand(2, 4, 16), ints([4, 2]))


def test_export_round_trip_returns_np_arrays(tmp_path):
    block, args = _hybridized_mha()
    before = block(*args)
    after = export_and_import(block, args, tmp_path, 'mha')(*args)
    assert all(isinstance(o, np.ndarray) for o in after)
    for a, b in zip(flat(before), flat(after)):
        onp.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


@requires_gpu
def test_export_round_trip_on_gpu(tmp_path):
    block, args = _hybridized_mha()
    before = flat(block(*args))
    prefix = str(tmp_path / 'mha')
    block.export(prefix)
    loaded = mx.gluon.SymbolBlock.imports(prefix + '-symbol.json',
                                          ['data0', 'data1', 'data2', 'data3'],
                                          prefix + '-0000.params', ctx=mx.gpu())
    after = flat(loaded(*[a.as_in_context(mx.gpu()) for a in args]))
    for a, b in zip(before, after):
        onp.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
