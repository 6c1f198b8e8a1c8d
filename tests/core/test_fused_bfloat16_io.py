"""bfloat16 data in and out of the fused operators (``ga_add_layer_norm``, ``ga_bias_gelu``,
``ga_fused_attention``: MXNet's type code 12, inference only).

Oracles: float64 NumPy on the bfloat16-rounded inputs. The operators compute in float32 and
round their output to the nearest bfloat16 (half a unit in the last place: at most 2^-8 of the
value), so each output lies within 2^-8 |oracle| plus the float32 path's own error of the
oracle: 1e-5 for the row-wise operators, for the attention on AMX tiles the weights' rounding
(2^-8 sum_j w_ij |v_jc|, test_fused_bfloat16.py). Sharper, a property: each output is exactly
the float32 path's output on the same (widened) inputs rounded to nearest even, lse included
(float32 in both). The rounding itself (ties to even, overflow to infinity, NaN) is checked
through ``gelu(0 + bias) = bias`` for biases >= 8 on both conversion paths: AVX512-BF16's
instruction and the vectorised integer loop of the AVX2 kernels (``GA_FUSED_ISA=avx2``, a
subprocess). Masked attention weights stay exactly 0; mixed dtypes and backward passes are
refused with messages that say which input.
"""
import mxnet as mx
import numpy as onp
import pytest
from mxnet import autograd

import reference as ref
from gluon_attention.core import fused
from gluon_attention.core.fused_rowwise import add_layer_norm, bias_gelu
from gluon_attention.core.matmul import BFLOAT16
from test_fused import lengths_for, make_inputs
from test_fused_rowwise import run_avx2_worker
from test_matmul import to_bf16

pytestmark = pytest.mark.skipif(not fused.available(), reason='the fused kernel is not built: '
                                '{}'.format(fused.load_error()))
HALF_ULP = 2.0 ** -8       # the largest relative error of rounding to the nearest bfloat16


def bf16(a):
    """float32 values as a legacy bfloat16 array (MXNet's amp_cast: nearest even)."""
    return mx.nd.amp_cast(mx.nd.array(onp.asarray(a, dtype='float32')), dtype=BFLOAT16)


def wide(x):
    """A bfloat16 (or float32) MXNet array as float32 NumPy values."""
    return mx.nd.amp_cast(x.as_nd_ndarray(), dtype='float32').asnumpy()


def rounded(a):
    return to_bf16(a).astype('float32')


def test_layer_norm_and_gelu_within_rounding_of_the_oracle():
    rng = onp.random.RandomState(21)
    for rows, d in (((7, 11), 384), ((3,), 37), ((50,), 5)):
        x, res = (rounded(rng.normal(size=rows + (d,)) * 3) for _ in range(2))
        gamma, beta, bias = (rng.normal(size=d).astype('float32') for _ in range(3))
        got_ln = add_layer_norm(bf16(x).as_np_ndarray(), mx.np.array(gamma), mx.np.array(beta),
                                residual=bf16(res).as_np_ndarray(), eps=1e-5)
        got_gelu = bias_gelu(bf16(x).as_np_ndarray(), mx.np.array(bias))
        assert got_ln.dtype == BFLOAT16 and got_gelu.dtype == BFLOAT16
        want_ln = ref.layer_norm(ref.f64(x) + ref.f64(res), gamma, beta, 1e-5)
        want_gelu = ref.gelu(ref.f64(x) + ref.f64(bias))
        for got, want in ((got_ln, want_ln), (got_gelu, want_gelu)):
            assert got.shape == want.shape
            assert (abs(wide(got) - want) <= HALF_ULP * abs(want) + 1e-5).all()
        # exactly the float32 operator on the same values, rounded
        f32_ln = add_layer_norm(mx.np.array(x), mx.np.array(gamma), mx.np.array(beta),
                                residual=mx.np.array(res), eps=1e-5).asnumpy()
        f32_gelu = bias_gelu(mx.np.array(x), mx.np.array(bias)).asnumpy()
        assert (wide(got_ln) == rounded(f32_ln)).all()
        assert (wide(got_gelu) == rounded(f32_gelu)).all()


