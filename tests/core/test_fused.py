"""Tests of the fused attention kernel (gluon_attention.fused) against the float64 oracle.

The kernel is built by ``make venv``; without it these tests fail, or are skipped on a machine
without a C++ compiler (or with GA_NO_FUSED=1).
"""
import os
import pathlib
import shutil
import subprocess
import sys

import mxnet as mx
import numpy as onp
import pytest
from mxnet import autograd, np

import reference as ref
from conftest import HYBRID_MODES, hybridize_mode, num_gpus, tol
from gluon_attention import Kernels, MultiHeadAttentionCell
from gluon_attention.core import fused
from gluon_attention.models.encoder import BertEncoder, TransformerEncoder

# Without the kernel these tests fail, unless there is no C++ compiler to build it with (or
# GA_NO_FUSED=1): then they are skipped and the library runs on its composed operators.
_NO_COMPILER = not (os.environ.get('CXX') or shutil.which('g++') or shutil.which('c++'))
pytestmark = pytest.mark.skipif(
    (os.environ.get('GA_NO_FUSED') == '1' or _NO_COMPILER) and not fused.available(),
    reason='the fused kernel is not built and cannot be (no C++ compiler, or GA_NO_FUSED=1)')

LAYOUTS = ('NKT', 'NTK', 'TNK')
_SHAPE = {'NKT': lambda b, k, t, c: (b, k, t, c), 'NTK': lambda b, k, t, c: (b, t, k, c),
          'TNK': lambda b, k, t, c: (t, b, k, c)}
# (B, K, L_q, L_m, C_k, C_v): distinct sizes; the second crosses the 96-row query block and
# the 256-deep GEMM slab, the third has L_q = 1 (decoding).
SIZES = [(2, 3, 5, 7, 4, 6), (2, 2, 100, 300, 16, 24), (3, 2, 1, 33, 8, 8),
         (2, 3, 3, 20, 12, 5)]    # the last two: the unpacked path for <= 4 query rows


def make_inputs(rng, layout, b, k, lq, lm, c, cv, scale=1.0):
    q = rng.normal(size=_SHAPE[layout](b, k, lq, c)) * scale
    key = rng.normal(size=_SHAPE[layout](b, k, lm, c)) * scale
    v = rng.normal(size=_SHAPE[layout](b, k, lm, cv))
    return q, key, v


def lengths_for(kind, rng, b, lq, lm):
    if kind == 'none':
        return None
    if kind == 'batch':
        out = rng.randint(1, lm + 1, size=b)
        out[-1] = 0 if b > 2 else lm                # a sequence with nothing to attend
        return out
    out = rng.randint(0, lm + 1, size=(b, lq))      # per query row, zeros included
    out[0, 0] = 0
    return out


def run_fused(q, key, v, lengths, layout, head, **kwargs):
    arrays = [np.array(x, dtype='float32') for x in (q, key, v)]
    for x in arrays:
        x.attach_grad()
    vl = None if lengths is None else np.array(lengths, dtype='int32')
    with autograd.record():
        ctx = fused._fused_dot_attn(*arrays, vl, layout=layout, **kwargs)
        loss = (ctx * np.array(head, dtype='float32')).sum()
    loss.backward()
    return ctx.asnumpy(), [x.grad.asnumpy() for x in arrays]


def oracle(q, key, v, lengths, layout, head, **kwargs):
    lq, lm = (ref.to_nkt(x, layout).shape[2] for x in (q, key))
    b = ref.to_nkt(q, layout).shape[0]
    mask = None if lengths is None else ref.key_mask_from_valid_length(lengths, lq, lm)
    if mask is None:
        mask = onp.ones((b, lq, lm), dtype=bool)
    ctx = ref.multi_head_dot_attn(q, key, v, mask, layout=layout, **kwargs)[0]
    grads = ref.multi_head_dot_attn_vjp(q, key, v, head, mask=mask, layout=layout, **kwargs)
    return ctx, grads[:3]


@pytest.mark.parametrize('layout', LAYOUTS)
@pytest.mark.parametrize('size', SIZES)
@pytest.mark.parametrize('kind', ['none', 'batch', 'per_row'])
def test_fused_matches_oracle(rng, layout, size, kind):
    """Context and the gradients of query, key and value equal the float64 oracle."""
    b, k, lq, lm, c, cv = size
    q, key, v = make_inputs(rng, layout, *size)
    lengths = lengths_for(kind, rng, b, lq, lm)
    head = rng.normal(size=ref.merge_heads(onp.zeros((b, k, lq, cv)), layout).shape)
    ctx_ref, grads_ref = oracle(q, key, v, lengths, layout, head)
    ctx, grads = run_fused(q, key, v, lengths, layout, head)
    onp.testing.assert_allclose(ctx, ctx_ref, **tol())
    for name, got, exp in zip(('query', 'key', 'value'), grads, grads_ref):
        onp.testing.assert_allclose(got, exp, err_msg=name, **tol())


