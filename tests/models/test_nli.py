"""Decomposable attention (gluon_attention.models.nli): Attend, Compare, Aggregate and the model.

Two kinds of checks: parity of the masked alignment with a float64 NumPy oracle (forward and
gradients, padding on both sides) and properties (masked weights 0, padded rows 0, padding
invariance, imperative == hybridized == exported). The SNLI data tests are in
tests/data/test_snli.py, the job's in tests/scripts/test_train_nli.py.
Sizes are distinct (B=2, L_A=5, L_B=3, C=7, H=11) so a swapped axis cannot pass.
"""
import mxnet as mx
import numpy as onp
import pytest
from mxnet import autograd, np
from mxnet.gluon import nn

import reference_nli as ref
from conftest import HYBRID_TOL, hybridize_mode, tol
from reference import numeric_grad
from gluon_attention import DecomposableAttention
from gluon_attention.models.nli import Aggregate, Attend, Compare

BATCH, L_A, L_B, C, H = 2, 5, 3, 7, 11


def dense_layers(block):
    return [(d.weight.data().asnumpy().astype('float64'), d.bias.data().asnumpy().astype('float64'))
            for d in block.f if isinstance(d, nn.Dense)]


def make_attend(mode='imperative'):
    attend = Attend(H, dropout=0.3)
    attend.initialize(mx.init.Xavier())
    attend(np.ones((1, 1, C)), np.ones((1, 1, C)), np.ones((1,), dtype='int32'),
           np.ones((1,), dtype='int32'))          # materialize the deferred shapes
    return hybridize_mode(attend, mode)


def lengths(values, dtype='int32'):
    return np.array(onp.asarray(values), dtype=dtype)


@pytest.mark.parametrize('vl_a, vl_b', [([5, 2], [1, 3]), ([3, 5], [3, 2]), ([5, 5], [3, 3])])
def test_attend_matches_float64_oracle_forward_and_gradients(hybrid_mode, vl_a, vl_b):
    attend = make_attend(hybrid_mode)
    A, B = onp.random.normal(size=(BATCH, L_A, C)), onp.random.normal(size=(BATCH, L_B, C))
    g_beta, g_alpha = onp.random.normal(size=(BATCH, L_A, C)), onp.random.normal(size=(BATCH, L_B, C))
    a, b = np.array(A, dtype="float32"), np.array(B, dtype="float32")
    a.attach_grad(); b.attach_grad()
    with autograd.record(train_mode=False):          # dropout is the identity, as in the oracle
        beta, alpha = attend(a, b, lengths(vl_a), lengths(vl_b))
    autograd.backward([beta, alpha], [np.array(g_beta, dtype='float32'), np.array(g_alpha, dtype='float32')])
    layers = dense_layers(attend)
    want_beta, want_alpha, cache = ref.attend_forward(a.asnumpy(), b.asnumpy(), vl_a, vl_b, layers)
    grad_a, grad_b, grad_params = ref.attend_vjp(cache, g_beta, g_alpha)
    onp.testing.assert_allclose(beta.asnumpy(), want_beta, **tol())
    onp.testing.assert_allclose(alpha.asnumpy(), want_alpha, **tol())
    onp.testing.assert_allclose(a.grad.asnumpy(), grad_a, **tol())
    onp.testing.assert_allclose(b.grad.asnumpy(), grad_b, **tol())
    denses = [d for d in attend.f if isinstance(d, nn.Dense)]
    for dense, (grad_w, grad_bias) in zip(denses, grad_params):
        onp.testing.assert_allclose(dense.weight.grad().asnumpy(), grad_w, **tol())
        onp.testing.assert_allclose(dense.bias.grad().asnumpy(), grad_bias, **tol())


