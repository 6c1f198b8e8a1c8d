"""The conditional QA head (gluon_attention/qa.py): shapes, masking, normalisation, teacher forcing
against inference, float16, CLS kept selectable, span decoding,
hybridized == imperative, and the QAInference export round trip.

Sizes are distinct: B=3, T=11, C=14, units=10, vocab 29.
"""
import mxnet as mx
import numpy as onp
import pytest
from mxnet import autograd, np
from mxnet.gluon import HybridBlock, nn

from conftest import HYBRID_TOL, hybridize_mode
from gluon_attention.data.squad_decode import best_span
from gluon_attention.models.qa import ModelForQAConditional, QAInference, qa_loss
from gluon_attention.export.block import export_block, import_block

B, T, C, UNITS, VOCAB = 3, 11, 14, 10, 29
NEG_INF = -onp.inf


@mx.util.use_np
class TinyBackbone(HybridBlock):
    """Token + type embeddings, with the valid length mixed in (every graph input must be used)."""

    def __init__(self, units=C, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.word = nn.Embedding(VOCAB, units)
            self.kind = nn.Embedding(2, units)
            self.mix = nn.Dense(units, flatten=False, activation='tanh')

    def hybrid_forward(self, F, tokens, token_types, valid_length):
        x = self.word(tokens) + self.kind(token_types)                        # (B, T, C)
        scale = F.np.expand_dims(F.np.expand_dims(valid_length.astype('float32'), -1), -1)
        return self.mix(x) + 0.01 * scale


def _model(dropout=0.0, seed=3):
    mx.random.seed(seed)
    model = ModelForQAConditional(TinyBackbone(), units=UNITS, dropout=dropout)
    model.initialize(mx.init.Normal(0.5))
    return model


def _inputs(rng=None, batch=B, length=T):
    """[CLS] q q [SEP] context... [SEP] pad: p_mask 1 on CLS and the context tokens only."""
    rng = rng or onp.random.RandomState(0)
    tokens = rng.randint(1, VOCAB, size=(batch, length)).astype('int32')
    types = onp.zeros((batch, length), 'int32')
    valid = onp.array([length - (b % 3) for b in range(batch)], 'int32')
    p_mask = onp.zeros((batch, length), 'float32')
    for b in range(batch):
        types[b, 4:valid[b]] = 1
        p_mask[b, 0] = 1                       # CLS: the null answer
        p_mask[b, 4:valid[b] - 1] = 1          # context; the final [SEP] and padding stay 0
    return [np.array(a, dtype=a.dtype) for a in (tokens, types, valid, p_mask)]


def _start_positions(p_mask):
    """A valid (unmasked, non-CLS) gold start per row."""
    return np.array(onp.array([5 + b % 2 for b in range(p_mask.shape[0])]), dtype='int32')


def _logsumexp(x, axis=-1):
    x = onp.asarray(x, 'float64')
    top = onp.max(x, axis=axis, keepdims=True)
    return onp.squeeze(top, axis) + onp.log(onp.sum(onp.exp(x - top), axis=axis))


def test_forward_shapes_and_normalisation():
    model = _model()
    tokens, types, valid, p_mask = _inputs()
    start, end, answerable = model(tokens, types, valid, p_mask, _start_positions(p_mask))
    assert start.shape == (B, T) and end.shape == (B, T) and answerable.shape == (B, 2)
    blocked = p_mask.asnumpy() == 0
    for logits in (start.asnumpy(), end.asnumpy()):
        assert onp.all(logits[blocked] == NEG_INF)
        assert onp.all(onp.isfinite(logits[~blocked]))
        onp.testing.assert_allclose(_logsumexp(logits), 0.0, atol=1e-5)
    onp.testing.assert_allclose(_logsumexp(answerable.asnumpy()), 0.0, atol=1e-5)


def test_inference_shapes_and_masked_positions_never_chosen():
    model = _model()
    tokens, types, valid, p_mask = _inputs()
    ns, ne = 4, 3
    out = model.inference(tokens, types, valid, p_mask, ns, ne)
    s_logit, s_index, e_logit, e_index, answerable = [o.asnumpy() for o in out]
    assert s_logit.shape == s_index.shape == (B, ns)
    assert e_logit.shape == e_index.shape == (B, ns, ne)
    assert answerable.shape == (B, 2)
    keep = p_mask.asnumpy() > 0
    for b in range(B):
        assert keep[b, s_index[b].astype(int)].all()
        assert keep[b, e_index[b].astype(int)].all()
    assert onp.all(onp.isfinite(s_logit)) and onp.all(onp.isfinite(e_logit))
    onp.testing.assert_allclose(_logsumexp(answerable), 0.0, atol=1e-5)


def test_teacher_forced_end_logits_equal_inference_end_logits():
    """The end distribution given a start is the same in training (gold start) and inference."""
    model = _model()
    tokens, types, valid, p_mask = _inputs()
    ns, ne = 3, 4
    _, s_index, e_logit, e_index, _ = [o.asnumpy() for o in
                                       model.inference(tokens, types, valid, p_mask, ns, ne)]
    for i in range(ns):
        start = np.array(s_index[:, i].astype('int32'), dtype='int32')
        _, end, _ = model(tokens, types, valid, p_mask, start)
        picked = onp.take_along_axis(end.asnumpy(), e_index[:, i].astype(int), axis=-1)
        onp.testing.assert_allclose(picked, e_logit[:, i], rtol=1e-5, atol=1e-5)


def test_loss_gradients_finite_and_zero_at_masked_tokens():
    model = _model()
    tokens, types, valid, p_mask = _inputs()
    start_pos = _start_positions(p_mask)
    end_pos = start_pos + 1
    impossible = np.array(onp.array([0, 1, 0]), dtype='int32')
    with autograd.record():
        start, end, answerable = model(tokens, types, valid, p_mask, start_pos)
        loss = qa_loss(start, end, answerable, start_pos, end_pos, impossible)
    loss.backward()
    assert onp.isfinite(float(loss))
    for name, param in model.collect_params().items():
        assert onp.all(onp.isfinite(param.grad().asnumpy())), name


def test_loss_value_and_sample_weight():
    """qa_loss against a float64 NumPy computation; a 0 sample weight drops a feature from the
    answerable term (and only from it)."""
    rng = onp.random.RandomState(5)
    logp = lambda x: x - onp.log(onp.exp(x).sum(-1, keepdims=True))
    start, end, ans = logp(rng.normal(size=(3, 6))), logp(rng.normal(size=(3, 6))), \
        logp(rng.normal(size=(3, 2)))
    sp, ep, imp = onp.array([0, 2, 4]), onp.array([0, 3, 5]), onp.array([1, 0, 0])
    weight = onp.array([0.0, 1.0, 0.5])
    rows = onp.arange(3)
    span = -0.5 * (start[rows, sp] + end[rows, ep]).mean()
    args = [np.array(x, dtype='float32') for x in (start, end, ans)] + \
        [np.array(x, dtype='int32') for x in (sp, ep, imp)]
    got = qa_loss(*args, answerable_weight=0.7)
    onp.testing.assert_allclose(float(got), span - 0.7 * ans[rows, imp].mean(), rtol=1e-5)
    got = qa_loss(*args, 0.7, np.array(weight, dtype='float32'))
    onp.testing.assert_allclose(float(got), span - 0.7 * (weight * ans[rows, imp]).mean(),
                                rtol=1e-5)


def test_c04_float16_contextual_embedding():
    """QA head on a float16 (2, 16, 32) embedding with the 5 question and 4 padding
    positions blocked: finite loss and gradients, blocked positions -inf and never chosen,
    unmasked log-probs match float32 within 1e-2."""
    mx.random.seed(5)
    model = ModelForQAConditional(TinyBackbone(32), units=16)
    model.initialize(mx.init.Normal(0.1))
    rng = onp.random.RandomState(4)
    emb32 = np.array(rng.normal(size=(2, 16, 32)), dtype='float32')
    keep = onp.ones((2, 16), 'float32')
    keep[:, 1:6] = 0                                  # question
    keep[:, 12:] = 0                                  # padding
    p_mask = np.array(keep, dtype='float32')
    gold_start = np.array(onp.array([6, 6]), dtype='int32')
    gold_end = np.array(onp.array([8, 8]), dtype='int32')
    results = {}
    for dtype in ('float16', 'float32'):
        emb = emb32.astype(dtype)
        emb.attach_grad()
        with autograd.record():
            start = model.get_start_logits(emb, p_mask)
            end = mx.np.squeeze(model.get_end_logits(emb, mx.np.expand_dims(gold_start, -1),
                                                     p_mask), 1)
            answerable = model.get_answerable_logits(emb, p_mask)
            loss = qa_loss(start, end, answerable, gold_start, gold_end,
                           np.zeros((2,), dtype='int32'))
        loss.backward()
        assert start.dtype == end.dtype == answerable.dtype == onp.dtype(dtype)
        assert onp.isfinite(float(loss))
        assert onp.all(onp.isfinite(emb.grad.asnumpy()))
        for logits in (start, end):
            values = logits.asnumpy().astype('float64')
            assert onp.all(values[keep == 0] <= -1e4)
            assert keep[onp.arange(2), values.argmax(-1)].all()
        results[dtype] = (start.asnumpy(), end.asnumpy(), answerable.asnumpy())
    for half, full in zip(results['float16'], results['float32']):
        finite = onp.isfinite(full)
        onp.testing.assert_allclose(half[finite].astype('float32'), full[finite], atol=1e-2,
                                    rtol=1e-2)


def test_c19_cls_stays_selectable_across_doc_stride_chunks():
    """[CLS] q1 q2 [SEP] c1 c2 c3 [SEP] pad, p_mask 1 on CLS and context only, for two chunks of
    a long context: CLS start/end logits finite (the null score), answerable logits finite, and
    decoding never starts or ends a non-null span at CLS."""
    model = _model()
    tokens = np.array(onp.array([[1, 7, 8, 2, 11, 12, 13, 2, 0],
                                 [1, 7, 8, 2, 13, 14, 15, 2, 0]]), dtype='int32')
    types = np.array(onp.array([[0, 0, 0, 0, 1, 1, 1, 1, 0]] * 2), dtype='int32')
    valid = np.array(onp.array([8, 8]), dtype='int32')
    p_mask = np.array(onp.array([[1, 0, 0, 0, 1, 1, 1, 0, 0]] * 2), dtype='float32')
    start = model.get_start_logits(model.backbone(tokens, types, valid), p_mask).asnumpy()
    cls = np.zeros((2,), dtype='int32')
    _, end, answerable = model(tokens, types, valid, p_mask, cls)
    null_score = start[:, 0] + end.asnumpy()[:, 0]
    assert onp.all(onp.isfinite(null_score))
    assert onp.all(onp.isfinite(answerable.asnumpy()))
    for b in range(2):
        span = best_span(start[b], end.asnumpy()[b], p_mask.asnumpy()[b] * (onp.arange(9) > 0))
        assert span is not None and span[0] >= 4 and span[1] <= 6


def test_c18_decode_picks_best_valid_span():
    """Start [0,5,1,0], end [4,0,0,1], max_answer_length 3 -> (1, 3) with score 6."""
    assert best_span([0, 5, 1, 0], [4, 0, 0, 1], max_answer_length=3) == (1, 3, 6.0)


@pytest.mark.parametrize('mode', ['hybridize', 'static'])
def test_hybridized_equals_imperative(mode):
    tokens, types, valid, p_mask = _inputs()
    start_pos = _start_positions(p_mask)
    reference = [o.asnumpy() for o in _model()(tokens, types, valid, p_mask, start_pos)]
    hybrid = hybridize_mode(_model(), mode)
    for _ in range(2):
        out = [o.asnumpy() for o in hybrid(tokens, types, valid, p_mask, start_pos)]
        for a, b in zip(out, reference):
            onp.testing.assert_allclose(a, b, rtol=HYBRID_TOL, atol=HYBRID_TOL)
    inference = QAInference(_model(), 4, 3)
    expected = [o.asnumpy() for o in inference(tokens, types, valid, p_mask)]
    hybridize_mode(inference, mode)
    for a, b in zip(inference(tokens, types, valid, p_mask), expected):
        onp.testing.assert_allclose(a.asnumpy(), b, rtol=HYBRID_TOL, atol=HYBRID_TOL)


def test_qa_inference_export_reload(tmp_path):
    """Export the inference graph, reload it with SymbolBlock.imports, run other B and T."""
    inference = QAInference(_model(dropout=0.3), 3, 2)
    inference.hybridize(static_alloc=True)
    inference(*_inputs())
    paths = export_block(inference, str(tmp_path / 'qa'),
                         ['input_ids', 'token_types', 'valid_length', 'p_mask'],
                         ['int32', 'int32', 'int32', 'float32'])
    reloaded, spec = import_block(str(tmp_path / 'qa'))
    assert spec['input_names'][3] == 'p_mask' and paths['params'].endswith('.params')
    for batch, length in ((2, 9), (B, T), (4, 13)):
        inputs = _inputs(onp.random.RandomState(batch), batch, length)
        expected = [o.asnumpy() for o in inference(*inputs)]
        first = [o.asnumpy() for o in reloaded(*inputs)]
        second = [o.asnumpy() for o in reloaded(*inputs)]
        for a, b, c in zip(first, second, expected):
            onp.testing.assert_array_equal(a, b)          # dropout is the identity at inference
            onp.testing.assert_allclose(a, c, rtol=1e-6, atol=1e-6)
