"""The rows of ../shared/spec/CASES.md with components MS, AA, DPA, MHA, EXP.

One test (or more) per row; each docstring starts with the row id. Deferred: C13, C14 (ONNX),
the GPU parts of C03 and C15 (skipped without a GPU).
"""
import os
import subprocess
import sys
import textwrap

import mxnet as mx
import numpy as onp
import pytest
from mxnet import np

import reference as ref
from conftest import HYBRID_TOL, hybridize_mode, requires_gpu, tol
from gluon_attention.core import cells, masking
from gluon_attention.core import functional as fn
from test_cells import export_and_import, flat

LAYOUTS = ('NKT', 'NTK', 'TNK')


def _rand(shape, dtype='float32'):
    return np.array(onp.random.normal(size=shape), dtype=dtype)


def _int(values, dtype='int32'):
    return np.array(onp.asarray(values), dtype=dtype)


def _forward_backward(block, q, k, v, *rest):
    q, k, v = q.copy(), k.copy(), v.copy()
    for x in (q, k, v):
        x.attach_grad()
    with mx.autograd.record():
        out = block(q, k, v, *rest)
        ctx = out[0]
    ctx.backward()
    return [a for a in flat(out)], [x.grad.asnumpy() for x in (q, k, v)]


def _all_finite(arrays):
    return all(onp.isfinite(a).all() for a in arrays)


@pytest.mark.parametrize('mode', ['imperative', 'hybridize', 'static'])
def test_c01_fully_masked_rows_dpa_and_mha(mode):
    """C01: q (2,3,8), k=v (2,4,8); mem vl [4,0], or query vl [3,1] with mem vl [4,4].

    No NaN/Inf in outputs or gradients; fully masked rows give zero weights and zero context;
    imperative equals hybridized.
    """
    q, kv = _rand((2, 3, 8)), _rand((2, 4, 8))
    # mem valid_length [4, 0] -> (B,) lengths; query [3, 1] with mem [4, 4] -> (B, L_q) lengths
    for lengths, empty in [([4, 0], (1, slice(None))), ([[4, 4, 4], [4, 0, 0]], (1, slice(1, 3)))]:
        results = []
        for m in ('imperative', mode):
            block = hybridize_mode(cells.DotProductAttention(), m)
            results.append(_forward_backward(block, q, kv, kv, _int(lengths)))
        (outs, grads), (outs_h, grads_h) = results
        assert _all_finite(outs + grads)
        ctx, weights = outs
        assert onp.all(weights[empty] == 0) and onp.all(ctx[empty] == 0)
        for a, b in zip(outs + grads, outs_h + grads_h):
            onp.testing.assert_allclose(a, b, rtol=HYBRID_TOL, atol=HYBRID_TOL)
    # MHA (NTK) with the library's masks
    qh, kvh = _rand((2, 3, 2, 4)), _rand((2, 4, 2, 4))
    masks = [masking.gen_mem_attn_mask(kv, _int([4, 0]), q),
             masking.gen_mem_attn_mask(kv, _int([4, 4]), q, _int([3, 1]))]
    for mask, (batch, rows) in zip(masks, [(1, slice(None)), (1, slice(1, 3))]):
        results = []
        for m in ('imperative', mode):
            cell = hybridize_mode(cells.MultiHeadAttentionCell(8, 2, layout='NTK'), m)
            results.append(_forward_backward(cell, qh, kvh, kvh, mask))
        (outs, grads), (outs_h, grads_h) = results
        assert _all_finite(outs + grads)
        ctx, _, weights = outs
        assert onp.all(weights[batch, :, rows] == 0)
        assert onp.all(ctx[batch, rows] == 0)
        for a, b in zip(outs + grads, outs_h + grads_h):
            onp.testing.assert_allclose(a, b, rtol=HYBRID_TOL, atol=HYBRID_TOL)