def test_oracle_backward_matches_finite_differences():
    rng = onp.random.RandomState(3)
    layers = [(rng.normal(size=(4, 3)), rng.normal(size=4)), (rng.normal(size=(4, 4)), rng.normal(size=4))]
    A, B = rng.normal(size=(2, 4, 3)), rng.normal(size=(2, 3, 3))
    vl_a, vl_b = [4, 2], [1, 3]
    g_beta, g_alpha = rng.normal(size=(2, 4, 3)), rng.normal(size=(2, 3, 3))
    _, _, cache = ref.attend_forward(A, B, vl_a, vl_b, layers)
    grad_a, grad_b, _ = ref.attend_vjp(cache, g_beta, g_alpha)

    def loss_a(x):
        beta, alpha, _ = ref.attend_forward(x, B, vl_a, vl_b, layers)
        return onp.concatenate([(beta * g_beta).ravel(), (alpha * g_alpha).ravel()])

    def loss_b(x):
        beta, alpha, _ = ref.attend_forward(A, x, vl_a, vl_b, layers)
        return onp.concatenate([(beta * g_beta).ravel(), (alpha * g_alpha).ravel()])
    onp.testing.assert_allclose(numeric_grad(loss_a, A, 1.0), grad_a, rtol=1e-6, atol=1e-7)
    onp.testing.assert_allclose(numeric_grad(loss_b, B, 1.0), grad_b, rtol=1e-6, atol=1e-7)


def test_attend_masks_padding_on_both_sides_even_nan_padding(hybrid_mode):
    attend = make_attend(hybrid_mode)
    vl_a, vl_b = lengths([5, 2]), lengths([1, 3])
    A, B = onp.random.normal(size=(BATCH, L_A, C)), onp.random.normal(size=(BATCH, L_B, C))
    beta, alpha = attend(np.array(A, dtype="float32"), np.array(B, dtype="float32"), vl_a, vl_b)
    A[1, 2:], B[0, 1:] = onp.nan, 1e6                 # padding: NaN on one side, huge on the other
    beta2, alpha2 = attend(np.array(A, dtype="float32"), np.array(B, dtype="float32"), vl_a, vl_b)
    onp.testing.assert_allclose(beta2.asnumpy(), beta.asnumpy(), rtol=0, atol=HYBRID_TOL)
    onp.testing.assert_allclose(alpha2.asnumpy(), alpha.asnumpy(), rtol=0, atol=HYBRID_TOL)
    assert (beta.asnumpy()[1, 2:] == 0).all() and (alpha.asnumpy()[0, 1:] == 0).all()
    # sample 0 has one valid hypothesis token: every valid premise row aligns to exactly it
    onp.testing.assert_allclose(beta.asnumpy()[0], onp.repeat(B[:1, 0], L_A, 0).astype('float32'), **tol())


def test_fully_masked_alignment_rows_are_zero_with_finite_gradients(hybrid_mode):
    """Valid length 0 on one side (and padded rows on the other) through the alignment."""
    attend = make_attend(hybrid_mode)
    a = np.random.normal(size=(BATCH, L_A, C)); b = np.random.normal(size=(BATCH, L_B, C))
    a.attach_grad(); b.attach_grad()
    with autograd.record(train_mode=False):
        beta, alpha = attend(a, b, lengths([3, 1]), lengths([L_B, 0]))
        loss = (beta ** 2).sum() + (alpha ** 2).sum()
    loss.backward()
    for x in (beta, alpha, a.grad, b.grad):
        assert onp.isfinite(x.asnumpy()).all()
    assert (beta.asnumpy()[1] == 0).all() and (alpha.asnumpy()[1] == 0).all()
    assert (beta.asnumpy()[0, 3:] == 0).all()
    assert (a.grad.asnumpy()[1] == 0).all() and (b.grad.asnumpy()[1] == 0).all()


def small_model(dropout=0.0, vocab_size=23):
    model = DecomposableAttention(vocab_size, embed_size=C, num_hiddens=H, dropout=dropout)
    model.initialize(mx.init.Xavier())
    return model


def id_batch(length_p=6, length_h=4, vocab_size=23):
    premise = np.array(onp.random.randint(2, vocab_size, size=(BATCH, length_p)), dtype='int32')
    hypothesis = np.array(onp.random.randint(2, vocab_size, size=(BATCH, length_h)), dtype='int32')
    return premise, hypothesis


