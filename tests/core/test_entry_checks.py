"""Checks run once, at the call a user makes, and the same way in every mode.

- A hybridized block checks the arrays of each call before its cached graph runs: the same
  ValueError as imperatively.
- An empty batch or memory (B = 0 or L_m = 0) is a ValueError on every attention path (functions,
  fused and chunked attention, every cell) and in every mode; an empty query (L_q = 0) gives
  empty outputs of the right shapes and exact zero gradients for key and value.
- Nested calls trust their caller (valid_length is copied to NumPy once per call), and a refused
  call leaves the next call checked.
"""
import mxnet as mx
import numpy as onp
import pytest
from mxnet import autograd, np

from block_utils import export_and_import, ints, rand
from conftest import HYBRID_MODES, hybridize_mode
import gluon_attention as ga
from gluon_attention import _checks
from gluon_attention.core import cells, fused

needs_kernel = pytest.mark.skipif(not fused.available(), reason='fused kernel not built')
EMPTY_MESSAGE = r'the batch size B and the memory length L_m must be at least 1'


def _per_head(b, lq, lm):
    """NKT query (b, 2, lq, 4), key and value (b, 2, lm, 4)."""
    return [rand(b, 2, lq, 4), rand(b, 2, lm, 4), rand(b, 2, lm, 4)]


def _lengths(b, lm):
    return ints([min(lm, 3)] * b)


# block id -> (factory, inputs for (B, L_q, L_m), output shapes for B=2, L_q=0, L_m=5)
BLOCKS = {
    'DotProductAttention': (
        cells.DotProductAttention,
        lambda b, lq, lm: [rand(b, lq, 4), rand(b, lm, 4), rand(b, lm, 6), _lengths(b, lm)],
        [(2, 0, 6), (2, 0, 5)]),
    'AdditiveAttention': (
        lambda: cells.AdditiveAttention(5),
        lambda b, lq, lm: [rand(b, lq, 4), rand(b, lm, 3), rand(b, lm, 6), _lengths(b, lm)],
        [(2, 0, 6), (2, 0, 5)]),
    'MultiHeadAttentionCell-mask': (
        lambda: cells.MultiHeadAttentionCell(layout='NKT'),
        lambda b, lq, lm: _per_head(b, lq, lm) + [np.ones((b, lq, lm), dtype=bool)],
        [(2, 0, 8), (2, 2, 0, 5)]),
    'MultiHeadAttentionCell-valid_length': (
        lambda: cells.MultiHeadAttentionCell(layout='NKT'),
        lambda b, lq, lm: _per_head(b, lq, lm) + [None, None, _lengths(b, lm)],
        [(2, 0, 8), (2, 2, 0, 5)]),
    'MultiHeadAttentionCell-fused': (
        lambda: cells.MultiHeadAttentionCell(layout='NKT', kernels=ga.Kernels('fused')),
        lambda b, lq, lm: _per_head(b, lq, lm) + [None, None, _lengths(b, lm)],
        [(2, 0, 8)]),
    'MultiHeadAttention': (
        lambda: cells.MultiHeadAttention(8, 2),
        lambda b, lq, lm: [rand(b, lq, 4), rand(b, lm, 3), rand(b, lm, 6), _lengths(b, lm)],
        [(2, 0, 8), (2, 2, 0, 5)]),
}


def _block_ids():
    return [pytest.param(n, marks=needs_kernel) if n.endswith('fused') else n for n in BLOCKS]


def _ready(name, mode):
    """The block after a valid call, put in ``mode``, after one more valid call (graph built)."""
    factory, make, _ = BLOCKS[name]
    block = factory()
    block.initialize()
    block(*make(2, 3, 5))
    hybridize_mode(block, mode)
    block(*make(2, 3, 5))
    return block


def _outputs(out):
    """Nested block outputs -> flat list of arrays (None, weights not held, left out)."""
    if out is None:
        return []
    if isinstance(out, (list, tuple)):
        return [a for o in out for a in _outputs(o)]
    return [out]


@pytest.mark.parametrize('mode', HYBRID_MODES)
def test_hybridized_block_refuses_lengths_beyond_the_memory(mode):
    block = hybridize_mode(cells.DotProductAttention(), mode)
    q, k, v = rand(2, 3, 4), rand(2, 4, 4), rand(2, 4, 5)
    block(q, k, v, ints([4, 2]))                                     # builds the graph
    with pytest.raises(ValueError, match=r'Received: valid_length=\[7, 2\]'):
        block(q, k, v, ints([7, 2]))


@pytest.mark.parametrize('mode', HYBRID_MODES)
@pytest.mark.parametrize('empty', ['B', 'L_m'])
@pytest.mark.parametrize('name', _block_ids())
def test_blocks_refuse_empty_batch_or_memory_in_every_mode(name, empty, mode):
    block = _ready(name, mode)
    sizes = (0, 3, 5) if empty == 'B' else (2, 3, 0)
    with pytest.raises(ValueError, match=EMPTY_MESSAGE):
        block(*BLOCKS[name][1](*sizes))


@pytest.mark.parametrize('empty', ['B', 'L_m'])
@pytest.mark.parametrize('path', ['multi_head_dot_attn-mask', 'multi_head_dot_attn-valid_length',
                                  'attention-chunked',
                                  pytest.param('attention-fused', marks=needs_kernel)])