def test_c02_valid_length_zero_gives_zero_rows():
    """C02: masked_softmax on (2,2,4) with valid_length int32 [0,3]: sample 0 rows all 0,
    sample 1 rows sum to 1 with the last column exactly 0; the attention output for sample 0 is
    the zero vector (DPA and AA); gradients finite."""
    scores = _rand((2, 2, 4))
    mask = np.expand_dims(masking.valid_length_to_mask(scores, _int([0, 3]), axis=2), 1)
    scores.attach_grad()
    with mx.autograd.record():
        w = fn.masked_softmax(scores, mask)
    w.backward()
    w = w.asnumpy()
    assert onp.all(w[0] == 0)
    onp.testing.assert_allclose(w[1].sum(-1), 1.0, rtol=1e-6)
    assert onp.all(w[1, :, 3] == 0)
    assert onp.isfinite(scores.grad.asnumpy()).all()
    q, k, v = _rand((2, 2, 3)), _rand((2, 4, 3)), _rand((2, 4, 5))
    additive = cells.AdditiveAttention(4)
    additive.initialize()
    for block in (cells.DotProductAttention(), additive):
        outs, grads = _forward_backward(block, q, k, v, _int([0, 3]))
        assert onp.all(outs[0][0] == 0) and onp.all(outs[1][0] == 0)
        assert _all_finite(outs + grads)


def test_c03_float16_masked_softmax_cpu():
    """C03 (CPU part): float16 scores (2,4,6), padding mask from lengths [6,2] plus one fully
    masked row: no error, no NaN, masked weights exactly 0, output finite."""
    scores = np.array(onp.random.normal(scale=100, size=(2, 4, 6)), dtype='float16')
    mask = onp.broadcast_to(ref.valid_length_to_mask([6, 2], 6)[:, None], (2, 4, 6)).copy()
    mask[1, 3] = False
    out = fn.masked_softmax(scores, np.array(mask, dtype=bool)).asnumpy()
    assert out.dtype == onp.float16 and onp.isfinite(out).all()
    assert onp.all(out[~mask] == 0) and onp.all(out[1, 3] == 0)
    onp.testing.assert_allclose(out, ref.masked_softmax(scores, mask), **tol('float16'))


@requires_gpu
def test_c03_float16_masked_softmax_gpu():
    """C03 (GPU part): the same on GPU, equal to the CPU result."""
    scores = onp.random.normal(scale=100, size=(2, 4, 6)).astype('float16')
    mask = onp.broadcast_to(ref.valid_length_to_mask([6, 2], 6)[:, None], (2, 4, 6)).copy()
    mask[1, 3] = False
    out = fn.masked_softmax(np.array(scores, ctx=mx.gpu()), np.array(mask, ctx=mx.gpu()))
    assert onp.isfinite(out.asnumpy()).all()
    onp.testing.assert_allclose(out.asnumpy(), ref.masked_softmax(scores, mask), **tol('float16'))


def test_c05_mask_shapes_in_multi_head_cell():
    """C05: MHA (NTK), token ids [[5,7,0,0]] -> valid_length [2]. A (B,T,1) mask broadcasts
    over keys (it masks query rows), a (B,1,T) mask masks keys, the library mask masks keys;
    padded keys get weight 0; no NaN."""
    tokens = onp.array([[5, 7, 0, 0]])
    vl = _int((tokens != 0).sum(1))
    data = _rand((1, 4, 6))
    q, k, v = _rand((1, 4, 2, 3)), _rand((1, 4, 2, 3)), _rand((1, 4, 2, 3))
    cell = cells.MultiHeadAttentionCell(6, 2, layout='NTK')
    keep = ref.valid_length_to_mask(onp.array([2]), 4)                    # (1, 4)
    library = masking.gen_mem_attn_mask(data, vl, data)                     # (1, 4, 4)
    for mask in (keep[:, :, None], keep[:, None, :], library):
        mask_np = mask.asnumpy() if hasattr(mask, 'asnumpy') else mask
        ctx, (_, weights) = cell(q, k, v, np.array(mask_np, dtype=bool))
        expected = ref.multi_head_dot_attn(q, k, v, mask_np, layout='NTK')
        assert onp.isfinite(ctx.asnumpy()).all() and onp.isfinite(weights.asnumpy()).all()
        onp.testing.assert_allclose(ctx.asnumpy(), expected[0], **tol())
        onp.testing.assert_allclose(weights.asnumpy(), expected[2], **tol())
        if mask_np.shape[1] == 4 and mask_np.shape[2] == 4 or mask_np.shape[1] == 1:
            assert onp.all(weights.asnumpy()[..., 2:] == 0)


@pytest.mark.parametrize('mask_shape', [(2, 1, 1, 5), (2, 5, 3)])
def test_c06_incompatible_mask_rejected(mask_shape):
    """C06: scores (2,3,5) with mask (2,1,1,5) or (2,5,3): a ValueError naming both shapes."""
    scores = _rand((2, 3, 5))
    with pytest.raises(ValueError) as err:
        fn.masked_softmax(scores, np.ones(mask_shape, dtype=bool))
    message = str(err.value)
    assert 'Received:' in message
    assert '(2, 3, 5)' in message and str(mask_shape) in message, message