def rounding_cases():
    """Biases (float32) >= 8, where gelu(bias) = bias exactly in float32: ties either way,
    just off the ties, random values across the exponent range, the largest float32 (rounds to
    infinity), infinity, NaN."""
    rng = onp.random.RandomState(2)
    ties = 8.0 * (1.0 + onp.arange(1, 40, 2) * 2.0 ** -8)             # odd multiples of 2^-8
    off = onp.nextafter(ties.astype('float32'), onp.float32(0))
    spread = onp.exp(rng.uniform(onp.log(8.0), onp.log(1e37), size=200))
    special = [3.4028235e38, onp.inf, onp.nan]
    return onp.concatenate([ties, off, spread, special]).astype('float32')


def gelu_round(values):
    """bias_gelu(0, values) as bfloat16 bits (uint16), 3 rows."""
    data = bf16(onp.zeros((3, values.size))).as_np_ndarray()
    out = bias_gelu(data, mx.np.array(values))
    return mx.nd.amp_cast(out.as_nd_ndarray(), dtype='float32').asnumpy().view(onp.uint32) >> 16


def test_output_rounding_is_nearest_even_with_overflow_and_nan():
    values = rounding_cases()
    got = gelu_round(values)
    finite = onp.isfinite(values)
    want = (to_bf16(values[finite]).astype('float32').view(onp.uint32) >> 16)
    assert (got[:, finite] == want).all()
    assert (got[:, -3:-1] == 0x7F80).all()                      # float32 max and inf: inf
    assert (got[:, -1] & 0x7F80 == 0x7F80).all() and (got[:, -1] & 0x7F).all()   # NaN


AVX2_WORKER = r'''
import json, sys
import numpy as onp
import mxnet as mx
mx.npx.set_np()
sys.path[:0] = sys.argv[2:]
import test_fused_bfloat16_io as t
from gluon_attention.core import fused
onp.save(sys.argv[1], t.gelu_round(t.rounding_cases()))
print(json.dumps({'isa': fused.isa(), 'convert': fused.bf16_convert_isa()}))
'''


def test_avx2_conversion_path_rounds_the_same(tmp_path):
    """GA_FUSED_ISA=avx2: the integer loop of the AVX2 kernels (chosen once per process: a
    subprocess) gives the bits of the path in this process (the instruction where the CPU has
    AVX512-BF16)."""
    said = run_avx2_worker(AVX2_WORKER, tmp_path / 'bits.npy')
    assert said == {'isa': 'avx2', 'convert': 'avx2'}
    assert (onp.load(tmp_path / 'bits.npy') == gelu_round(rounding_cases())).all()
    assert fused.bf16_convert_isa() in ('avx512bf16', 'avx512', 'avx2')


def attend(q, key, v, lengths, layout, matmul_dtype, dtype):
    """(context, lse) of the operator on q, key, v as ``dtype`` ('bfloat16' or 'float32')."""
    arrays = [bf16(x) if dtype == 'bfloat16' else mx.nd.array(x) for x in (q, key, v)]
    extra = [] if lengths is None else [mx.nd.array(lengths)]
    ctx, lse = mx.nd.ga_fused_attention(*arrays, *extra, layout=layout, scale=repr(
        1.0 / onp.sqrt(q.shape[-1])), with_length=int(lengths is not None),
                                        matmul_dtype=matmul_dtype)
    assert lse.dtype == onp.float32
    assert ctx.dtype == (BFLOAT16 if dtype == 'bfloat16' else onp.float32)
    return wide(ctx), lse.asnumpy()


# (layout, (B, K, L_q, L_m, C_k, C_v), lengths): the tiles (more than 4 query rows, L_m across
# the 256-key block, C off the 32-wide tile rows) and the float32 kernels' path (4 rows).
CASES = [('NKT', (1, 2, 70, 300, 64, 64), 'per_row'),
         ('NTK', (2, 3, 37, 50, 12, 20), 'batch'),
         ('TNK', (2, 2, 40, 33, 100, 72), 'none'),
         ('NTK', (3, 2, 4, 30, 16, 24), 'batch')]


