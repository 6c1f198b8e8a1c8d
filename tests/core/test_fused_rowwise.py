"""Fused residual + LayerNorm and bias + GELU (gluon_attention.core.fused_rowwise) against the
float64 oracle, forward and gradients, on both instruction-set paths; the blocks hybridized
against imperative and against their composed form; the encoder with and without them."""
import json
import os
import subprocess
import sys

import mxnet as mx
import numpy as onp
import pytest
from mxnet import autograd

import reference as ref
from conftest import HYBRID_MODES, HYBRID_TOL, hybridize_mode, tol
from gluon_attention.core import fused
from gluon_attention.core.kernels import Kernels
from gluon_attention.core.fused_rowwise import (DenseGELU, ResidualLayerNorm, add_layer_norm,
                                                bias_gelu)
from gluon_attention.models.encoder import TransformerEncoder
from gluon_attention.export import block as export

pytestmark = pytest.mark.skipif(not fused.available(), reason='fused kernel library not built')

# (rows shape, D): a whole number of AVX-512 vectors, a partial last vector, D < 8
SHAPES = [((4, 40), 384), ((3, 7), 37), ((50,), 5)]


def inputs(rng, shape, d, scale=1.0):
    x, res, head = (rng.normal(size=shape + (d,)) * scale for _ in range(3))
    gamma, beta = rng.normal(size=d), rng.normal(size=d)
    return [a.astype('float32') for a in (x, res, gamma, beta, head)]


def run_layer_norm(x, res, gamma, beta, head, eps):
    arrays = [mx.np.array(a) for a in (x, gamma, beta) + ((res,) if res is not None else ())]
    for a in arrays:
        a.attach_grad()
    with autograd.record():
        out = add_layer_norm(*arrays[:3], residual=arrays[3] if res is not None else None,
                             eps=eps)
        (out * mx.np.array(head)).sum().backward()
    return [out.asnumpy()] + [a.grad.asnumpy() for a in arrays]


def run_gelu(x, bias, head):
    arrays = [mx.np.array(x), mx.np.array(bias)]
    for a in arrays:
        a.attach_grad()
    with autograd.record():
        out = bias_gelu(*arrays)
        (out * mx.np.array(head)).sum().backward()
    return [out.asnumpy()] + [a.grad.asnumpy() for a in arrays]


def oracle_layer_norm(x, res, gamma, beta, head, eps):
    summed = ref.f64(x) + (0.0 if res is None else ref.f64(res))
    dx, dgamma, dbeta = ref.layer_norm_vjp(summed, ref.f64(gamma), ref.f64(head), eps)
    return [ref.layer_norm(summed, gamma, beta, eps), dx, dgamma, dbeta] + \
        ([dx] if res is not None else [])


def oracle_gelu(x, bias, head):
    z = ref.f64(x) + ref.f64(bias)
    dz = ref.gelu_vjp(z, ref.f64(head))
    return [ref.gelu(z), dz, dz.reshape(-1, z.shape[-1]).sum(0)]


def assert_all_close(got, want, what):
    for i, (g, w) in enumerate(zip(got, want)):
        onp.testing.assert_allclose(g, w, err_msg='{} output {}'.format(what, i), **tol())


def test_oracle_gradients_match_central_differences():
    rng = onp.random.RandomState(3)
    x, _, gamma, beta, head = (a.astype('float64') for a in inputs(rng, (2,), 5))
    dx, dgamma, _ = ref.layer_norm_vjp(x, gamma, head, 1e-3)
    onp.testing.assert_allclose(
        dx, ref.numeric_grad(lambda v: ref.layer_norm(v, gamma, beta, 1e-3), x, head), atol=1e-7)
    onp.testing.assert_allclose(
        dgamma, ref.numeric_grad(lambda g: ref.layer_norm(x, g, beta, 1e-3), gamma, head),
        atol=1e-7)
    z = x * 3
    onp.testing.assert_allclose(ref.gelu_vjp(z, head), ref.numeric_grad(ref.gelu, z, head),
                                atol=1e-7)


@pytest.mark.parametrize('threads', ['1', '3'])
@pytest.mark.parametrize('with_residual', [True, False])
@pytest.mark.parametrize('shape,d', SHAPES)
def test_add_layer_norm_matches_oracle(monkeypatch, shape, d, with_residual, threads):
    """Forward and the gradients of data, gamma, beta (and residual); with 3 worker threads
    the rows go in chunks over the threads and the parameter gradients are summed over the
    chunks."""
    monkeypatch.setenv('OMP_NUM_THREADS', threads)
    x, res, gamma, beta, head = inputs(onp.random.RandomState(1), shape, d)
    res = res if with_residual else None
    got = run_layer_norm(x, res, gamma, beta, head, 1e-5)
    assert_all_close(got, oracle_layer_norm(x, res, gamma, beta, head, 1e-5), 'layer norm')