def test_c06_output_shape_equals_scores_shape():
    """C06: every accepted mask gives an output shaped like the scores."""
    scores = _rand((2, 3, 5))
    for shape in [(2, 3, 5), (2, 1, 5), (1, 3, 1), (1, 1, 1)]:
        assert fn.masked_softmax(scores, np.ones(shape, dtype=bool)).shape == (2, 3, 5)


def test_c07_mask_dtypes_agree_and_non_binary_rejected():
    """C07: keep-pattern [1,1,0,0] as bool, float32 and int32 gives identical weights with 0 at
    positions 2-3 (masked_softmax and DPA-style use); 0.5 or -inf masks are rejected."""
    scores = _rand((2, 3, 4))
    pattern = onp.broadcast_to(onp.array([1, 1, 0, 0]), (2, 3, 4))
    outs = [fn.masked_softmax(scores, np.array(pattern, dtype=dt)).asnumpy()
            for dt in (bool, 'float32', 'int32')]
    for out in outs[1:]:
        onp.testing.assert_array_equal(out, outs[0])
    assert onp.all(outs[0][..., 2:] == 0)
    for bad in (onp.where(pattern, 1.0, 0.5), onp.where(pattern, 0.0, -onp.inf)):
        with pytest.raises(ValueError, match='Received:'):
            fn.masked_softmax(scores, np.array(bad, dtype='float32'))


def _c08_blocks():
    additive = cells.AdditiveAttention(4)
    additive.initialize()
    mha = cells.MultiHeadAttention(8, 2)
    mha.initialize()
    return [cells.DotProductAttention(), additive, mha]


@pytest.mark.parametrize('mode', ['imperative', 'hybridize'])
def test_c08_valid_length_dtypes(mode):
    """C08: data (2,5,8), valid_length [3,5] as int32, int64, float32 (and float16 data with
    int32 lengths): all accepted, identical outputs; masked_softmax via the mask builder too."""
    q = _rand((2, 5, 8))
    for block in _c08_blocks():
        outs = []
        for dt in ('int32', 'int64', 'float32'):
            fresh = block
            hybridize_mode(fresh, mode) if dt == 'int32' else None
            outs.append(flat(fresh(q, q, q, _int([3, 5], dt))))
        for out in outs[1:]:
            for a, b in zip(outs[0], out):
                onp.testing.assert_array_equal(a, b)
        half = flat(block(q.astype('float16'), q.astype('float16'), q.astype('float16'),
                          _int([3, 5])))
        for a, b in zip(outs[0], half):
            assert b.dtype == onp.float16
            onp.testing.assert_allclose(b, a, **tol('float16'))
    scores = _rand((2, 5, 5))
    for dt in ('int32', 'int64', 'float32'):
        mask = np.expand_dims(masking.valid_length_to_mask(scores, _int([3, 5], dt), axis=2), 1)
        onp.testing.assert_allclose(fn.masked_softmax(scores, mask).asnumpy(),
                                    ref.masked_softmax(scores, ref.valid_length_to_mask(
                                        [3, 5], 5)[:, None]), **tol())


def test_c09_float_lengths():
    """C09: data [[1,2],[3,4]], length float32 [1,2]: no crash; [[1,0],[0.269,0.731]]."""
    data = np.array([[1.0, 2.0], [3.0, 4.0]])
    for dt in ('float32', 'int32'):
        mask = masking.valid_length_to_mask(data, _int([1, 2], dt), axis=1)
        out = fn.masked_softmax(data, mask).asnumpy()
        onp.testing.assert_allclose(out, [[1.0, 0.0], [0.26894142, 0.73105858]], rtol=1e-6)


@mx.util.use_np
class _SoftmaxAxis1(mx.gluon.HybridBlock):
    def hybrid_forward(self, F, score, mask):
        return fn.masked_softmax(score, mask, axis=1)