def test_functions_refuse_empty_batch_or_memory(path, empty):
    b, lm = (0, 5) if empty == 'B' else (2, 0)
    q, k, v = _per_head(b, 3, lm)
    calls = {
        'multi_head_dot_attn-mask': lambda: ga.multi_head_dot_attn(
            q, k, v, np.ones((b, 3, lm), dtype=bool)),
        'multi_head_dot_attn-valid_length': lambda: ga.multi_head_dot_attn(
            q, k, v, valid_length=ints([0] * b)),
        'attention-chunked': lambda: ga.attention(q, k, v, valid_length=ints([0] * b),
                                                  chunk_size=2, backend='chunked'),
        'attention-fused': lambda: ga.attention(q, k, v, valid_length=ints([0] * b),
                                                backend='fused'),
    }
    with pytest.raises(ValueError, match=EMPTY_MESSAGE):
        calls[path]()


@pytest.mark.parametrize('mode', HYBRID_MODES)
@pytest.mark.parametrize('name', _block_ids())
def test_blocks_give_empty_outputs_for_an_empty_query(name, mode):
    block = _ready(name, mode)
    outs = _outputs(block(*BLOCKS[name][1](2, 0, 5)))
    mx.nd.waitall()
    assert [o.shape for o in outs] == BLOCKS[name][2]


# The projections' FullyConnected has no backward for an empty batch of rows on oneDNN in
# MXNet 1.9.1, so the gradients are checked on the parameter-free cells.
@pytest.mark.parametrize('mode', HYBRID_MODES)
@pytest.mark.parametrize('name', ['DotProductAttention', 'MultiHeadAttentionCell-mask',
                                  'MultiHeadAttentionCell-valid_length',
                                  pytest.param('MultiHeadAttentionCell-fused',
                                               marks=needs_kernel)])
def test_empty_query_gives_zero_key_and_value_gradients(name, mode):
    block = _ready(name, mode)
    inputs = BLOCKS[name][1](2, 0, 5)
    for x in inputs[:3]:
        x.attach_grad()
    with autograd.record():
        total = sum(o.sum() for o in _outputs(block(*inputs)))
    total.backward()
    assert inputs[0].grad.shape == inputs[0].shape
    for x in inputs[1:3]:                        # nothing reads key or value: exact zeros
        onp.testing.assert_array_equal(x.grad.asnumpy(), onp.zeros(x.shape))


@pytest.mark.parametrize('path', ['multi_head_dot_attn-mask', 'multi_head_dot_attn-valid_length',
                                  'multi_head_dot_attn', 'attention-chunked',
                                  pytest.param('attention-fused', marks=needs_kernel)])
def test_functions_give_an_empty_context_for_an_empty_query(path):
    q, k, v = _per_head(2, 0, 5)
    calls = {
        'multi_head_dot_attn-mask': lambda: ga.multi_head_dot_attn(
            q, k, v, np.ones((2, 0, 5), dtype=bool))[0],
        'multi_head_dot_attn-valid_length': lambda: ga.multi_head_dot_attn(
            q, k, v, valid_length=ints([5, 2]))[0],
        'multi_head_dot_attn': lambda: ga.multi_head_dot_attn(q, k, v)[0],
        'attention-chunked': lambda: ga.attention(q, k, v, valid_length=ints([5, 2]),
                                                  chunk_size=2, backend='chunked')[0],
        'attention-fused': lambda: ga.attention(q, k, v, valid_length=ints([5, 2]),
                                                backend='fused')[0],
    }
    context = calls[path]()
    mx.nd.waitall()
    assert context.shape == (2, 0, 8)


@pytest.mark.parametrize('name', ['DotProductAttention', 'MultiHeadAttentionCell-valid_length',
                                  pytest.param('MultiHeadAttentionCell-fused',
                                               marks=needs_kernel)])
def test_exported_graph_gives_empty_outputs_for_an_empty_query(name, tmp_path):
    make = BLOCKS[name][1]
    block = _ready(name, 'hybridize')
    args = [a for a in make(2, 3, 5) if a is not None]
    reloaded = export_and_import(block, args, tmp_path)
    out = _outputs(reloaded(*[a for a in make(2, 0, 5) if a is not None]))
    mx.nd.waitall()
    assert [o.shape for o in out] == BLOCKS[name][2]


@pytest.mark.parametrize('mode', HYBRID_MODES)
def test_valid_length_is_checked_once_per_call(mode, monkeypatch):
    """MultiHeadAttention -> its cell -> multi_head_dot_attn -> the length softmax: one check
    (one copy to NumPy), hybridized or not."""
    block = _ready('MultiHeadAttention', mode)
    seen = []
    original = _checks.check_valid_length
    monkeypatch.setattr(_checks, 'check_valid_length',
                        lambda *a, **k: seen.append(1) or original(*a, **k))
    block(*BLOCKS['MultiHeadAttention'][1](2, 3, 5))
    assert len(seen) == 1


def test_a_refused_call_leaves_the_next_call_checked():
    block = cells.DotProductAttention()
    q, k, v = rand(2, 3, 4), rand(2, 4, 4), rand(2, 4, 5)
    for _ in range(2):
        with pytest.raises(ValueError, match=r'valid_length=\[9, 2\]'):
            block(q, k, v, ints([9, 2]))
        with pytest.raises(ValueError, match='must hold only 0 and 1'):
            ga.masked_softmax(rand(2, 3), np.full((2, 3), 2.0))
    assert block(q, k, v, ints([4, 2]))[0].shape == (2, 3, 5)


def test_function_inside_a_library_call_is_not_checked_again(monkeypatch):
    """DotProductAttention builds its key mask and calls masked_softmax: the mask is not
    re-validated (no copy of it to NumPy); a direct call of masked_softmax is."""
    seen = []
    original = _checks.check_mask
    monkeypatch.setattr(_checks, 'check_mask', lambda *a, **k: seen.append(1) or original(*a, **k))
    cells.DotProductAttention()(rand(2, 3, 4), rand(2, 4, 4), rand(2, 4, 5), ints([4, 2]))
    assert not seen
    ga.masked_softmax(rand(2, 3), np.ones((2, 3)))
    assert len(seen) == 1
