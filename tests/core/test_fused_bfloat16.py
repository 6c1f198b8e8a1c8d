"""The fused kernel's bfloat16 forward pass on AMX tiles (``matmul_dtype='bfloat16'``).

Against a float64 NumPy oracle run on the inputs rounded to bfloat16 (nearest, ties to even):
the kernel's scores are exact products of those values summed in float32, so what remains is the
rounding of the weights to bfloat16 for the second product (relative 2^-9 each) and float32
sums. Each context entry must then lie within 2^-8 (twice that rounding) of the weighted sum of
the value's magnitudes, sum_j w_ij |v_jc|, plus 1e-6. Against the float64 oracle on the float32
inputs themselves (what a user compares with) the error is that of rounding the inputs: at most
2e-2 on these unit-normal inputs (measured 7-8e-3 at C_k = 64).

Where this process cannot run AMX tiles (:func:`gluon_attention.core.fused.amx_problem` says
why) the numeric tests are skipped with that reason; the test that the path is not taken then
runs everywhere: in a subprocess with ``GA_AMX=0`` and without the tile permission, the
bfloat16 choice gives exactly the float32 kernel's numbers.
"""
import json
import os
import subprocess
import sys
import textwrap

import mxnet as mx
import numpy as onp
import pytest
from mxnet import autograd, np

import reference as ref
from gluon_attention import Kernels, MultiHeadAttentionCell
from gluon_attention.core import fused
from gluon_attention.core.matmul import set_matmul_dtype
from test_fused import lengths_for, make_inputs
from test_matmul import to_bf16

pytestmark = pytest.mark.skipif(not fused.available(), reason='the fused kernel is not built: '
                                '{}'.format(fused.load_error()))
needs_amx = pytest.mark.skipif(fused.available() and fused.amx_problem() is not None,
                               reason='no AMX tiles in this process: {}'.format(
                                   fused.available() and fused.amx_problem()))

# (layout, (B, K, L_q, L_m, C_k, C_v), lengths kind): L_q and L_m off the multiples of 16 and 32,
# L_m across the 256-key block, C_k and C_v off the 32-wide tile rows, 5 query rows (the
# smallest group the tiles take; 4 or fewer run the float32 path).
CASES = [('NKT', (1, 2, 70, 300, 64, 64), 'per_row'),
         ('NTK', (2, 3, 37, 50, 12, 20), 'batch'),
         ('TNK', (2, 2, 40, 33, 100, 72), 'none'),
         ('NKT', (2, 1, 5, 17, 8, 40), 'per_row')]


def run(q, key, v, lengths, layout, matmul_dtype='float32'):
    arrays = [np.array(x, dtype='float32') for x in (q, key, v)]
    vl = None if lengths is None else np.array(lengths, dtype='int32')
    return fused._fused_dot_attn(*arrays, vl, layout=layout,
                                 matmul_dtype=matmul_dtype).asnumpy()


def oracle(q, key, v, lengths, layout):
    """(context, bound): float64 on the bfloat16-rounded inputs, and 2^-8 sum_j w_ij |v_jc|."""
    b, lq, lm = ref.to_nkt(q, layout).shape[0], *(ref.to_nkt(x, layout).shape[2]
                                                   for x in (q, key))
    mask = (onp.ones((b, lq, lm), dtype=bool) if lengths is None else
            ref.key_mask_from_valid_length(lengths, lq, lm))
    qb, kb, vb = (to_bf16(x) for x in (q, key, v))
    ctx, _, weights = ref.multi_head_dot_attn(qb, kb, vb, mask, layout=layout)
    magnitude = ref.merge_heads(onp.matmul(weights, onp.abs(ref.to_nkt(vb, layout))), layout)
    return ctx, 2.0 ** -8 * magnitude + 1e-6


