"""Bad input of the fused row-wise operators' bfloat16 path, in the style of
``test_bad_inputs.py``: one table of (what is wrong, call, exception type, message fragments);
each call raises exactly that type, its message says ``Received:`` and contains every fragment.
The operators' own refusals (MXNetError, from their type inference and backward passes) are in
``tests/core/test_fused_bfloat16_io.py``."""
import mxnet as mx
import pytest

from gluon_attention.core import fused
from gluon_attention.core.fused_rowwise import add_layer_norm, bias_gelu
from gluon_attention.core.matmul import BFLOAT16
from refusal import assert_refusal

pytestmark = pytest.mark.skipif(not fused.available(), reason='the fused kernel is not built')


def _bf16(shape):
    return mx.nd.amp_cast(mx.nd.ones(shape), dtype=BFLOAT16).as_np_ndarray()


def _recorded(call):
    with mx.autograd.record():
        return call()


BAD = [
    ('add_layer_norm-float32-residual-of-bfloat16-data',
     lambda: add_layer_norm(_bf16((2, 4)), mx.np.ones(4), mx.np.zeros(4),
                            residual=mx.np.zeros((2, 4))),
     TypeError, ['residual must be a bfloat16 mx.np array', "residual='ndarray float32"]),
    ('add_layer_norm-bfloat16-residual-of-float32-data',
     lambda: add_layer_norm(mx.np.ones((2, 4)), mx.np.ones(4), mx.np.zeros(4),
                            residual=_bf16((2, 4))),
     TypeError, ['residual must be a float32 mx.np array', "residual='ndarray bfloat16"]),
    ('add_layer_norm-bfloat16-gamma',
     lambda: add_layer_norm(_bf16((2, 4)), _bf16(4), mx.np.zeros(4)),
     TypeError, ['gamma must be a float32 mx.np array', "gamma='ndarray bfloat16"]),
    ('bias_gelu-bfloat16-bias', lambda: bias_gelu(_bf16((2, 4)), _bf16(4)),
     TypeError, ['bias must be a float32 mx.np array', "bias='ndarray bfloat16"]),
    ('bias_gelu-float16-data', lambda: bias_gelu(mx.np.ones((2, 4), dtype='float16'),
                                                 mx.np.ones(4)),
     TypeError, ['data must be a float32 or bfloat16 mx.np array', "data='ndarray float16"]),
    ('bias_gelu-bfloat16-under-autograd',
     lambda: _recorded(lambda: bias_gelu(_bf16((2, 4)), mx.np.ones(4))),
     ValueError, ['no backward pass for bfloat16 data', "data='bfloat16'"]),
    ('add_layer_norm-bfloat16-under-autograd',
     lambda: _recorded(lambda: add_layer_norm(_bf16((2, 4)), mx.np.ones(4), mx.np.zeros(4))),
     ValueError, ['outside autograd.record()', "data='bfloat16'"]),
]


@pytest.mark.parametrize('what, call, kind, fragments', BAD, ids=[row[0] for row in BAD])
def test_bad_input_is_refused(what, call, kind, fragments):
    with pytest.raises(Exception) as err:
        call()
    assert_refusal(err.value, kind, fragments)