@pytest.mark.parametrize('mode', ['hybridize', 'static'])
def test_c10_hybrid_parity_axis_and_layouts(mode):
    """C10: masked_softmax(axis=1) on (2,4,3) and MHA with TNK/NKT/NTK: hybridized equals
    imperative to 1e-6, forward and backward."""
    score = _rand((2, 4, 3))
    mask = np.array(onp.random.rand(2, 4, 3) > 0.3)
    results = []
    for m in ('imperative', mode):
        x = score.copy()
        x.attach_grad()
        block = hybridize_mode(_SoftmaxAxis1(), m)
        with mx.autograd.record():
            out = block(x, mask)
        out.backward(np.array(onp.linspace(-1, 1, 24).reshape(2, 4, 3), dtype='float32'))
        results.append([out.asnumpy(), x.grad.asnumpy()])
    for a, b in zip(*results):
        onp.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    for layout in LAYOUTS:
        shape = {'NKT': (2, 3, 4, 5), 'NTK': (2, 4, 3, 5), 'TNK': (4, 2, 3, 5)}[layout]
        q, k, v = _rand(shape), _rand(shape), _rand(shape)
        mask = np.array(onp.random.rand(2, 4, 4) > 0.3)
        results = []
        for m in ('imperative', mode):
            cell = hybridize_mode(cells.MultiHeadAttentionCell(15, 3, layout=layout), m)
            outs, grads = _forward_backward(cell, q, k, v, mask)
            results.append(outs + grads)
        for a, b in zip(*results):
            onp.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6, err_msg=layout)


@pytest.mark.parametrize('kind', ['DotProductAttention', 'AdditiveAttention',
                                  'MultiHeadAttention'])
def test_c11_export_mask_from_valid_length_any_shape(kind, tmp_path):
    """C11: a hybridized block building its mask from valid_length, run at T=8, B=2, exported
    and imported, runs at T=12, T=5 and B=3 and matches the un-hybridized block."""
    block = {'DotProductAttention': lambda: cells.DotProductAttention(),
             'AdditiveAttention': lambda: cells.AdditiveAttention(4),
             'MultiHeadAttention': lambda: cells.MultiHeadAttention(6, 2)}[kind]()
    block.initialize()

    def args(b, t):
        return (_rand((b, t, 6)), _rand((b, t, 6)), _rand((b, t, 6)),
                _int(onp.random.randint(0, t + 1, size=b)))

    first = args(2, 8)
    later = [args(2, 12), args(2, 5), args(3, 8)]
    block(*first)
    expected = [flat(block(*a)) for a in later]
    block.hybridize()
    block(*first)
    loaded = export_and_import(block, first, tmp_path, kind)
    for a, exp in zip(later, expected):
        for got, e in zip(flat(loaded(*a)), exp):
            onp.testing.assert_allclose(got, e, rtol=HYBRID_TOL, atol=HYBRID_TOL)


def test_c12_export_round_trip_np_outputs(tmp_path):
    """C12: hybridized MHA on np arrays q,k,v (2,4,16) with int32 valid_length; export,
    SymbolBlock.imports(json, [input names], params): mx.np outputs equal to 1e-6."""
    block = cells.MultiHeadAttention(16, 4)
    block.initialize()
    block.hybridize()
    args = (_rand((2, 4, 16)), _rand((2, 4, 16)), _rand((2, 4, 16)), _int([4, 2]))
    before = block(*args)
    loaded = export_and_import(block, args, tmp_path, 'mha')
    after = loaded(*args)
    assert all(isinstance(o, np.ndarray) for o in after)
    for a, b in zip(flat(before), flat(after)):
        onp.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


@requires_gpu
def test_c12_export_round_trip_gpu(tmp_path):
    """C12 (GPU): the imported graph runs on GPU with equal outputs."""
    block = cells.MultiHeadAttention(16, 4)
    block.initialize()
    block.hybridize()
    args = (_rand((2, 4, 16)), _rand((2, 4, 16)), _rand((2, 4, 16)), _int([4, 2]))
    before = flat(block(*args))
    prefix = os.path.join(str(tmp_path), 'mha')
    block.export(prefix)
    loaded = mx.gluon.SymbolBlock.imports(prefix + '-symbol.json',
                                          ['data0', 'data1', 'data2', 'data3'],
                                          prefix + '-0000.params', ctx=mx.gpu())
    after = flat(loaded(*[a.as_in_context(mx.gpu()) for a in args]))
    for a, b in zip(before, after):
        onp.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('kind', ['DotProductAttention', 'MultiHeadAttention',
                                  'AdditiveAttention', 'MultiHeadAttentionCell'])
