"""Hardening (issue 6): bad input across the whole API, empty axes, float16, dropout at inference,
determinism of both scripts, and script errors on malformed data files.

The error table (``ERROR_CASES``) complements tests/test_errors.py: it covers the QA head, the NLI
blocks, the seed helpers, training utilities, data readers, span decoding and export, and asserts
the exception type, that the message ends with ``Received: ...`` and what it names.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import mxnet as mx
import numpy as onp
import pytest
from mxnet import autograd, np
from mxnet.gluon import HybridBlock, nn

import gluon_attention as ga
from gluon_attention.core import cells, masking
from gluon_attention.tasks import common, training
from gluon_attention.core import functional as fn
from gluon_attention.compat import attend as sa
from gluon_attention.data import snli, squad
from gluon_attention.data.squad_decode import best_span, decode_predictions
from gluon_attention.tasks.export import export_block, import_block
from gluon_attention.models.qa import ModelForQAConditional, QAInference, qa_loss

ROOT = Path(__file__).resolve().parents[1]


def _rand(*shape, dtype='float32'):
    return np.array(onp.random.normal(size=shape), dtype=dtype)


def _int(values):
    return np.array(onp.asarray(values), dtype='int32')


@mx.util.use_np
class _Backbone(HybridBlock):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.word = nn.Embedding(20, 6)

    def hybrid_forward(self, F, tokens, token_types, valid_length):
        scale = F.np.expand_dims(F.np.expand_dims(valid_length.astype('float32'), -1), -1)
        return self.word(tokens) + self.word(token_types) + 0.0 * scale


def _qa():
    model = ModelForQAConditional(_Backbone(), units=4)
    model.initialize()
    return model


def _initialized(block):
    block.initialize()
    return block


def _write(tmp, name, text):
    path = os.path.join(tmp, name)
    with open(path, 'w', encoding='utf-8') as f:
        f.write(text)
    return path


def _squad_json(answer_start=0, text='Alpha', impossible=False, extra=None):
    qa = {'id': 'q1', 'question': 'What?', 'answers': [] if impossible and answer_start is None
          else [{'text': text, 'answer_start': answer_start}], 'is_impossible': impossible}
    qa.update(extra or {})
    return json.dumps({'data': [{'title': 'T', 'paragraphs': [
        {'context': 'Alpha beta gamma.', 'qas': [qa]}]}]})


TMP = os.path.join(os.environ.get('TMPDIR', '/tmp'), 'ga_hardening_{}'.format(os.getpid()))
os.makedirs(TMP, exist_ok=True)
EMB, PMASK = _rand(2, 5, 6), np.array(onp.array([[1, 0, 1, 1, 0]] * 2), dtype='float32')
Q, K, V = _rand(2, 3, 4), _rand(2, 5, 4), _rand(2, 5, 6)
LOGP = np.log(np.full((2, 5), 0.2))
ANS = np.log(np.full((2, 2), 0.5))
HUGE_Q, HUGE_K = np.zeros((1, 1, 70000, 1)), np.zeros((1, 1, 70000, 1))

# (id, callable, exception type, strings the message after 'Received:' must contain)
ERROR_CASES = [
    # QA head
    ('qa-units', lambda: ModelForQAConditional(_Backbone(), units=0), ValueError, ['units=0']),
    ('qa-dropout', lambda: ModelForQAConditional(_Backbone(), dropout=1.0), ValueError, ['1.0']),
    ('qa-top-n', lambda: QAInference(_qa(), start_top_n=0), ValueError, ['start_top_n=0']),
    ('qa-p_mask-shape', lambda: _qa().get_start_logits(EMB, np.ones((2, 6))), ValueError,
     ['(2, 6)']),
    ('qa-p_mask-rank', lambda: _qa().get_answerable_logits(EMB, np.ones((5,))), ValueError,
     ['(5,)']),
    ('qa-p_mask-values', lambda: _qa().get_start_logits(EMB, np.full((2, 5), 2.0)), ValueError,
     ['2.0']),
    ('qa-start-range', lambda: _qa().get_end_logits(EMB, _int([[5], [0]]), PMASK), ValueError,
     ['5']),
    ('qa-loss-start-range', lambda: qa_loss(LOGP, LOGP, ANS, _int([5, 0]), _int([0, 0]),
                                            _int([0, 0])), ValueError, ['start_position']),
    ('qa-loss-end-negative', lambda: qa_loss(LOGP, LOGP, ANS, _int([1, 0]), _int([-1, 0]),
                                             _int([0, 0])), ValueError, ['end_position']),
    ('qa-loss-impossible', lambda: qa_loss(LOGP, LOGP, ANS, _int([1, 0]), _int([1, 0]),
                                           _int([2, 0])), ValueError, ['is_impossible']),
    ('qa-loss-batch', lambda: qa_loss(LOGP, LOGP, ANS, _int([1, 0, 0]), _int([1, 0]),
                                      _int([0, 0])), ValueError, ['start_position']),
    # decomposable attention
    ('nli-attend-hiddens', lambda: ga.Attend(0), ValueError, ['num_hiddens=0']),
    ('nli-compare-hiddens', lambda: ga.Compare(2.5), ValueError, ['2.5']),
    ('nli-aggregate-outputs', lambda: ga.Aggregate(4, 0), ValueError, ['num_outputs=0']),
    ('nli-model-vocab', lambda: ga.DecomposableAttention(0), ValueError, ['vocab_size=0']),
    ('nli-attend-dropout', lambda: ga.Attend(4, dropout=1.0), ValueError, ['1.0']),
    ('nli-attend-batch', lambda: _initialized(ga.Attend(4))(Q, _rand(3, 5, 4), _int([3, 3]),
                                                            _int([5, 5, 5])), ValueError, []),
    ('nli-attend-length', lambda: _initialized(ga.Attend(4))(Q, K, _int([4, 3]), _int([5, 5])),
     ValueError, ['[4, 3]']),
    ('nli-model-rank', lambda: _initialized(ga.DecomposableAttention(9, 4, 4))(
        _int([[1, 2]]), _int([[1, 2, 3]]), _int([[2]]), _int([3])), ValueError, ['(1, 1)']),
    ('nli-missing-length', lambda: _initialized(ga.Attend(4))(Q, K, None, _int([5, 5])),
     TypeError, ['None']),
    # core functions and blocks (cases not in test_errors.py)
    ('mask-transposed', lambda: fn.masked_softmax(_rand(2, 3, 5), np.ones((2, 5, 3))),
     ValueError, ['(2, 5, 3)']),
    ('edge-scores', lambda: fn.multi_head_dot_attn(_rand(2, 3, 3, 4), _rand(2, 3, 5, 4),
                                                   _rand(2, 3, 5, 6), None, _rand(2, 3, 3, 4)),
     ValueError, ['(2, 3, 3, 4)']),
    ('too-large-mhda', lambda: fn.multi_head_dot_attn(HUGE_Q, HUGE_K, HUGE_K), ValueError,
     ['num_elements=4900000000']),
    ('too-large-dpa', lambda: cells.DotProductAttention()(HUGE_Q[0], HUGE_K[0], HUGE_K[0]),
     ValueError, ['4900000000']),
    ('valid_length-bool', lambda: cells.DotProductAttention()(Q, K, V, np.ones((2,), dtype=bool)),
     TypeError, ['bool']),
    ('valid_length-numpy', lambda: masking.gen_self_attn_mask(Q, onp.array([1, 2])), TypeError,
     ['ndarray']),
    ('valid_length-batch', lambda: masking.gen_self_attn_mask(Q, _int([1, 2, 3])), ValueError,
     ['(3,)']),
    ('score-tn-rank', lambda: fn.dot_attn_score(_rand(3, 2, 2, 4), _rand(5, 2, 2, 4),
                                                layout='TN'), ValueError, ['(3, 2, 2, 4)']),
    ('score-features', lambda: fn.dot_attn_score(Q, _rand(2, 5, 3)), ValueError, ['(2, 5, 3)']),
    ('positions-rank', lambda: fn.select_vectors_by_position(Q, _int([0, 1])), ValueError,
     ['(2,)']),
    ('heads-zero', lambda: cells.MultiHeadAttentionCell(query_units=12, num_heads=0), ValueError,
     ['num_heads=0']),
    ('scaled-type', lambda: cells.DotProductAttention(scaled='yes'), TypeError, ["'yes'"]),
    ('einsum-type', lambda: cells.MultiHeadAttentionCell(use_einsum=1), TypeError, ['1']),
    # seed-000 helpers
    ('seed-fill-rank', lambda: sa.fill_context_mask(np.zeros((2, 3)), [1, 2], 0, 1), ValueError,
     ['(2, 3)']),
    ('seed-dot-size', lambda: sa.attend(Q, _rand(2, 5, 3)), ValueError, ['(2, 5, 3)']),
    ('seed-sizes-type', lambda: sa.mask3d(V, 3), TypeError, ['3']),
    ('seed-dot-rank', lambda: sa.dot(_rand(2, 3), _rand(2, 3)), ValueError, ['(2, 3)']),
    ('seed-sizes-batch', lambda: sa.attend(Q, K, context_sizes=[1, 2, 3]), ValueError,
     ['[1, 2, 3]']),
    # training utilities
    ('ctx-unknown', lambda: common.parse_ctx('tpu0'), ValueError, ["'tpu0'"]),
    ('ctx-repeated', lambda: common.parse_ctx('cpu,cpu'), ValueError, ["'cpu,cpu'"]),
    ('checkpoint-keep', lambda: training.CheckpointManager(TMP, keep=0), ValueError, ['keep=0']),
    # data readers: file, record and what is wrong
    ('squad-missing-file', lambda: squad.read_squad(os.path.join(TMP, 'nope.json')), ValueError,
     ['nope.json']),
    ('squad-bad-json', lambda: squad.read_squad(_write(TMP, 'bad.json', '{"data": [')),
     ValueError, ['error=']),
    ('squad-missing-key', lambda: squad.read_squad(_write(TMP, 'nokey.json', json.dumps(
        {'data': [{'title': 'T', 'paragraphs': [{'context': 'c', 'qas': [{'id': 'x'}]}]}]}))),
     ValueError, ['keys=']),
    ('squad-offset', lambda: squad.read_squad(_write(TMP, 'offset.json', _squad_json(3))),
     ValueError, ['answer_start=3']),
    ('squad-impossible', lambda: squad.read_squad(_write(TMP, 'imp.json',
                                                         _squad_json(0, impossible=True))),
     ValueError, ['is_impossible=True']),
    ('squad-name', lambda: squad.default_data_path('nope'), ValueError, ["'nope'"]),
    ('snli-label', lambda: snli.read_snli_jsonl(_write(TMP, 'l.jsonl', json.dumps(
        {'gold_label': 'maybe', 'sentence1': 'a', 'sentence2': 'b'}) + '\n')), ValueError,
     ["'maybe'", 'l.jsonl:1']),
    ('snli-line', lambda: snli.read_snli_jsonl(_write(TMP, 'm.jsonl', '{"gold_label": \n')),
     ValueError, ['line 1 of']),
    ('snli-lines-missing', lambda: snli.read_snli_lines(os.path.join(TMP, 'dev')), ValueError,
     ['s1.dev']),
    # decoding and export
    ('span-length', lambda: best_span([0, 1], [0, 1], max_answer_length=0), ValueError,
     ['max_answer_length=0']),
    ('span-shapes', lambda: best_span([0, 1, 2], [0, 1]), ValueError, ['(3,)']),
    ('decode-count', lambda: decode_predictions([], [], [None]), ValueError, ['num_results=1']),
    ('batchify-empty', lambda: squad.batchify([]), ValueError, ['num_features=0']),
    ('import-missing', lambda: import_block(os.path.join(TMP, 'none')), ValueError, ['none']),
    ('export-names', lambda: export_block(cells.DotProductAttention(), os.path.join(TMP, 'x'),
                                          ['a', 'b'], ['float32']), ValueError, ["['a', 'b']"]),
]


@pytest.mark.parametrize('case_id,call,kind,needles', ERROR_CASES,
                         ids=[c[0] for c in ERROR_CASES])
def test_error_table(case_id, call, kind, needles):
    with pytest.raises(Exception) as err:
        out = call()
        mx.nd.waitall()
        del out
    assert type(err.value) is kind, '{}: {!r}'.format(case_id, err.value)
    message = str(err.value)
    assert 'Received:' in message, message
    received = message.split('Received:', 1)[1]
    for needle in needles:
        assert needle in received, message


def test_error_table_size():
    assert len(ERROR_CASES) >= 30


# --------------------------------------------------------------------------------------------
# Empty axes: an empty result of the right shape or a documented error, never a raw MXNetError.

def _mha(*args):
    return _initialized(cells.MultiHeadAttention(6, 2))(*args)


EMPTY_CASES = [
    ('softmax-rows', lambda: fn.masked_softmax(_rand(2, 0, 4), np.ones((2, 0, 4))), [(2, 0, 4)]),
    ('softmax-axis', lambda: fn.masked_softmax(_rand(2, 3, 0), np.ones((2, 3, 0))), [(2, 3, 0)]),
    ('dpa-L_q', lambda: cells.DotProductAttention()(_rand(2, 0, 4), K, V), [(2, 0, 6), (2, 0, 5)]),
    ('dpa-L_m', lambda: cells.DotProductAttention()(Q, _rand(2, 0, 4), _rand(2, 0, 6),
                                                    _int([0, 0])), [(2, 3, 6), (2, 3, 0)]),
    ('dpa-B', lambda: cells.DotProductAttention()(_rand(0, 3, 4), _rand(0, 5, 4),
                                                  _rand(0, 5, 6)), [(0, 3, 6), (0, 3, 5)]),
    ('additive-L_m', lambda: _initialized(cells.AdditiveAttention(5))(Q, _rand(2, 0, 4),
                                                                      _rand(2, 0, 4)),
     [(2, 3, 4), (2, 3, 0)]),
    ('mhda-L_m', lambda: fn.multi_head_dot_attn(_rand(2, 2, 3, 4), _rand(2, 2, 0, 4),
                                                _rand(2, 2, 0, 5))[0], [(2, 3, 10)]),
    ('attend-N', lambda: ga.attend(Q, _rand(2, 0, 4)), [(2, 3, 4)]),
    ('self-mask-T', lambda: ga.gen_self_attn_mask(_rand(2, 0, 4), _int([0, 0])), [(2, 0, 0)]),
    ('nli-L_A', lambda: _initialized(ga.Attend(5))(_rand(2, 0, 4), K, _int([0, 0]),
                                                   _int([5, 2])), [(2, 0, 4), (2, 5, 4)]),
    pytest.param('mha-B', lambda: _mha(_rand(0, 3, 4), _rand(0, 5, 4), _rand(0, 5, 4)),
                 [(0, 3, 6), (0, 2, 3, 5)], id="mha-B"),
    pytest.param('mha-L_m', lambda: _mha(Q, _rand(2, 0, 4), _rand(2, 0, 4)),
                 [(2, 3, 6), (2, 2, 3, 0)], id="mha-L_m"),
    pytest.param('mhda-L_q', lambda: fn.multi_head_dot_attn(_rand(2, 2, 0, 4), _rand(2, 2, 5, 4),
                                                            _rand(2, 2, 5, 5))[0], [(2, 0, 10)],
                 id="mhda-L_q"),
]


@pytest.mark.parametrize('case_id,call,shapes', [
    c if hasattr(c, 'marks') else pytest.param(*c, id=c[0]) for c in EMPTY_CASES])
def test_empty_axes(case_id, call, shapes):
    out = call()
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    assert [o.shape for o in outs] == shapes
    for o in outs:
        assert onp.all(onp.isfinite(o.asnumpy()))


# --------------------------------------------------------------------------------------------
# float16: finite outputs and gradients with fully masked rows, scores of magnitude 1e4 and
# causal masks combined with left padding; unmasked results match float32.

F16_TOL = dict(rtol=2e-2, atol=2e-2)


def _large_inputs(rng, b, lq, lm, c, cv, big=True):
    """q and k whose dot products reach about 1e4 in magnitude."""
    q = rng.normal(size=(b, lq, c)) * (30.0 if big else 1.0)
    k = rng.normal(size=(b, lm, c)) * (30.0 if big else 1.0)
    return [onp.asarray(x, 'float16').astype('float32') for x in
            (q, k, rng.normal(size=(b, lm, cv)))]


def _run(block, inputs, dtype):
    arrays = [np.array(x, dtype=dtype if x.dtype.kind == 'f' else x.dtype) for x in inputs]
    floats = [a for a in arrays if a.dtype.kind == 'f']
    for a in floats:
        a.attach_grad()
    with autograd.record():
        out = block(*arrays)
        out = [o for o in (out if isinstance(out, (list, tuple)) else [out])]
        flat = [o for o in out if not isinstance(o, list)]
        total = sum((o.astype('float32') * (i + 1)).sum() for i, o in enumerate(flat))
    total.backward()
    return [o.asnumpy() for o in flat], [a.grad.asnumpy() for a in floats]


def _check_float16(block, inputs):
    out16, grads16 = _run(block, inputs, 'float16')
    out32, _ = _run(block, inputs, 'float32')
    for a, b in zip(out16, out32):
        assert a.dtype == onp.float16
        assert onp.all(onp.isfinite(a))
        onp.testing.assert_allclose(a.astype('float32'), b, **F16_TOL)
    for g in grads16:
        assert g.dtype == onp.float16 and onp.all(onp.isfinite(g))


@pytest.mark.parametrize('name', ['dot', 'additive', 'multihead'])
def test_float16_blocks_fully_masked_and_large_scores(name):
    rng = onp.random.RandomState(0)
    q, k, v = _large_inputs(rng, 2, 3, 5, 8, 4, big=name == 'dot')
    valid_length = onp.array([0, 3], 'int32')                 # sample 0: every row fully masked
    block = {'dot': lambda: cells.DotProductAttention(),
             'additive': lambda: cells.AdditiveAttention(6),
             'multihead': lambda: cells.MultiHeadAttention(8, 2)}[name]()
    block.initialize(mx.init.Normal(0.3))
    _check_float16(block, [q, k, v, valid_length])
    context, _ = _run(block, [q, k, v, valid_length], 'float16')[0]
    assert onp.all(context[0] == 0) if name != 'multihead' else True


@pytest.mark.parametrize('layout', ['NKT', 'NTK', 'TNK'])
def test_float16_cell_causal_with_left_padding(layout):
    """Causal mask AND a left-padding key mask: the first query rows of a left-padded sample see
    only padding, so they are fully masked; scores reach 1e4."""
    rng = onp.random.RandomState(1)
    b, heads, length, c = 2, 2, 6, 4
    causal = ga.gen_self_attn_mask(np.zeros((b, length, 1)), attn_type='causal').asnumpy()
    pad = onp.ones((b, 1, length), bool)
    pad[1, 0, :3] = False                                      # sample 1: 3 left-padded tokens
    mask = (causal & pad).astype('float32')
    assert not mask[1, 0].any()
    shape = {'NKT': (b, heads, length, c), 'NTK': (b, length, heads, c),
             'TNK': (length, b, heads, c)}[layout]
    q, k, v = [onp.asarray(rng.normal(size=shape) * s, 'float16').astype('float32')
               for s in (40.0, 40.0, 1.0)]
    _check_float16(cells.MultiHeadAttentionCell(layout=layout), [q, k, v, mask])


def test_float16_masked_softmax_scores_1e4():
    """C03 kind: float16 scores of magnitude 1e4, padding mask and a fully masked row."""
    scores = onp.asarray(onp.random.RandomState(2).uniform(-1e4, 1e4, size=(2, 4, 6)), 'float16')
    mask = onp.ones((2, 4, 6), bool)
    mask[0, :, 2:] = False
    mask[1, 3, :] = False
    x = np.array(scores, dtype='float16')
    x.attach_grad()
    with autograd.record():
        w = fn.masked_softmax(x, np.array(mask))
        (w * np.arange(6).astype('float16')).sum().backward()
    w = w.asnumpy()
    assert w.dtype == onp.float16 and onp.all(onp.isfinite(w))
    assert onp.all(w[~mask] == 0) and onp.all(w[1, 3] == 0)
    assert onp.all(onp.isfinite(x.grad.asnumpy()))
    ref = fn.masked_softmax(np.array(scores.astype('float32')), np.array(mask)).asnumpy()
    onp.testing.assert_allclose(w.astype('float32'), ref, **F16_TOL)


@pytest.mark.parametrize('name', ['attend', 'encoder'])
def test_float16_other_blocks(name):
    rng = onp.random.RandomState(3)
    if name == 'attend':
        block = ga.Attend(6)
        inputs = [rng.normal(size=(2, 3, 4)), rng.normal(size=(2, 5, 4)),
                  onp.array([3, 0], 'int32'), onp.array([5, 2], 'int32')]
    else:
        block = ga.TransformerEncoder(num_layers=1, units=8, hidden_size=16, num_heads=2)
        inputs = [rng.normal(size=(2, 5, 8)), onp.array([5, 0], 'int32')]
    block.initialize(mx.init.Normal(0.3))
    _check_float16(block, [onp.asarray(x, 'float16').astype('float32') if x.dtype.kind == 'f'
                           else x for x in inputs])


# --------------------------------------------------------------------------------------------
# Dropout is the identity outside training: imperative, hybridized, exported and reloaded.

def _dropout_blocks():
    q, k, v = Q, K, V
    vl = _int([5, 3])
    return {
        'dot': (cells.DotProductAttention(dropout=0.5), [q, k, v, vl]),
        'additive': (cells.AdditiveAttention(6, dropout=0.5), [q, k, v, vl]),
        'multihead': (cells.MultiHeadAttention(8, 2, dropout=0.5), [q, k, v, vl]),
        'cell': (cells.MultiHeadAttentionCell(attention_dropout=0.5, layout='NKT'),
                 [_rand(2, 2, 3, 4), _rand(2, 2, 5, 4), _rand(2, 2, 5, 6),
                  np.ones((2, 1, 5))]),
        'nli': (ga.DecomposableAttention(20, 8, 8, dropout=0.5),
                [_int([[1, 2, 3]] * 2), _int([[4, 5, 6, 7]] * 2), _int([3, 2]), _int([4, 1])]),
        'encoder': (ga.TransformerEncoder(num_layers=1, units=4, hidden_size=8, num_heads=2,
                                          dropout=0.5, attention_dropout=0.5),
                    [_rand(2, 5, 4), vl]),
    }


def _outputs(block, inputs):
    out = block(*inputs)
    flat = []
    for o in (out if isinstance(out, (list, tuple)) else [out]):
        flat.extend(o if isinstance(o, list) else [o])
    return [o.asnumpy() for o in flat]


@pytest.mark.parametrize('name', ['dot', 'additive', 'multihead', 'cell', 'nli', 'encoder'])
def test_dropout_identity_at_inference(name, tmp_path):
    """C16: two inference calls agree (imperative, hybridized, after export and reload) and equal
    the same block without dropout; inside record(train_mode=True) the outputs differ."""
    block, inputs = _dropout_blocks()[name]
    block.initialize(mx.init.Normal(0.5))
    first = _outputs(block, inputs)
    for a, b in zip(first, _outputs(block, inputs)):
        onp.testing.assert_array_equal(a, b)
    with autograd.record(train_mode=True):
        trained = _outputs(block, inputs)
    assert any(not onp.allclose(a, b) for a, b in zip(first, trained))
    block.hybridize(static_alloc=True)
    for _ in range(2):
        for a, b in zip(_outputs(block, inputs), first):
            onp.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    export_block(block, str(tmp_path / name), ['x%d' % i for i in range(len(inputs))],
                 [str(x.dtype) for x in inputs])
    reloaded, _ = import_block(str(tmp_path / name))
    once, twice = _outputs(reloaded, inputs), _outputs(reloaded, inputs)
    for a, b, c in zip(once, twice, first):
        onp.testing.assert_array_equal(a, b)
        onp.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-6)


def test_dropout_reseeded_from_seed_and_step_is_repeatable():
    """common.seed_step(seed, step) makes dropout masks a function of (seed, step) only."""
    block = cells.DotProductAttention(dropout=0.5)
    runs = []
    for _ in range(2):
        masks = []
        for step in (0, 1, 0):
            common.seed_step(7, step)
            with autograd.record(train_mode=True):
                masks.append(block(Q, K, V)[1].asnumpy())
        runs.append(masks)
    for a, b in zip(*runs):
        onp.testing.assert_array_equal(a, b)
    onp.testing.assert_array_equal(runs[0][0], runs[0][2])
    assert not onp.array_equal(runs[0][0], runs[0][1])


# --------------------------------------------------------------------------------------------
# Scripts: determinism with a fixed seed; malformed data is reported without damaging outputs.

def _script(name, args, timeout=300):
    env = dict(os.environ, OMP_NUM_THREADS='1')
    return subprocess.run([sys.executable, str(ROOT / 'scripts' / name)] + list(args),
                          capture_output=True, text=True, env=env, cwd=str(ROOT),
                          timeout=timeout)


NLI_TINY = ['--max-train', '120', '--max-steps', '4', '--epochs', '1', '--batch-size', '16',
            '--num-hiddens', '12', '--threads', '1', '--no-progress', '--seed', '3']


def _drop_timing(metrics):
    """Metrics without timings (keys naming seconds, time or elapsed) and output paths (prefix)."""
    if isinstance(metrics, list):
        return [_drop_timing(m) for m in metrics]
    if not isinstance(metrics, dict):
        return metrics
    return {k: _drop_timing(v) for k, v in metrics.items()
            if not any(t in k for t in ('seconds', 'time', 'elapsed', 'per_second', 'prefix'))}


def test_train_nli_deterministic_with_fixed_seed(tmp_path):
    runs = []
    for i in range(2):
        result = _script('train_nli.py', NLI_TINY + ['--model-dir', str(tmp_path / str(i))])
        assert result.returncode == 0, result.stderr[-3000:]
        runs.append(json.loads((tmp_path / str(i) / 'metrics.json').read_text()))
    assert _drop_timing(runs[0]) == _drop_timing(runs[1])


def _precious(folder):
    """An output folder holding a result that a failing run must not touch."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / 'metrics.json').write_text('{"f1": 61.5}')
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def _bad_squad(tmp_path):
    data = json.loads(_squad_json(0))
    data['data'][0]['paragraphs'][0]['qas'][0]['answers'][0]['answer_start'] = 6
    path = tmp_path / 'train.json'
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize('case', ['missing', 'bad-json', 'bad-offset'])
def test_run_squad_reports_bad_data_file(tmp_path, case):
    out = tmp_path / 'out'
    before = _precious(out)
    path = {'missing': tmp_path / 'absent.json', 'bad-json': tmp_path / 'broken.json',
            'bad-offset': _bad_squad(tmp_path)}[case]
    if case == 'bad-json':
        path.write_text('{"data": [{"title": "T", ')
    result = _script('run_squad.py', ['--train-file', str(path), '--extra-train-file', '',
                                      '--output-dir', str(out), '--threads', '1'])
    assert result.returncode != 0
    assert 'Traceback' not in result.stderr, result.stderr[-3000:]
    assert str(path) in result.stderr, result.stderr[-3000:]
    if case == 'bad-offset':
        assert "question id='q1'" in result.stderr and 'answer_start=6' in result.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


@pytest.mark.parametrize('case', ['bad-label', 'malformed'])
def test_train_nli_reports_bad_data_file(tmp_path, case):
    out = tmp_path / 'out'
    before = _precious(out)
    path = tmp_path / 'train.jsonl'
    good = json.dumps({'gold_label': 'neutral', 'sentence1': 'a b', 'sentence2': 'c'})
    bad = (json.dumps({'gold_label': 'maybe', 'sentence1': 'a', 'sentence2': 'b'})
           if case == 'bad-label' else '{"gold_label": "neutral", ')
    path.write_text(good + '\n' + bad + '\n')
    result = _script('train_nli.py', ['--train', str(path), '--model-dir', str(out),
                                      '--threads', '1', '--no-progress'])
    assert result.returncode != 0
    assert 'Traceback' not in result.stderr, result.stderr[-3000:]
    err = result.stderr
    assert str(path) in err and ('line 2 of' in err or str(path) + ':2' in err), err[-3000:]
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
