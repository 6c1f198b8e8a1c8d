"""Bad input to the GluonNLP 0.10 drop-in cells (:mod:`gluon_attention.compat.gluonnlp`), in the
style of ``test_bad_inputs.py``: (what is wrong, call, exception type, message fragments). The
cells run outside numpy mode, so each call runs in a legacy scope."""
import mxnet as mx
import numpy as onp
import pytest

from gluon_attention.compat import gluonnlp as compat
from refusal import assert_refusal


def _arrays(dtype='float32', mask_dtype=None):
    """Random (2, 3, 4) query and (2, 5, 4) key of ``dtype``, value None, an all-ones (2, 3, 5)
    mask of ``mask_dtype`` (default: ``dtype``)."""
    rng = onp.random.RandomState(0)
    query, key = (mx.nd.array(rng.normal(size=shape), dtype=dtype)
                  for shape in ((2, 3, 4), (2, 5, 4)))
    return query, key, None, mx.nd.ones((2, 3, 5), dtype=mask_dtype or dtype)


def _call(cell, dtype='float32', mask_dtype=None, cast=None):
    """``cell`` initialised, cast to ``cast`` when given, called on :func:`_arrays`."""
    cell.initialize()
    if cast:
        cell.cast(cast)
    return cell(*_arrays(dtype, mask_dtype))


def _multi_head():
    return compat.MultiHeadAttentionCell(compat.DotProductAttentionCell(), 4, 4, 4, 2)


BAD = [
    ('float16-on-cpu', lambda: _call(compat.DotProductAttentionCell(), 'float16',
                                     cast='float16'), TypeError,
     ['DotProductAttentionCell runs float16 on a GPU only', "query.context='cpu(0)'"]),
    ('float16-on-cpu-multi-head', lambda: _call(_multi_head(), 'float16', cast='float16'),
     TypeError, ['MultiHeadAttentionCell runs float16 on a GPU only']),
    ('float16-arrays-float32-cell', lambda: _call(compat.MLPAttentionCell(6), 'float16'),
     TypeError, ['MLPAttentionCell is float32: query, key, value and mask must all be float32',
                 'cell.cast(dtype)', "query.dtype='float16'"]),
    ('float64-arrays-float32-cell', lambda: _call(compat.DotProductAttentionCell(units=4),
                                                  'float64'), TypeError,
     ["query.dtype='float64'"]),
    ('int-mask', lambda: _call(compat.DotProductAttentionCell(), mask_dtype='int32'), TypeError,
     ['DotProductAttentionCell is float32', "mask.dtype='int32'"]),
    ('float32-arrays-float64-cell', lambda: _call(_multi_head(), cast='float64'), TypeError,
     ['MultiHeadAttentionCell is float64', "query.dtype='float32'"]),
]


@pytest.mark.parametrize('call, kind, fragments', [row[1:] for row in BAD],
                         ids=[row[0] for row in BAD])
def test_bad_compat_cell_input_raises_with_received(call, kind, fragments):
    with mx.util.np_array(False), mx.util.np_shape(False):
        with pytest.raises(Exception) as err:
            call()
            mx.nd.waitall()
    assert_refusal(err.value, kind, fragments)


def test_accepted_neighbour_float64_cell_matches_float32():
    """The cell, called in float32, then cast to float64 and called on the same inputs in
    float64, gives the same outputs (float64 ones)."""
    with mx.util.np_array(False), mx.util.np_shape(False):
        cell = _multi_head()
        narrow = _call(cell)
        cell.cast('float64')
        wide = cell(*_arrays('float64'))
        for a, b in zip(wide, narrow):
            assert (onp.dtype(a.dtype), onp.dtype(b.dtype)) == (onp.float64, onp.float32)
            assert abs(a.asnumpy() - b.asnumpy()).max() < 1e-5
