"""bfloat16 dense products (gluon_attention.core.matmul): a NumPy oracle that rounds operands and
results to bfloat16 (nearest, ties to even) and multiplies in float64, forward and gradients;
results exactly representable in bfloat16; float32 exactly nn.Dense; hybridized equal to
imperative; set_matmul_dtype switching an encoder both ways; the refusals.

The numeric tests skip, saying why, where this CPU or MXNet build has no bfloat16 products
(``bfloat16_problem``), as GPU tests skip without a GPU.
"""
import math

import mxnet as mx
import numpy as onp
import pytest
from mxnet import autograd
from mxnet.gluon import nn

from conftest import HYBRID_MODES, SEED, hybridize_mode
from gluon_attention.core import matmul
from gluon_attention.core.fused_rowwise import DenseGELU
from gluon_attention.core.kernels import Kernels
from gluon_attention.models.encoder import TransformerEncoder

needs_bf16 = pytest.mark.skipif(matmul.bfloat16_problem() is not None,
                                reason='no bfloat16 products here: {}'.format(
                                    matmul.bfloat16_problem()))


def to_bf16(a):
    """float32 values rounded to the nearest bfloat16 (ties to even), as float64."""
    bits = onp.asarray(a, dtype=onp.float32).view(onp.uint32).astype(onp.uint64)
    bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return bits.astype(onp.uint32).view(onp.float32).astype(onp.float64)


def is_bf16(a):
    return not (onp.asarray(a, dtype=onp.float32).view(onp.uint32) & 0xFFFF).any()


def oracle(x, w, b, g):
    """Forward and the gradients of sum(out * g), float64, bfloat16 operands and results."""
    xb, wb, bb, gb = (to_bf16(a) for a in (x, w, b, g))
    out = to_bf16(xb @ wb.T + bb)
    return out, to_bf16(gb @ wb), to_bf16(gb.T @ xb), to_bf16(gb.sum(axis=0))


def assert_bf16_close(got, want, what):
    """Within two bfloat16 roundings of each entry (float32 accumulation against float64 can
    move a result across one rounding boundary), plus 1e-4 of the largest entry."""
    bound = 2.0 ** -7 * abs(want) + 1e-4 * abs(want).max()
    worst = float((abs(got - want) - bound).max())
    assert worst <= 0, '{}: exceeds the bound by {:.3g}'.format(what, worst)


def random_case(rng, n=96, c=80, units=48):
    return (rng.uniform(-2, 2, (n, c)).astype('float32'),
            rng.uniform(-0.5, 0.5, (units, c)).astype('float32'),
            rng.uniform(-1, 1, (units,)).astype('float32'),
            rng.uniform(-1, 1, (n, units)).astype('float32'))


def run_dense(block, x, g):
    data = mx.np.array(x)
    data.attach_grad()
    with autograd.record():
        out = block(data)
        loss = (out * mx.np.array(g)).sum()
    loss.backward()
    return (out.asnumpy(), data.grad.asnumpy(), block.weight.grad().asnumpy(),
            block.bias.grad().asnumpy())


def dense_with(weight, bias, matmul_dtype):
    block = matmul.Dense(weight.shape[0], in_units=weight.shape[1], matmul_dtype=matmul_dtype)
    block.initialize()
    block.weight.set_data(mx.np.array(weight))
    block.bias.set_data(mx.np.array(bias))
    return block


def test_rounding_helper_is_round_to_nearest_even():
    # 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1); just
    # above halfway rounds up; 1 + 3 * 2^-8 is halfway to an odd one and goes up to 1 + 2^-6.
    values = onp.array([1 + 2.0 ** -8, 1 + 2.0 ** -8 + 2.0 ** -20, 1 + 3 * 2.0 ** -8, -1.5],
                       dtype='float32')
    assert list(to_bf16(values)) == [1.0, 1 + 2.0 ** -7, 1 + 2.0 ** -6, -1.5]


@needs_bf16
def test_mxnet_cast_rounds_as_the_oracle():
    x = onp.random.RandomState(SEED).normal(size=4096).astype('float32') * 10
    got = matmul._cast(mx.nd, matmul._cast(mx.nd, mx.np.array(x), matmul.BFLOAT16),
                       'float32').asnumpy()
    onp.testing.assert_array_equal(got, to_bf16(x))


@needs_bf16
@pytest.mark.parametrize('shape', [(96, 80, 48), (7, 3, 5), (1, 384, 1536)])
def test_bfloat16_dense_matches_oracle_forward_and_gradients(shape):
    x, w, b, g = random_case(onp.random.RandomState(SEED), *shape)
    got = run_dense(dense_with(w, b, 'bfloat16'), x, g)
    for name, value, want in zip(('out', 'dx', 'dweight', 'dbias'), got, oracle(x, w, b, g)):
        assert_bf16_close(value, want, name)
    for name, value in zip(('out', 'dx', 'dweight'), got):
        assert is_bf16(value), '{} is not a bfloat16 product'.format(name)


def test_float32_dense_is_nn_dense_exactly():
    x, w, b, g = random_case(onp.random.RandomState(SEED))
    reference = nn.Dense(w.shape[0], in_units=w.shape[1], flatten=False)
    reference.initialize()
    reference.weight.set_data(mx.np.array(w))
    reference.bias.set_data(mx.np.array(b))
    for got, want in zip(run_dense(dense_with(w, b, 'float32'), x, g),
                         run_dense(reference, x, g)):
        onp.testing.assert_array_equal(got, want)