def test_zero_valid_length_gives_zero_alignment_rows():
    """valid_length int32 [0, 3]: sample 0 all-zero weights; sample 1 rows sum to 1, padding 0."""
    model = small_model()
    premise, hypothesis = id_batch(length_p=4, length_h=4)
    weights_h, weights_p = model.alignment(premise, hypothesis, lengths([4, 4]), lengths([0, 3]))
    weights_h, weights_p = weights_h.asnumpy(), weights_p.asnumpy()
    assert (weights_h[0] == 0).all() and (weights_p[0] == 0).all()
    onp.testing.assert_allclose(weights_h[1].sum(-1), onp.ones(4), **tol())
    onp.testing.assert_allclose(weights_p[1, :, :3].sum(0), onp.ones(3), **tol())
    assert (weights_h[1, :, 3] == 0).all() and (weights_p[1, :, 3] == 0).all()
    logits = model(premise, hypothesis, lengths([4, 4]), lengths([0, 3]))
    assert onp.isfinite(logits.asnumpy()).all()


def test_masks_are_built_from_lengths_on_the_right_axes():
    """Key masks come from each side's own valid_length (L_p != L_h, so no transposed mask fits)."""
    model = small_model()
    premise, hypothesis = id_batch(length_p=6, length_h=4)
    weights_h, weights_p = model.alignment(premise, hypothesis, lengths([2, 6]), lengths([4, 1]))
    weights_h, weights_p = weights_h.asnumpy(), weights_p.asnumpy()
    assert weights_h.shape == weights_p.shape == (BATCH, 6, 4)
    assert (weights_h[0, 2:] == 0).all() and (weights_p[0, 2:] == 0).all()   # padded premise rows
    assert (weights_h[1, :, 1:] == 0).all() and (weights_p[1, :, 1:] == 0).all()  # padded hyp. cols
    onp.testing.assert_allclose(weights_h[1, :, 0], onp.ones(6), **tol())


@pytest.mark.parametrize('args, message', [
    (lambda p, h: (p, h, lengths([[2], [3]]), lengths([1, 1])), 'premise_valid_length must have rank 1'),
    (lambda p, h: (p, h[:1], lengths([2, 3]), lengths([1, 1])), 'batch sizes must agree'),
    (lambda p, h: (p, h, lengths([2, 7]), lengths([1, 1])), 'premise_valid_length must lie in [0, 6]'),
    (lambda p, h: (p, h, lengths([2, 3]), lengths([1.5, 1], 'float32')), 'must hold integers'),
    (lambda p, h: (p, h, lengths([2, 3]), None), 'hypothesis_valid_length is required'),
])
def test_bad_inputs_raise_clear_errors(args, message):
    """Wrong length shapes, batch sizes, out-of-range or fractional lengths are refused."""
    model = small_model()
    with pytest.raises((ValueError, TypeError)) as info:
        model(*args(*id_batch()))
    assert message in str(info.value) and 'Received: ' in str(info.value)


@pytest.mark.parametrize('kwargs, name', [(dict(vocab_size=0), 'vocab_size'),
                                          (dict(vocab_size=5, num_hiddens=2.5), 'num_hiddens'),
                                          (dict(vocab_size=5, dropout=1.0), 'dropout')])
def test_bad_configuration_raises(kwargs, name):
    with pytest.raises(ValueError, match=r'Received: {}='.format(name)):
        DecomposableAttention(**kwargs)


@pytest.mark.parametrize('dtype', ['int32', 'int64', 'float32'])
def test_valid_length_dtypes_give_identical_logits(hybrid_mode, dtype):
    """int32, int64 and integral float32 valid lengths: same logits, imperative and hybridized."""
    model = small_model()
    premise, hypothesis = id_batch()
    want = model(premise, hypothesis, lengths([3, 6]), lengths([4, 2])).asnumpy()
    hybridize_mode(model, hybrid_mode)
    got = model(premise, hypothesis, lengths([3, 6], dtype), lengths([4, 2], dtype)).asnumpy()
    onp.testing.assert_allclose(got, want, rtol=0, atol=HYBRID_TOL)