@pytest.mark.parametrize('matmul_dtype', ['float32', 'bfloat16'])
@pytest.mark.parametrize('layout, size, kind', CASES)
def test_attention_bfloat16_io_is_the_float32_path_rounded(layout, size, kind, matmul_dtype):
    rng = onp.random.RandomState(13)
    q, key, v = (rounded(x) for x in make_inputs(rng, layout, *size))
    lengths = lengths_for(kind, rng, size[0], size[2], size[3])
    got, lse = attend(q, key, v, lengths, layout, matmul_dtype, 'bfloat16')
    want, want_lse = attend(q, key, v, lengths, layout, matmul_dtype, 'float32')
    assert (got == rounded(want)).all() and (lse == want_lse).all()
    mask = None if lengths is None else ref.key_mask_from_valid_length(lengths, size[2], size[3])
    exact, _, weights = ref.multi_head_dot_attn(q, key, v, mask, layout=layout)
    magnitude = ref.merge_heads(onp.matmul(weights, onp.abs(ref.to_nkt(ref.f64(v), layout))),
                                layout)
    assert (abs(got - exact) <= 2 * HALF_ULP * magnitude + 1e-5).all()


@pytest.mark.parametrize('matmul_dtype', ['float32', 'bfloat16'])
def test_attention_bfloat16_masked_weights_exactly_zero(matmul_dtype):
    """One-hot values (C_v = L_m): context channel j is the weight of key j, exactly 0 past each
    row's length, rows of length 0 all zero; keys and values past the longest length are NaN
    and never read."""
    rng = onp.random.RandomState(5)
    b, heads, lq, lm = 2, 2, 37, 40
    q, key = (rounded(rng.normal(size=(b, heads, n, 24))) for n in (lq, lm))
    v = onp.broadcast_to(onp.eye(lm, dtype='float32'), (b, heads, lm, lm)).copy()
    lengths = rng.randint(0, 33, size=(b, lq))
    lengths[0, :3] = 0
    lengths[1, 0] = 32
    key[:, :, 32:], v[:, :, 32:] = onp.nan, onp.nan
    got = attend(q, key, v, lengths, 'NKT', matmul_dtype, 'bfloat16')[0]
    got = got.reshape(b, lq, heads, lm)
    past = onp.arange(lm)[None, None, :] >= lengths[:, :, None]
    assert onp.isfinite(got).all()
    assert (got[onp.broadcast_to(past[:, :, None], got.shape)] == 0).all()
    assert (got[0, :3] == 0).all()


def test_mixed_dtypes_and_backward_are_refused():
    x, vec = bf16(onp.ones((2, 8))), mx.nd.ones(8)
    with pytest.raises(mx.base.MXNetError, match="residual must be of data's dtype"):
        mx.nd.ga_add_layer_norm(x, vec, vec, mx.nd.ones((2, 8))).wait_to_read()
    with pytest.raises(mx.base.MXNetError, match='bias must be float32'):
        mx.nd.ga_bias_gelu(x, bf16(onp.ones(8))).wait_to_read()
    q = bf16(onp.ones((1, 2, 5, 8)))
    with pytest.raises(mx.base.MXNetError, match="value must be of the others' dtype"):
        mx.nd.ga_fused_attention(q, q, mx.nd.ones((1, 2, 5, 8)), with_length=0)[0].wait_to_read()
    with pytest.raises(mx.base.MXNetError, match='length must be float32'):
        mx.nd.ga_fused_attention(q, q, q, bf16([5]))[0].wait_to_read()
    for op, args, name in ((mx.nd.ga_bias_gelu, (x, vec), 'ga_bias_gelu'),
                           (mx.nd.ga_fused_attention, (q, q, q), 'ga_fused_attention')):
        for a in args:
            a.attach_grad()
        with autograd.record():
            out = op(*args, **({'with_length': 0} if len(args) == 3 else {}))
            out = out[0] if isinstance(out, list) else out
        with pytest.raises(mx.base.MXNetError, match=name + ': no backward pass for bfloat16'):
            out.backward()
            args[0].grad.wait_to_read()