@pytest.mark.parametrize('scaled, units', [(False, None), (True, 9)])
def test_fused_scale_options(rng, scaled, units):
    size = (2, 2, 6, 5, 4, 3)
    q, key, v = make_inputs(rng, 'NKT', *size)
    head = rng.normal(size=(2, 6, 6))
    kwargs = dict(scaled=scaled, query_head_units=units)
    ctx_ref, grads_ref = oracle(q, key, v, [5, 3], 'NKT', head, **kwargs)
    ctx, grads = run_fused(q, key, v, [5, 3], 'NKT', head, **kwargs)
    onp.testing.assert_allclose(ctx, ctx_ref, **tol())
    for got, exp in zip(grads, grads_ref):
        onp.testing.assert_allclose(got, exp, **tol())


def test_fused_large_scores_are_stable(rng):
    """Scores in the thousands: the row maximum is subtracted before exp (no inf, no NaN)."""
    size = (1, 2, 8, 9, 4, 4)
    q, key, v = make_inputs(rng, 'NKT', *size, scale=40.0)
    head = rng.normal(size=(1, 8, 8))
    ctx_ref, grads_ref = oracle(q, key, v, [9], 'NKT', head)
    ctx, grads = run_fused(q, key, v, [9], 'NKT', head)
    assert onp.isfinite(ctx).all()
    onp.testing.assert_allclose(ctx, ctx_ref, rtol=1e-4, atol=1e-4)
    onp.testing.assert_allclose(grads[2], grads_ref[2], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize('layout', LAYOUTS)
@pytest.mark.parametrize('extra_rows', [0, 4])       # 4 rows: the unpacked path; 8: packed
def test_fused_nan_past_lengths_never_read(rng, layout, extra_rows):
    """NaN in keys and values past the lengths and in query rows of length 0 reaches no
    output and no gradient (the kernel never reads them)."""
    b, k, lq, lm, c, cv = 2, 2, 4 + extra_rows, 6, 4, 3
    q, key, v = (ref.to_nkt(x, layout).copy() for x in make_inputs(rng, layout, b, k, lq, lm,
                                                                   c, cv))
    lengths = onp.array([[4, 4, 0, 0] + [4] * extra_rows, [6, 2, 2, 0] + [2] * extra_rows])
    key[0, :, 4:], v[0, :, 4:] = onp.nan, onp.nan
    q[0, :, 2:4], q[1, :, 3] = onp.nan, onp.nan          # rows of length 0
    head = onp.ones(ref.merge_heads(onp.zeros((b, k, lq, cv)), layout).shape)
    ctx, grads = run_fused(*(ref.from_nkt(x, layout) for x in (q, key, v)), lengths, layout,
                           head)
    assert onp.isfinite(ctx).all() and all(onp.isfinite(g).all() for g in grads)
    ctx_nkt = ref.split_heads_grad(ctx, layout, k)              # (B, K, L_q, C_v)
    assert (ctx_nkt[0, :, 2:4] == 0).all() and (ctx_nkt[1, :, 3] == 0).all()
    gk, gv = (ref.to_nkt(g, layout) for g in grads[1:])
    assert (gk[0, :, 4:] == 0).all() and (gv[0, :, 4:] == 0).all()


def test_fused_lengths_are_clipped_and_zero_rows_are_zero(rng):
    q, key, v = make_inputs(rng, 'NKT', 2, 2, 3, 4, 4, 4)
    head = rng.normal(size=(2, 3, 8))
    ctx, grads = run_fused(q, key, v, onp.array([[0, 0, 0], [4, 4, 4]]), 'NKT', head)
    assert (ctx[0] == 0).all() and all((g[0] == 0).all() for g in grads)
    full, _ = run_fused(q, key, v, None, 'NKT', head)
    onp.testing.assert_allclose(ctx[1], full[1], rtol=0, atol=0)


@pytest.mark.parametrize('mode', HYBRID_MODES)
@pytest.mark.parametrize('layout', LAYOUTS)
def test_fused_cell_equals_composed_cell(rng, mode, layout):
    """MultiHeadAttentionCell(backend='fused') gives the composed cell's context and
    gradients, imperative and hybridized, and returns None for the weights."""
    size = (2, 3, 7, 7, 5, 5)
    q, key, v = make_inputs(rng, layout, *size)
    vl = np.array([7, 4], dtype='int32')
    results = []
    for fused_flag in (True, False):
        cell = hybridize_mode(MultiHeadAttentionCell(
            layout=layout, kernels=Kernels('fused' if fused_flag else 'composed'),
            normalized=True), mode)
        arrays = [np.array(x, dtype='float32') for x in (q, key, v)]
        for x in arrays:
            x.attach_grad()
        with autograd.record():
            ctx, extra = cell(*arrays, None, None, vl)
            loss = (ctx * ctx).sum()
        loss.backward()
        assert (extra is None) if fused_flag else extra.shape == (2, 3, 7, 7)
        results.append([ctx.asnumpy()] + [x.grad.asnumpy() for x in arrays])
    for got, exp in zip(*results):
        onp.testing.assert_allclose(got, exp, **tol())


def test_fused_cell_export_round_trip_in_fresh_process(rng, tmp_path):
    """An exported graph holding the fused operator reloads after ``import gluon_attention``
    in another process and gives the same context."""
    q, key, v = make_inputs(rng, 'NTK', 2, 3, 6, 6, 4, 4)
    vl = onp.array([6, 2], dtype='int32')
    cell = MultiHeadAttentionCell(layout='NTK', kernels=Kernels('fused'))
    cell.hybridize(static_alloc=True, static_shape=True)
    inputs = [np.array(x, dtype='float32') for x in (q, key, v)]
    ctx = cell(*inputs, None, None, np.array(vl))[0].asnumpy()
    cell.export(str(tmp_path / 'cell'))
    onp.savez(tmp_path / 'in.npz', q=q.astype('float32'), k=key.astype('float32'),
              v=v.astype('float32'), vl=vl)
    script = (
        "import sys, numpy as onp, mxnet as mx\n"
        "import gluon_attention\n"
        "d = onp.load(sys.argv[1] + '/in.npz')\n"
        "mx.npx.set_np()\n"
        "blk = mx.gluon.SymbolBlock.imports(sys.argv[1] + '/cell-symbol.json',\n"
        "    ['data0', 'data1', 'data2', 'data3'], sys.argv[1] + '/cell-0000.params')\n"
        "out = blk(*[mx.np.array(d[n]) for n in ('q', 'k', 'v')], mx.np.array(d['vl']))\n"
        "onp.save(sys.argv[1] + '/out.npy', (out[0] if isinstance(out, (list, tuple))\n"
        "         else out).asnumpy())\n")
    subprocess.run([sys.executable, '-c', script, str(tmp_path)], check=True,
                   capture_output=True, timeout=300)
    onp.testing.assert_allclose(onp.load(tmp_path / 'out.npy'), ctx, rtol=0, atol=0)


def test_fused_errors(rng):
    q, key, v = (np.array(x, dtype='float32') for x in make_inputs(rng, 'NKT', 2, 2, 3, 4, 4, 4))
    with pytest.raises(TypeError, match='must share one float dtype'):
        fused._fused_dot_attn(q.astype('float16'), key, v)
    with pytest.raises(TypeError, match='query must be float32'):
        fused._fused_dot_attn(q.astype('float16'), key.astype('float16'), v.astype('float16'))
    with pytest.raises(ValueError, match=r'valid_length must have shape \(B,\) or \(B, L_q\)'):
        fused._fused_dot_attn(q, key, v, np.array([1, 2, 3]))
    with pytest.raises(ValueError, match=r'valid_length must lie in \[0, 4\]'):
        fused._fused_dot_attn(q, key, v, np.array([5, 1]))
    with pytest.raises(ValueError, match='share B and K'):
        fused._fused_dot_attn(q, key[:1], v[:1])
    with pytest.raises(TypeError, match='must be an mx.np array'):
        fused._fused_dot_attn(q.as_nd_ndarray(), key, v)
    with pytest.raises(ValueError, match='query_head_units must be a positive integer'):
        fused._fused_dot_attn(q, key, v, query_head_units=0)
    with pytest.raises(TypeError, match='scaled must be a bool'):
        fused._fused_dot_attn(q, key, v, scaled='no')
    with pytest.raises(ValueError, match=r'needs C_k > 0'):
        fused._fused_dot_attn(q[..., :0], key[..., :0], v)
    with pytest.raises(ValueError, match="attention='fused' has no attention dropout: use "
                                         "attention='composed'"):
        MultiHeadAttentionCell(kernels=Kernels('fused'), attention_dropout=0.1)
    cell = MultiHeadAttentionCell(layout='NKT', kernels=Kernels('fused'))
    with pytest.raises(ValueError, match="backend 'fused' cannot take a mask .* use "
                                         "backend='composed'"):
        cell(q, key, v, np.ones((2, 3, 4)))


def test_resolve_auto():
    assert Kernels().resolve(mx.cpu(), 0.0).attention == 'fused'
    assert Kernels().resolve(mx.cpu(), 0.1).attention == 'composed'
    assert Kernels().resolve([mx.cpu(), mx.gpu(0)], 0.0).attention == 'composed'
    assert Kernels().resolve(mx.cpu(), 0.0, weights=True).attention == 'composed'


def test_fused_encoder_equals_composed_encoder(rng):
    """The same weights through the fused and the composed self-attention: equal hidden
    states and equal parameter gradients (padding included)."""
    data = np.array(rng.normal(size=(3, 9, 16)), dtype='float32')
    vl = np.array([9, 4, 0], dtype='int32')
    results = []
    for flag in (True, False):
        enc = TransformerEncoder(2, 16, 24, 4, dropout=0.0, attention_dropout=0.0,
                                 kernels=Kernels('fused' if flag else 'composed'),
                                 prefix='enc_')
        assert enc.fused_attention is flag
        mx.random.seed(3)                                 # the same weights for both
        enc.initialize(mx.init.Normal(0.5))
        enc.hybridize(static_alloc=True)
        with autograd.record():
            out = enc(data, vl)
            loss = (out[:2, :4] ** 2).sum()
        loss.backward()
        grads = {n: p.grad().asnumpy().copy() for n, p in enc.collect_params().items()}
        results.append((out.asnumpy(), grads))
    onp.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-5, atol=1e-5)
    for name, grad in results[0][1].items():
        onp.testing.assert_allclose(grad, results[1][1][name], rtol=1e-4, atol=1e-5,
                                    err_msg=name)