def test_add_layer_norm_of_large_offsets_and_tiny_eps_matches_oracle():
    """Rows far from zero (mean 1e3) with BERT's eps 1e-12: the two-pass variance keeps it."""
    x, res, gamma, beta, head = inputs(onp.random.RandomState(2), (3, 5), 48)
    x = x + onp.float32(1e3)
    got = run_layer_norm(x, res, gamma, beta, head, 1e-12)
    want = oracle_layer_norm(x, res, gamma, beta, head, 1e-12)
    for i, (g, w) in enumerate(zip(got, want)):
        onp.testing.assert_allclose(g, w, rtol=1e-3, atol=2e-3, err_msg='output {}'.format(i))


@pytest.mark.parametrize('threads', ['1', '3'])
@pytest.mark.parametrize('shape,d', SHAPES)
def test_bias_gelu_matches_oracle(monkeypatch, shape, d, threads):
    """Inputs up to about +-12 (both tails of the normal CDF, and 0)."""
    monkeypatch.setenv('OMP_NUM_THREADS', threads)
    x, _, bias, _, head = inputs(onp.random.RandomState(4), shape, d, scale=4.0)
    x.flat[:3] = [0.0, -12.0, 12.0]
    assert_all_close(run_gelu(x, bias, head), oracle_gelu(x, bias, head), 'gelu')


WORKER = r'''
import json, sys
import numpy as onp
import mxnet as mx
mx.npx.set_np()
sys.path[:0] = sys.argv[2:]
import test_fused_rowwise as t
from gluon_attention.core import fused
from gluon_attention.core.kernels import Kernels
x, res, gamma, beta, head = t.inputs(onp.random.RandomState(5), (6,), 37)
got = t.run_layer_norm(x, res, gamma, beta, head, 1e-5) + t.run_gelu(x * 4, gamma, head)
onp.savez(sys.argv[1], *got)
print(json.dumps({'isa': fused.isa()}))
'''


