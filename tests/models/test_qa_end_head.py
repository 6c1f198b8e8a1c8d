"""The conditional end head of ModelForQAConditional (gluon_attention/models/qa.py), whose first
dense layer multiplies each start and each token once instead of every [start; token] pair.

Checked against a float64 NumPy oracle that builds the pairs (end log-probabilities and the
gradient of the first layer's weight, imperative and hybridized), against the head as a plain
``nn.HybridSequential`` on concatenated pairs (parameters saved by it load into the new head and
give the same logits and gradients within float32 rounding), and for its parameter names.

Sizes are distinct: B=2, N=3 starts, T=9, C=6, units=5 (oracle); B=3, N=5, T=17, C=12, units=8.
"""
import mxnet as mx
import numpy as onp
import pytest
from mxnet import autograd, np
from mxnet.gluon import HybridBlock, nn

import reference as ref
from conftest import HYBRID_MODES, hybridize_mode
from gluon_attention.core.functional import select_vectors_by_position
from gluon_attention.core.softmax import masked_log_softmax
from gluon_attention.models.qa import ModelForQAConditional

EPS = 1e-12                     # ModelForQAConditional's default layer_norm_eps


@mx.util.use_np
class EndLogits(HybridBlock):
    """``model.get_end_logits`` as a block, so that it can be hybridized alone."""

    def __init__(self, model, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.model = model

    def hybrid_forward(self, F, embedding, starts, p_mask):
        return self.model.get_end_logits(embedding, starts, p_mask)


def _head(units, seed=7):
    """The QA head on an empty backbone (get_end_logits never calls it), weights N(0, 0.5)."""
    mx.random.seed(seed)
    model = ModelForQAConditional(nn.HybridSequential(), units=units, dropout=0.0)
    model.initialize(mx.init.Normal(0.5))
    return model


def _case(batch, num_starts, length, channels, seed=0):
    """Embeddings, start positions (repeats and [CLS] included), p_mask (CLS + context), and a
    random upstream gradient for the end log-probabilities."""
    rng = onp.random.RandomState(seed)
    embedding = rng.normal(size=(batch, length, channels))
    starts = rng.randint(0, length, size=(batch, num_starts))
    starts[:, 0], starts[:, 1] = 0, starts[:, 2]
    p_mask = (rng.uniform(size=(batch, length)) < 0.7).astype('float32')
    p_mask[:, 0] = 1
    head = rng.normal(size=(batch, num_starts, length))
    return embedding, starts, p_mask, head


def _pairs(embedding, starts):
    """(B, N, T, 2C) float64 [embedding[b, starts[b, n]]; embedding[b, t]]."""
    start = onp.take_along_axis(embedding, starts[:, :, None], axis=1)          # (B, N, C)
    shape = starts.shape + embedding.shape[1:]
    return onp.concatenate([onp.broadcast_to(start[:, :, None], shape),
                            onp.broadcast_to(embedding[:, None], shape)], axis=-1)


def _oracle(params, embedding, starts, p_mask, head):
    """float64 end log-probabilities (B, N, T) and d sum(head * logits over p_mask) / d W1."""
    w1, b1, gamma, beta, w2, b2 = (ref.f64(params[k]) for k in
                                   ('0.weight', '0.bias', '2.gamma', '2.beta', '3.weight',
                                    '3.bias'))
    pairs = _pairs(embedding, starts)
    hidden = onp.tanh(ref.dense(pairs, w1, b1))                                # (B, N, T, U)
    scores = ref.dense(ref.layer_norm(hidden, gamma, beta, EPS), w2, b2)[..., 0]
    keep = p_mask[:, None, :]
    grad_scores = ref.masked_log_softmax_vjp(scores, keep, head)
    grad_normed = grad_scores[..., None] * w2[0]
    grad_hidden = ref.layer_norm_vjp(hidden, gamma, grad_normed, EPS)[0]
    grad_w1 = onp.einsum('bntu,bntc->uc', grad_hidden * (1 - hidden ** 2), pairs)
    return ref.masked_log_softmax(scores, keep), grad_w1


def _run(block, weight, embedding, starts, p_mask, head):
    """Logits and the gradient of ``weight`` for the loss sum(head * logits over p_mask)."""
    arrays = (np.array(embedding, dtype='float32'), np.array(starts, dtype='int32'),
              np.array(p_mask, dtype='float32'))
    keep = np.array(onp.broadcast_to(p_mask[:, None] > 0, head.shape))
    with autograd.record():
        logits = block(*arrays)
        loss = (np.where(keep, logits, np.zeros_like(logits)) *
                np.array(head, dtype='float32')).sum()
    loss.backward()
    return logits.asnumpy(), weight.grad().asnumpy()


def _end_params(model):
    return {k: v.data() for k, v in model.end_scores._collect_params_with_prefix().items()}  # pylint: disable=protected-access


@pytest.mark.parametrize('mode', HYBRID_MODES)
def test_end_logits_and_first_weight_gradient_match_float64_pair_oracle(mode):
    embedding, starts, p_mask, head = _case(2, 3, 9, 6)
    model = _head(5)
    block = EndLogits(model)
    weight = model.end_scores[0].weight
    _run(block, weight, embedding, starts, p_mask, head)    # shapes (the block sees all heads)
    hybridize_mode(block, mode)
    for _ in range(2):                 # the second call runs the built graph
        logits, grad = _run(block, weight, embedding, starts, p_mask, head)
        want, want_grad = _oracle(_end_params(model), embedding, starts, p_mask, head)
        assert onp.all(logits[onp.broadcast_to(p_mask[:, None] == 0, logits.shape)] == -onp.inf)
        onp.testing.assert_allclose(logits, want, rtol=1e-5, atol=1e-5)
        onp.testing.assert_allclose(grad, want_grad, rtol=1e-4, atol=1e-4)
    # a repeated start gives the same end distribution
    onp.testing.assert_array_equal(logits[:, 1], logits[:, 2])


@mx.util.use_np
class ConcatEndHead(HybridBlock):
    """The end head as before: a plain ``nn.HybridSequential`` on the (B, N, T, 2C) pairs."""

    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.scores = nn.HybridSequential()
            self.scores.add(nn.Dense(units, flatten=False), nn.Activation('tanh'),
                            nn.LayerNorm(epsilon=EPS), nn.Dense(1, flatten=False))

    def hybrid_forward(self, F, embedding, starts, p_mask):
        start = F.np.expand_dims(select_vectors_by_position(embedding, starts), 2)  # (B, N, 1, C)
        tokens = F.np.expand_dims(embedding, 1)                                 # (B, 1, T, C)
        pairs = F.np.concatenate([start + F.np.zeros_like(tokens),
                                  tokens + F.np.zeros_like(start)], axis=-1)
        scores = F.np.squeeze(self.scores(pairs), -1)
        return masked_log_softmax(scores, F.np.expand_dims(p_mask, 1))


@pytest.mark.parametrize('mode', ['imperative', 'hybridize'])
def test_parameters_of_the_concatenating_head_load_and_give_its_logits(tmp_path, mode):
    """Parameters saved from a concatenating head load into the new end head unchanged, and both
    formulations agree on logits and on the first weight's gradient within float32 rounding."""
    embedding, starts, p_mask, head = _case(3, 5, 17, 12, seed=1)
    old = ConcatEndHead(8)
    old.initialize(mx.init.Normal(0.3))
    old_logits, old_grad = _run(hybridize_mode(old, mode), old.scores[0].weight, embedding,
                                starts, p_mask, head)
    old.scores.save_parameters(str(tmp_path / 'end.params'))
    model = _head(8, seed=11)
    model.end_scores.load_parameters(str(tmp_path / 'end.params'))
    new = hybridize_mode(EndLogits(model), mode)
    logits, grad = _run(new, model.end_scores[0].weight, embedding, starts, p_mask, head)
    finite = onp.isfinite(old_logits)
    onp.testing.assert_array_equal(onp.isfinite(logits), finite)
    onp.testing.assert_allclose(logits[finite], old_logits[finite], rtol=1e-5, atol=1e-5)
    onp.testing.assert_allclose(grad, old_grad, rtol=1e-4, atol=1e-5)


def test_end_head_parameter_names_and_shapes_are_those_of_the_dense_layout():
    """Structural names (saved files) and MXNet names (the Dense counter of the model's scope)."""
    model = _head(5)
    EndLogits(model)(*[np.array(a, dtype=d) for a, d in
                       zip(_case(2, 3, 9, 6)[:3], ('float32', 'int32', 'float32'))])
    shapes = {k: v.shape for k, v in model._collect_params_with_prefix().items()  # pylint: disable=protected-access
              if k.startswith('end_scores.')}
    assert shapes == {'end_scores.0.weight': (5, 12), 'end_scores.0.bias': (5,),
                      'end_scores.2.gamma': (5,), 'end_scores.2.beta': (5,),
                      'end_scores.3.weight': (1, 5), 'end_scores.3.bias': (1,)}
    prefix = model.prefix
    assert model.end_scores[0].weight.name == prefix + 'dense1_weight'
    assert model.end_scores[3].weight.name == prefix + 'dense2_weight'
    assert model.answerable_scores[0].weight.name == prefix + 'dense3_weight'