def test_pretrained_fused_matches_transformers_fixture():
    """all-MiniLM-L6-v2 through the fused kernel still matches transformers within 1e-4."""
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / 'models'))
    import test_encoder as te  # pylint: disable=import-outside-toplevel  (its fixture and helpers)
    data = onp.load(te.FIXTURE)
    model = BertEncoder.from_pretrained(attention_dropout=0.0)
    assert model.encoder.fused_attention
    model.hybridize(static_alloc=True)
    hidden = te.run(model, data['token_ids'], data['token_types'], data['valid_length'])
    te.assert_close_at_valid(hidden, data['hidden'], data['valid_length'], te.PARITY_ATOL)


@pytest.mark.skipif(num_gpus() == 0, reason='needs a GPU')
def test_encoders_fall_back_to_composed_attention_on_gpu(rng):
    """The kernel is CPU-only: 'auto' resolves to False for a GPU context, and an encoder built
    with it refuses GPU arrays (naming the construction that serves them)."""
    gpu = mx.gpu(0)
    assert BertEncoder.from_pretrained(ctx=gpu, attention_dropout=0.0).encoder.fused_attention \
        is False
    enc = TransformerEncoder(1, 8, 12, 2, dropout=0.0, attention_dropout=0.0,
                             kernels=Kernels('fused'))
    enc.initialize(ctx=gpu)
    enc.hybridize()
    with pytest.raises(ValueError, match=r"runs on CPU only: build it with "
                                         r"Kernels\(attention='composed'"):
        enc(np.array(rng.normal(size=(2, 5, 8)), ctx=gpu), np.array([5, 2], ctx=gpu))
    assert enc.fused_attention


def test_build_without_a_compiler_is_a_clear_error_and_leaves_nothing(monkeypatch):
    """A compiler that cannot run: FileNotFoundError naming it, no temporary file left behind,
    the built library untouched; ``--optional`` turns it into a warning (exit status 0)."""
    from gluon_attention.__main__ import main  # pylint: disable=import-outside-toplevel
    before = sorted(p.name for p in fused.library_path().parent.iterdir())
    with pytest.raises(FileNotFoundError, match='cannot run the C[+][+] compiler'):
        fused.build(compiler='/nonexistent/g++', force=True, quiet=True)
    monkeypatch.setenv('CXX', '/nonexistent/g++')
    assert main(['fused-build', '--force', '--optional']) == 0
    assert main(['fused-build', '--force']) == 1
    assert sorted(p.name for p in fused.library_path().parent.iterdir()) == before
    assert fused.available()