@needs_bf16
@pytest.mark.parametrize('mode', HYBRID_MODES[1:])
def test_bfloat16_dense_hybridized_equals_imperative(mode):
    x, w, b, g = random_case(onp.random.RandomState(SEED))
    imperative = run_dense(dense_with(w, b, 'bfloat16'), x, g)
    hybrid = run_dense(hybridize_mode(dense_with(w, b, 'bfloat16'), mode), x, g)
    for got, want in zip(hybrid, imperative):
        onp.testing.assert_array_equal(got, want)


@needs_bf16
@pytest.mark.parametrize('fused', [False, True])
def test_bfloat16_dense_gelu_rounds_the_product_only(fused):
    from gluon_attention.core import fused as fused_lib
    if fused and not fused_lib.available():
        pytest.skip('the fused kernel library is not built: ' + str(fused_lib.load_error()))
    x, w, b, _ = random_case(onp.random.RandomState(SEED))
    block = DenseGELU(w.shape[0], w.shape[1], kernels=Kernels(
        rowwise='fused' if fused else 'composed', matmul_dtype='bfloat16'))
    block.initialize()
    block.weight.set_data(mx.np.array(w))
    block.bias.set_data(mx.np.array(b))
    got = block(mx.np.array(x)).asnumpy()
    erf = onp.vectorize(math.erf)
    # fused: bias added in float32 after the bfloat16 product; composed: inside the product
    z = (to_bf16(to_bf16(x) @ to_bf16(w).T) + b if fused
         else to_bf16(to_bf16(x) @ to_bf16(w).T + to_bf16(b)))
    want = 0.5 * z * (1 + erf(z / onp.sqrt(2)))
    assert_bf16_close(got, want, 'gelu(product)')


@needs_bf16
def test_set_matmul_dtype_switches_a_hybridized_encoder_both_ways():
    rng = onp.random.RandomState(SEED)
    encoder = TransformerEncoder(2, 64, 128, 4, dropout=0.0, attention_dropout=0.0)
    encoder.initialize(mx.init.Normal(0.2))
    encoder.hybridize(static_alloc=True)
    data = mx.np.array(rng.normal(size=(3, 11, 64)).astype('float32'))
    lengths = mx.np.array([11, 7, 1], dtype='int32')
    first = encoder(data, lengths).asnumpy()
    assert matmul.set_matmul_dtype(encoder, 'bfloat16') == 2 * 6
    assert encoder.matmul_dtype == 'bfloat16'
    low = encoder(data, lengths).asnumpy()
    assert not onp.array_equal(low, first)       # the graph was rebuilt with bfloat16 products
    # LayerNorm outputs of unit scale; bfloat16 keeps about 3 significant digits per product
    assert float(abs(low - first)[:, :1].max()) < 0.1
    assert matmul.set_matmul_dtype(encoder, 'float32') == 12
    onp.testing.assert_array_equal(encoder(data, lengths).asnumpy(), first)


def test_unknown_matmul_dtype_is_refused():
    with pytest.raises(ValueError, match="matmul_dtype must be one of 'float32', 'bfloat16'"):
        matmul.Dense(4, in_units=3, matmul_dtype='float16')
    with pytest.raises(ValueError, match='matmul_dtype'):
        TransformerEncoder(1, 8, 16, 2, kernels=Kernels(matmul_dtype='bf16'))
    with pytest.raises(ValueError, match='matmul_dtype'):
        matmul.set_matmul_dtype(nn.HybridSequential(), 'int8')


def test_bfloat16_off_the_cpu_is_refused_before_any_work():
    with pytest.raises(ValueError, match='runs on CPUs only.*gpu'):
        matmul.require_matmul_dtype('bfloat16', [mx.gpu(0)])
    assert matmul.require_matmul_dtype('float32', [mx.gpu(0)]) == 'matmul dtype: float32'


@needs_bf16
def test_bfloat16_with_float16_parameters_is_a_type_error():
    encoder = TransformerEncoder(1, 8, 16, 2, dropout=0.0, attention_dropout=0.0,
                                 kernels=Kernels('composed', 'composed', 'bfloat16'))
    encoder.initialize()
    encoder.cast('float16')
    with pytest.raises(TypeError, match='keeps float32 parameters'):
        encoder(mx.np.ones((1, 3, 8), dtype='float16'), mx.np.array([3], dtype='int32'))


@needs_bf16
def test_require_reports_the_cpu():
    line = matmul.require_matmul_dtype('bfloat16', [mx.cpu()], ('avx2', 'avx512bf16'))
    assert line == 'matmul dtype: bfloat16 (AVX512-BF16 on this CPU: yes)'
    line = matmul.require_matmul_dtype('bfloat16', [mx.cpu()], ('avx2', 'avx512f'))
    assert line == 'matmul dtype: bfloat16 (AVX512-BF16 on this CPU: no (emulated by oneDNN: slower))'


@needs_bf16
@pytest.mark.parametrize('matmul_dtype', matmul.MATMUL_DTYPES)
@pytest.mark.parametrize('mode', HYBRID_MODES)
def test_parameter_gradients_accumulate_under_grad_req_add(matmul_dtype, mode):
    # the training engine sets grad_req='add' on every parameter: two backward passes must
    # give twice the gradient of one (amp_cast alone would leave it at zero)
    x, w, b, g = random_case(onp.random.RandomState(SEED))
    once = run_dense(hybridize_mode(dense_with(w, b, matmul_dtype), mode), x, g)
    block = hybridize_mode(dense_with(w, b, matmul_dtype), mode)
    for param in (block.weight, block.bias):
        param.grad_req = 'add'
        param.grad()[:] = 0
    run_dense(block, x, g)
    twice = run_dense(block, x, g)
    onp.testing.assert_allclose(twice[2], 2 * once[2], rtol=1e-6, atol=1e-6)
    onp.testing.assert_allclose(twice[3], 2 * once[3], rtol=1e-6, atol=1e-6)
    assert abs(once[2]).max() > 0.1