@needs_amx
@pytest.mark.parametrize('layout, size, kind', CASES)
def test_bfloat16_forward_within_weight_rounding_of_oracle(layout, size, kind):
    rng = onp.random.RandomState(11)
    q, key, v = (x.astype('float32') for x in make_inputs(rng, layout, *size))
    lengths = lengths_for(kind, rng, size[0], size[2], size[3])
    got = run(q, key, v, lengths, layout, 'bfloat16')
    want, bound = oracle(q, key, v, lengths, layout)
    worst = float((onp.abs(got - want) - bound).max())
    assert worst <= 0, '{} {}: exceeds the bound by {:.3g}'.format(layout, size, worst)
    exact = ref.multi_head_dot_attn(q, key, v, None if lengths is None else
                                    ref.key_mask_from_valid_length(lengths, size[2], size[3]),
                                    layout=layout)[0]
    onp.testing.assert_allclose(got, exact, rtol=0, atol=2e-2)
    # the float32 kernel is the default and gives other numbers: the tiles ran
    assert (got != run(q, key, v, lengths, layout)).any()


@needs_amx
def test_bfloat16_masked_weights_exactly_zero_and_empty_rows_zero():
    """One-hot values (C_v = L_m), so that context channel j is the weight of key j: exactly 0
    past each row's length, all-zero rows of length 0; keys and values past the longest length
    are NaN and never read."""
    rng = onp.random.RandomState(5)
    b, heads, lq, lm = 2, 2, 37, 40
    q = rng.normal(size=(b, heads, lq, 24)).astype('float32')
    key = rng.normal(size=(b, heads, lm, 24)).astype('float32')
    v = onp.broadcast_to(onp.eye(lm, dtype='float32'), (b, heads, lm, lm)).copy()
    lengths = rng.randint(0, 33, size=(b, lq))
    lengths[0, :3] = 0
    lengths[1, 0] = 32                               # the longest: keys 32-39 are never read
    key[:, :, 32:], v[:, :, 32:] = onp.nan, onp.nan
    got = run(q, key, v, lengths, 'NKT', 'bfloat16').reshape(b, lq, heads, lm)
    past = onp.arange(lm)[None, None, :] >= lengths[:, :, None]             # (B, L_q, L_m)
    assert onp.isfinite(got).all()
    assert (got[onp.broadcast_to(past[:, :, None], got.shape)] == 0).all()
    assert (got[0, :3] == 0).all()
    want, bound = oracle(q, key[..., :32, :], v[..., :32, :32],
                         onp.minimum(lengths, 32), 'NKT')
    assert (onp.abs(got[..., :32].reshape(want.shape) - want) <= bound).all()


@needs_amx
def test_bfloat16_cell_runs_the_tiles_and_float32_backward():
    """Kernels(attention='fused', matmul_dtype='bfloat16') reaches the kernel (hybridized: the
    same numbers as the function); the gradients come from the float32 backward pass on this
    forward pass's saved statistics: within bfloat16-sized errors of the float64 oracle;
    set_matmul_dtype(cell, 'float32') brings back the float32 kernel's numbers exactly."""
    rng = onp.random.RandomState(3)
    q, key, v = (x.astype('float32') for x in make_inputs(rng, 'NTK', 2, 3, 45, 60, 16, 16))
    lengths = onp.array([60, 23])
    cell = MultiHeadAttentionCell(kernels=Kernels('fused', matmul_dtype='bfloat16'),
                                  layout='NTK')
    cell.hybridize()
    arrays = [np.array(x) for x in (q, key, v)]
    for x in arrays:
        x.attach_grad()
    head = rng.normal(size=(2, 45, 48))
    with autograd.record():
        ctx = cell(*arrays, None, None, np.array(lengths))[0]
        (ctx * np.array(head, dtype='float32')).sum().backward()
    assert (ctx.asnumpy() == run(q, key, v, lengths, 'NTK', 'bfloat16')).all()
    # set_matmul_dtype switches the attention with the dense products (no dense block here)
    assert set_matmul_dtype(cell, 'float32') == 0
    float32 = cell(*arrays, None, None, np.array(lengths))[0].asnumpy()
    assert (float32 == run(q, key, v, lengths, 'NTK')).all()
    mask = ref.key_mask_from_valid_length(lengths, 45, 60)
    grads = ref.multi_head_dot_attn_vjp(q, key, v, head, mask=mask, layout='NTK')[:3]
    for name, x, want in zip('qkv', arrays, grads):
        onp.testing.assert_allclose(x.grad.asnumpy(), want, rtol=0,
                                    atol=3e-2 * onp.abs(want).max(), err_msg='d' + name)



