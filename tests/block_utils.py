"""Utilities shared by the block tests: random inputs, flattened outputs, forward + backward,
export and re-import, the float16 comparison and the dropout-at-inference check.

Importable from every test folder (``tests/`` is on ``sys.path`` through ``tests/conftest.py``).
"""
import os
import re

import mxnet as mx
import numpy as onp
from mxnet import autograd, np

from gluon_attention.export import export_block, import_block

# float16 outputs against the same block in float32 (scores up to 1e4 in magnitude)
F16_TOL = dict(rtol=2e-2, atol=2e-2)


def rand(*shape, dtype='float32'):
    """Standard-normal mx.np array of ``shape``."""
    return np.array(onp.random.normal(size=shape), dtype=dtype)


def ints(values, dtype='int32'):
    """Integer (or ``dtype``) mx.np array of ``values`` (lengths, positions, token ids)."""
    return np.array(onp.asarray(values), dtype=dtype)


def initialized(block):
    """``block`` after ``initialize()`` (MXNet's default initializer)."""
    block.initialize()
    return block


def flat(out):
    """Nested block outputs -> list of numpy arrays."""
    if isinstance(out, (list, tuple)):
        return [a for o in out for a in flat(o)]
    return [out.asnumpy()]


def forward_backward(block, q, k, v, *rest):
    """Outputs of ``block(q, k, v, *rest)`` and the gradients of q, k, v for the first output."""
    q, k, v = q.copy(), k.copy(), v.copy()
    for x in (q, k, v):
        x.attach_grad()
    with autograd.record():
        out = block(q, k, v, *rest)
    out[0].backward()
    return flat(out), [x.grad.asnumpy() for x in (q, k, v)]


def export_and_import(block, args, tmp_path, name='block'):
    """``block`` already hybridized and called: export, then ``SymbolBlock.imports``."""
    prefix = os.path.join(str(tmp_path), name)
    block.export(prefix)
    sym = mx.sym.load(prefix + '-symbol.json')
    inputs = sorted([n for n in sym.list_inputs() if re.fullmatch(r'data\d*', n)],
                    key=lambda n: int(n[4:] or 0))
    assert len(inputs) == len(args), inputs
    return mx.gluon.SymbolBlock.imports(prefix + '-symbol.json', inputs,
                                        prefix + '-0000.params')


def _float_run(block, inputs, dtype):
    """Outputs and input gradients of ``block`` with the float inputs cast to ``dtype``."""
    arrays = [np.array(x, dtype=dtype if x.dtype.kind == 'f' else x.dtype) for x in inputs]
    floats = [a for a in arrays if a.dtype.kind == 'f']
    for a in floats:
        a.attach_grad()
    with autograd.record():
        out = block(*arrays)
        outs = [o for o in (out if isinstance(out, (list, tuple)) else [out])
                if not isinstance(o, list)]
        total = sum((o.astype('float32') * (i + 1)).sum() for i, o in enumerate(outs))
    total.backward()
    return [o.asnumpy() for o in outs], [a.grad.asnumpy() for a in floats]


def check_float16_matches_float32(block, inputs):
    """float16 inputs give finite float16 outputs and gradients close to the float32 run.

    Returns the float16 outputs.
    """
    out16, grads16 = _float_run(block, inputs, 'float16')
    out32, _ = _float_run(block, inputs, 'float32')
    for a, b in zip(out16, out32):
        assert a.dtype == onp.float16
        assert onp.all(onp.isfinite(a))
        onp.testing.assert_allclose(a.astype('float32'), b, **F16_TOL)
    for g in grads16:
        assert g.dtype == onp.float16 and onp.all(onp.isfinite(g))
    return out16


def check_dropout_is_identity_at_inference(block, inputs, tmp_path, name):
    """Outside ``autograd.record`` dropout is the identity: two calls agree, imperative, hybridized
    and after ``export_block``/``import_block``; two calls in training mode differ from each other
    and from inference. ``block`` is initialized."""
    first = flat(block(*inputs))
    for a, b in zip(first, flat(block(*inputs))):
        onp.testing.assert_array_equal(a, b)
    with autograd.record(train_mode=True):
        trained = [flat(block(*inputs)) for _ in range(2)]
    assert not onp.array_equal(trained[0][0], trained[1][0])
    assert not onp.allclose(trained[0][0], first[0])
    block.hybridize(static_alloc=True)
    for _ in range(2):
        for a, b in zip(flat(block(*inputs)), first):
            onp.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    prefix = os.path.join(str(tmp_path), name)
    export_block(block, prefix, ['x%d' % i for i in range(len(inputs))],
                 [str(x.dtype) for x in inputs])
    reloaded, _ = import_block(prefix)
    once, twice = flat(reloaded(*inputs)), flat(reloaded(*inputs))
    for a, b, c in zip(once, twice, first):
        onp.testing.assert_array_equal(a, b)
        onp.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-6)