def test_padding_invariance_any_pad_ids(hybrid_mode):
    """Appending padding with arbitrary token ids, on either side, leaves the logits unchanged."""
    model = hybridize_mode(small_model(), hybrid_mode)
    premise, hypothesis = id_batch()
    vl_p, vl_h = lengths([3, 6]), lengths([4, 1])
    want = model(premise, hypothesis, vl_p, vl_h).asnumpy()
    for extra_p, extra_h in ((5, 0), (0, 3), (2, 7)):
        p = np.concatenate([premise, np.array(onp.random.randint(0, 23, (BATCH, extra_p)), dtype='int32')], axis=1)
        h = np.concatenate([hypothesis, np.array(onp.random.randint(0, 23, (BATCH, extra_h)), dtype='int32')], axis=1)
        onp.testing.assert_allclose(model(p, h, vl_p, vl_h).asnumpy(), want, rtol=0, atol=1e-5)


def test_aggregate_sums_only_valid_positions():
    aggregate = Aggregate(H, 3, dropout=0.0)
    aggregate.initialize(mx.init.Xavier())
    V_A, V_B = onp.random.normal(size=(BATCH, L_A, H)), onp.random.normal(size=(BATCH, L_B, H))
    vl_a, vl_b = lengths([2, 5]), lengths([3, 0])
    want = aggregate(np.array(V_A, dtype="float32"), np.array(V_B, dtype="float32"), vl_a, vl_b).asnumpy()
    V_A[0, 2:], V_B[1] = onp.nan, onp.inf
    got = aggregate(np.array(V_A, dtype="float32"), np.array(V_B, dtype="float32"), vl_a, vl_b).asnumpy()
    onp.testing.assert_allclose(got, want, rtol=0, atol=1e-6)


def test_compare_shapes():
    compare = Compare(H, dropout=0.0)
    compare.initialize()
    V_A, V_B = compare(np.ones((BATCH, L_A, C)), np.ones((BATCH, L_B, C)),
                       np.ones((BATCH, L_A, C)), np.ones((BATCH, L_B, C)))
    assert V_A.shape == (BATCH, L_A, H) and V_B.shape == (BATCH, L_B, H)


def test_hybridize_export_reload_any_shape(tmp_path):
    """Hybridized == imperative; the exported graph reloads and runs at other B and
    lengths; dropout 0.5 is the identity at inference (two calls agree)."""
    model = small_model(dropout=0.5)
    shapes = [(2, 6, 4), (3, 12, 5), (1, 2, 9)]
    inputs = []
    for batch, length_p, length_h in shapes:
        p = np.array(onp.random.randint(0, 23, (batch, length_p)), dtype='int32')
        h = np.array(onp.random.randint(0, 23, (batch, length_h)), dtype='int32')
        vl_p = np.array(onp.random.randint(0, length_p + 1, batch), dtype='int32')
        vl_h = np.array(onp.random.randint(0, length_h + 1, batch), dtype='int32')
        inputs.append((p, h, vl_p, vl_h))
    want = [model(*x).asnumpy() for x in inputs]
    onp.testing.assert_array_equal(model(*inputs[0]).asnumpy(), want[0])
    model.hybridize()
    for x, w in zip(inputs, want):
        onp.testing.assert_allclose(model(*x).asnumpy(), w, rtol=0, atol=HYBRID_TOL)
    model.export(str(tmp_path / 'da'))
    reloaded = mx.gluon.SymbolBlock.imports(str(tmp_path / 'da-symbol.json'),
                                            ['data0', 'data1', 'data2', 'data3'],
                                            str(tmp_path / 'da-0000.params'))
    for x, w in zip(inputs, want):
        out = reloaded(*x)
        assert isinstance(out, mx.np.ndarray)
        onp.testing.assert_allclose(out.asnumpy(), w, rtol=0, atol=HYBRID_TOL)
        onp.testing.assert_array_equal(reloaded(*x).asnumpy(), out.asnumpy())