def run_avx2_worker(worker, out_path):
    """Runs ``worker`` (python -c: argv[1] = out_path, then the tests' folders for sys.path)
    with GA_FUSED_ISA=avx2 (the choice is made once per process: a subprocess); returns the
    JSON of its last printed line."""
    env = dict(os.environ, GA_FUSED_ISA='avx2')
    here = os.path.dirname(os.path.abspath(__file__))
    done = subprocess.run([sys.executable, '-c', worker, str(out_path), here,
                           os.path.dirname(here)], env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_avx2_path_matches_oracle(tmp_path):
    """GA_FUSED_ISA=avx2."""
    assert run_avx2_worker(WORKER, tmp_path / 'out.npz')['isa'] == 'avx2'
    got = onp.load(tmp_path / 'out.npz')
    got = [got['arr_%d' % i] for i in range(len(got.files))]
    x, res, gamma, beta, head = inputs(onp.random.RandomState(5), (6,), 37)
    want = oracle_layer_norm(x, res, gamma, beta, head, 1e-5) + oracle_gelu(x * 4, gamma, head)
    assert_all_close(got, want, 'avx2')


def run_block(block, mode, args):
    block = hybridize_mode(block, mode)
    arrays = [mx.np.array(a) for a in args]
    for a in arrays:
        a.attach_grad()
    with autograd.record():
        out = block(*arrays)
        (out * out).sum().backward()
    params = sorted(block.collect_params().items())
    return [out.asnumpy()] + [a.grad.asnumpy() for a in arrays] + \
        [p.grad().asnumpy() for _, p in params]


def _rowwise(fused_flag):
    return Kernels(rowwise='fused' if fused_flag else 'composed')


@pytest.mark.parametrize('mode', HYBRID_MODES[1:])
def test_blocks_hybridized_equal_imperative_and_composed(mode):
    rng = onp.random.RandomState(6)
    x, res = (rng.normal(size=(2, 3, 24)).astype('float32') for _ in range(2))
    for make, args in ((lambda f: ResidualLayerNorm(1e-12, 24, kernels=_rowwise(f)), (x, res)),
                       (lambda f: DenseGELU(16, 24, kernels=_rowwise(f)), (x,))):
        blocks = [make(f) for f in (True, True, False)]
        for block in blocks:
            block.initialize(mx.init.Normal(0.5))
            for mine, first in zip(block.collect_params().values(),
                                   blocks[0].collect_params().values()):
                mine.set_data(first.data())
        imperative = run_block(blocks[0], 'imperative', args)
        assert_all_close(run_block(blocks[1], mode, args), imperative, 'hybridized')
        assert_all_close(run_block(blocks[2], mode, args), imperative, 'composed')


@pytest.mark.parametrize('mode', HYBRID_MODES[:2])
def test_parameter_gradients_accumulate_with_grad_req_add(mode):
    """Two backward passes into grad_req='add' parameters give twice one pass (the custom
    operators overwrite their outputs; the parameters' gradients are added by MXNet)."""
    x = mx.np.array(onp.random.RandomState(10).normal(size=(3, 12)).astype('float32'))
    for block in (ResidualLayerNorm(1e-5, 12, kernels=_rowwise(True)),
                  DenseGELU(5, 12, kernels=_rowwise(True))):
        block.initialize(mx.init.Normal(0.5))
        hybridize_mode(block, mode)
        params = list(block.collect_params().values())
        grads = []
        for passes, req in ((1, 'write'), (2, 'add')):
            for p in params:
                p.grad_req = req
            for _ in range(passes):
                with autograd.record():
                    loss = (block(x) ** 2).sum()
                loss.backward()
            grads.append([p.grad().asnumpy().copy() for p in params])
        for one, two in zip(*grads):
            onp.testing.assert_allclose(two, 2 * one, **tol())


def test_encoder_fused_rowwise_equals_composed_and_keeps_parameter_names():
    """Hybridized TransformerEncoders built with the fused operators and without, on the same
    weights: equal outputs and parameter gradients, the same parameter names."""
    rng = onp.random.RandomState(8)
    data = mx.np.array(rng.normal(size=(3, 5, 16)).astype('float32'))
    length = mx.np.array([5, 2, 4], dtype='int32')
    names, results = None, []
    for flag in (True, False):
        enc = TransformerEncoder(2, 16, 24, 4, dropout=0.0, attention_dropout=0.0,
                                 kernels=_rowwise(flag), prefix='enc_')
        assert enc.fused_rowwise is flag
        mx.random.seed(8)                                 # the same weights for both
        enc.initialize(mx.init.Normal(0.3))
        enc.hybridize()
        with autograd.record():
            out = enc(data, length)
            (out * out).sum().backward()
        params = enc.collect_params()
        names = names or sorted(params)
        assert sorted(params) == names
        results.append([out.asnumpy()] + [params[k].grad().asnumpy() for k in names])
    assert any('layernorm' in k for k in names) and any('dense' in k for k in names)
    for i, (a, b) in enumerate(zip(*results)):
        onp.testing.assert_allclose(a, b, rtol=1e-4, atol=HYBRID_TOL * 10,
                                    err_msg=names[i - 1] if i else 'output')


def test_export_notes_the_library_and_reloads(tmp_path):
    rng = onp.random.RandomState(9)
    block = ResidualLayerNorm(1e-5, 6, kernels=_rowwise(True))
    block.initialize(mx.init.Normal(1.0))
    batches = [tuple(rng.normal(size=(b, 4, 6)) for _ in range(2)) for b in (2, 3)]
    _, report = export.export_and_check(block, str(tmp_path / 'ln'), batches, ['x', 'res'],
                                        ['float32'] * 2)
    spec = json.loads((tmp_path / 'ln-inputs.json').read_text())
    assert list(spec['custom_operators']) == ['ga_add_layer_norm']
    assert report['max_abs_diff'] < 1e-6


def test_bad_shapes_are_refused():
    x = mx.np.zeros((2, 4))
    with pytest.raises(ValueError, match=r'gamma must have shape \(4,\). Received: '
                                         r'gamma.shape=\(3,\)'):
        add_layer_norm(x, mx.np.ones(3), mx.np.zeros(4))
    with pytest.raises(ValueError, match=r'residual must have shape \(2, 4\)'):
        add_layer_norm(x, mx.np.ones(4), mx.np.zeros(4), residual=mx.np.zeros((4, 2)))
    with pytest.raises(TypeError, match='bias must be a float32 mx.np array on a CPU'):
        bias_gelu(x, mx.np.zeros(4, dtype='float64'))