def test_c16_dropout_is_identity_at_inference(kind, tmp_path):
    """C16: dropout 0.5; two calls outside autograd.record() are identical (imperative,
    hybridized, after export/import); inside record(train_mode=True) outputs vary."""
    block = {'DotProductAttention': lambda: cells.DotProductAttention(dropout=0.5),
             'MultiHeadAttention': lambda: cells.MultiHeadAttention(6, 2, dropout=0.5),
             'AdditiveAttention': lambda: cells.AdditiveAttention(4, dropout=0.5),
             'MultiHeadAttentionCell': lambda: cells.MultiHeadAttentionCell(
                 6, 2, attention_dropout=0.5)}[kind]()
    block.initialize()
    if kind == 'MultiHeadAttentionCell':
        args = (_rand((2, 5, 2, 3)), _rand((2, 7, 2, 3)), _rand((2, 7, 2, 3)),
                np.ones((2, 5, 7), dtype=bool))
    else:
        args = (_rand((2, 5, 6)), _rand((2, 7, 6)), _rand((2, 7, 6)), _int([7, 3]))
    first = flat(block(*args))
    assert all(onp.array_equal(a, b) for a, b in zip(first, flat(block(*args))))
    with mx.autograd.record(train_mode=True):
        train = [flat(block(*args)) for _ in range(2)]
    assert not onp.array_equal(train[0][0], train[1][0])
    assert not onp.allclose(train[0][0], first[0])
    block.hybridize()
    hybrid = [flat(block(*args)) for _ in range(2)]
    for out in hybrid:
        for a, b in zip(first, out):
            onp.testing.assert_allclose(a, b, rtol=HYBRID_TOL, atol=HYBRID_TOL)
    loaded = export_and_import(block, args, tmp_path, kind)
    for _ in range(2):
        for a, b in zip(first, flat(loaded(*args))):
            onp.testing.assert_allclose(a, b, rtol=HYBRID_TOL, atol=HYBRID_TOL)


C17_SCRIPT = textwrap.dedent('''
    import resource, sys
    resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))   # never allocate 16 GiB
    import mxnet as mx
    from mxnet import np, npx
    npx.set_np()
    from gluon_attention.core import cells, functional as fn
    def expect_value_error(call, label):
        try:
            call()
        except ValueError as err:
            ok = 'Received:' in str(err)
            print(label, 'OK' if ok else 'NO_RECEIVED', str(err)[:200])
            return
        except Exception as err:
            print(label, 'WRONG', type(err).__name__, str(err)[:200])
            return
        print(label, 'NO_ERROR')
    q, k = np.ones((1, 100, 7000, 1)), np.ones((1, 100, 6000, 1))
    expect_value_error(lambda: fn.multi_head_dot_attn(q, k, k, scaled=False)[0].wait_to_read(),
                       'multi_head_dot_attn')
    qb, kb = np.ones((100, 7000, 1)), np.ones((100, 6000, 1))
    expect_value_error(lambda: cells.DotProductAttention()(qb, kb, kb)[0].wait_to_read(), 'DPA')
    cell = cells.MultiHeadAttentionCell(100, 100, layout='NKT')
    expect_value_error(lambda: cell(q, k, k)[0].wait_to_read(), 'MultiHeadAttentionCell')
    mha = cells.MultiHeadAttention(100, 100)
    mha.initialize()
    qm, km = np.ones((1, 7000, 4)), np.ones((1, 6000, 4))
    expect_value_error(lambda: mha(qm, km, km)[0].wait_to_read(), 'MultiHeadAttention')
''')


def test_c17_too_large_score_tensor_is_a_clear_error():
    """C17: B*H=100, T_q=7000, T_k=6000 (4.2e9 score elements > int32): a ValueError with
    'Received:' before any kernel runs (run in a subprocess with a 6 GiB address-space cap)."""
    env = dict(os.environ, OMP_NUM_THREADS='1')
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run([sys.executable, '-c', C17_SCRIPT], capture_output=True, text=True,
                          timeout=120, cwd=root, env=env)
    lines = [line for line in proc.stdout.splitlines() if line.split(' ')[0] in (
        'multi_head_dot_attn', 'DPA', 'MultiHeadAttentionCell', 'MultiHeadAttention')]
    assert len(lines) == 4, proc.stdout + proc.stderr[-2000:]
    bad = [line for line in lines if line.split(' ')[1] != 'OK']
    assert not bad, '\n'.join(bad)