def raw_op(q, key, v, lengths, scale):
    """The operator itself (NKT): (context (B, L_q, K C_v), log-sum-exp (B, K, L_q))."""
    out = getattr(mx.nd, fused.OP_NAME)(
        *(mx.nd.array(x, dtype='float32') for x in (q, key, v, lengths)), layout='NKT',
        scale=repr(scale), with_length=1, matmul_dtype='bfloat16')
    return out[0].asnumpy(), out[1].asnumpy()


@needs_amx
def test_bfloat16_large_growing_scores_negative_scale_and_log_sum_exp():
    """Scores up to 15 whose row maxima grow from one 256-key block to the next (the running
    sums and context rows are rescaled twice), a negative scale (given to the operator
    directly; scale -s on q is scale s on -q) and rows of length 0: the context within the
    weight-rounding bound of the float64 oracle on the bfloat16-rounded inputs, and the saved
    log-sum-exp (read by the float32 backward pass) within 2e-4 of that oracle's, finite
    exactly where the row has a key (the weights' exp2 has relative error 8.6e-5)."""
    rng = onp.random.RandomState(8)
    b, heads, lq, lm, c = 2, 2, 37, 600, 64
    up = onp.zeros(c)
    up[0] = 6.0
    q = (rng.normal(size=(b, heads, lq, c)) + up).astype('float32')
    key = rng.normal(size=(b, heads, lm, c)) - onp.linspace(0, 2, lm)[:, None] * up
    key, v = key.astype('float32'), rng.normal(size=(b, heads, lm, 40)).astype('float32')
    lengths = rng.randint(0, lm + 1, size=(b, lq))
    lengths[0, :2] = 0
    lengths[1, :3] = lm
    ctx, lse = raw_op(q, key, v, lengths, -0.125)
    want, bound = oracle(-q, key, v, lengths, 'NKT')
    assert (onp.abs(ctx - want) <= bound).all(), float((onp.abs(ctx - want) - bound).max())
    scores = -0.125 * onp.matmul(to_bf16(q).astype('float64'),
                               onp.swapaxes(to_bf16(key).astype('float64'), -1, -2))
    live = onp.arange(lm) < lengths[:, None, :, None]                 # (B, 1, L_q, L_m)
    top = onp.where(live, scores, -onp.inf).max(-1, keepdims=True)
    with onp.errstate(invalid='ignore', divide='ignore'):
        exact = onp.log(onp.where(live, onp.exp(scores - top), 0).sum(-1)) + top[..., 0]
    assert ((lengths == 0)[:, None, :] == onp.isneginf(lse)).all()
    finite = onp.isfinite(exact)
    assert onp.abs(lse[finite] - exact[finite]).max() <= 2e-4

NOT_TAKEN = textwrap.dedent('''
    import json, os
    import numpy as onp
    from mxnet import np, npx
    npx.set_np()
    import gluon_attention
    from gluon_attention.core import fused
    rng = onp.random.RandomState(0)
    q, k, v = (np.array(rng.normal(size=(1, 2, 40, 16)).astype('float32')) for _ in range(3))
    vl = np.array([33])
    out = {}
    for state in ('GA_AMX=0', 'not requested'):
        f32, bf16 = (fused._fused_dot_attn(q, k, v, vl, matmul_dtype=d).asnumpy()
                     for d in ('float32', 'bfloat16'))
        out[state] = [fused.amx_problem(), bool((f32 == bf16).all())]
        os.environ['GA_AMX'] = 'auto'    # the kernel reads it; the permission was never asked
    print(json.dumps(out))
''')


def test_bfloat16_path_not_taken_without_amx():
    """GA_AMX=0 (no tile permission asked at import): the bfloat16 choice runs the float32
    kernel (the same numbers), and amx_problem says why: the variable, then, once it no longer
    says 0, the missing permission (read from Linux); on a CPU without AMX, the CPU."""
    env = dict(os.environ, GA_AMX='0')
    env.pop('DNNL_MAX_CPU_ISA', None)
    done = subprocess.run([sys.executable, '-c', NOT_TAKEN], env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    amx_cpu = {'amx-tile', 'amx-bf16', 'avx512bf16'} <= set(fused.cpu_features().split())
    for state, fragment in (('GA_AMX=0', 'GA_AMX=0'), ('not requested', 'not granted')):
        problem, same = out[state]
        assert same, state
        assert (fragment if amx_cpu else 'no AMX-BF16') in problem, (state, problem)
