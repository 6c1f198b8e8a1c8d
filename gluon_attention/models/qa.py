"""Extractive question answering head with answerable logits (SQuAD 2.0).

Models p(start) * p(end | start) * p(answerable), the conditional head of GluonNLP master's
``ModelForQAConditionalV1`` (Rajpurkar et al. 2018 for the task), in this library's mask
polarity: ``p_mask`` is 1 where a token may be a start or end position (the [CLS] token, which
stands for the null answer, and the context tokens) and 0 elsewhere (query, [SEP], padding).

Both blocks check a call's arrays (the backbone's through its own ``check_inputs`` when it has
one, ``p_mask`` and positions here) before any graph runs, hybridized too.

Glossary: B batch, T sequence length, C hidden size, N start candidates per sequence.
"""
import mxnet as mx
from mxnet.gluon import nn

from .. import _checks
from ..core._ops import float32_on_cpu, get_F
from ..core.base import CheckedBlock
from ..core.functional import select_vectors_by_position
from ..core.fused import refuse_off_cpu
from ..core.fused_rowwise import ResidualLayerNorm
from ..core.kernels import Kernels, from_legacy
from ..core.softmax import masked_log_softmax, masked_softmax

__all__ = ['ModelForQAConditional', 'QAInference', 'qa_loss', 'qa_loss_parts']


def _dense(units, kind=nn.Dense):
    return kind(units, flatten=False, weight_initializer=mx.init.Normal(0.02))


@mx.util.use_np
class _PairDense(nn.Dense):
    """``nn.Dense(units, flatten=False)`` on every [start; token] pair, without building the
    pairs: with ``weight = [W_s | W_t]`` split along its input axis, ``weight [s; t] + bias =
    (W_s s + bias) + W_t t``, so each start and each token is multiplied once.

    Inputs: start (B, N, C) and tokens (B, T, C) float32. Returns (B, N, T, units) float32.
    The parameters are ``weight`` (units, 2C) and ``bias`` (units,), named as ``nn.Dense``'s
    (checkpoints of the head that concatenated the pairs load unchanged).
    """

    def _alias(self):
        return 'dense'          # nn.Dense's parameter names

    def hybrid_forward(self, F, start, tokens, weight, bias=None):  # pylint: disable=arguments-differ
        # The start rows meet the whole weight with zeros in the token half (exactly W_s s,
        # N rows only): that product lets MXNet infer a deferred weight's (units, 2C) shape.
        padded = F.np.concatenate([start, F.np.zeros_like(start)], axis=-1)    # (B, N, 2C)
        start_part = F.npx.fully_connected(padded, weight, bias, num_hidden=self._units,
                                           flatten=False, no_bias=bias is None)
        token_weight = F.npx.slice(F.npx.reshape(weight, (-2, 2, -1)), (None, 1, None),
                                   (None, 2, None))                             # (units, 1, C)
        token_part = F.npx.fully_connected(tokens, F.np.squeeze(token_weight, 1), no_bias=True,
                                           num_hidden=self._units, flatten=False)  # (B, T, units)
        return F.np.expand_dims(start_part, 2) + F.np.expand_dims(token_part, 1)


class _PairSequential(nn.HybridSequential):
    """``nn.HybridSequential`` whose first block takes (start, tokens), the rest one array."""

    def hybrid_forward(self, F, start, tokens):  # pylint: disable=arguments-differ
        first, *rest = self._children.values()
        hidden = first(start, tokens)
        for block in rest:
            hidden = block(hidden)
        return hidden


def _check_head_inputs(model, tokens, token_types, valid_length, p_mask):
    """The backbone's own checks (when it has them), a 0/1 ``p_mask`` shaped like tokens, and
    CPU arrays for a head built with the fused LayerNorm."""
    backbone = model.backbone
    if getattr(model, 'fused_rowwise', False):
        refuse_off_cpu("{} built with rowwise='fused'".format(type(model).__name__),
                       "build it with Kernels(rowwise='composed') for arrays on other devices",
                       tokens=tokens)
    check_backbone = getattr(backbone, 'check_inputs', None)
    if check_backbone is not None:
        check_backbone(tokens, token_types, valid_length)
    _checks.check_rank('p_mask', p_mask, (2,))
    if p_mask.shape != tokens.shape:
        _checks.fail('p_mask must have the shape (B, T) of tokens {}'.format(tokens.shape),
                     **{'p_mask.shape': p_mask.shape})
    _checks.check_mask(p_mask, tokens.shape, 'p_mask')


@mx.util.use_np
class ModelForQAConditional(CheckedBlock):
    """A backbone plus start, conditioned end and answerable heads.

    Parameters
    ----------
    backbone : HybridBlock
        Called ``backbone(tokens, token_types, valid_length)`` -> contextual embeddings
        (B, T, C) float32, position 0 being [CLS] (e.g. :class:`gluon_attention.BertEncoder`).
    units : int
        Hidden width of the end and answerable heads.
    dropout : float in [0, 1)
        Dropout inside the answerable head.
    activation : str
        Activation of both heads (an ``nn.Activation`` name).
    layer_norm_eps : float
        Epsilon of the end head's LayerNorm.
    kernels : Kernels
        Its ``rowwise`` field: that LayerNorm as the fused operator of
        :mod:`gluon_attention.core.fused_rowwise` (CPU, float32). Resolved once, here: an
        'auto' field takes the backbone's resolved choice when it has one (its ``kernels``, a
        :class:`gluon_attention.BertEncoder`'s), else as :meth:`gluon_attention.Kernels.resolve`
        for the current context. A call on arrays off the CPU with rowwise 'fused' raises
        ValueError (build with ``Kernels(rowwise='composed')``). Default ``Kernels()``.
    fused_rowwise : bool or 'auto', optional
        Deprecated (DeprecationWarning): ``kernels=Kernels(rowwise=...)``.

    Training call ``(tokens (B, T) int32, token_types (B, T) int32, valid_length (B,) int32,
    p_mask (B, T) float32 0/1, start_position (B,) int32)`` returns
    ``(start_logits (B, T), end_logits (B, T), answerable_logits (B, 2))``: log-probabilities,
    the end conditioned on the given (gold) start, -inf where ``p_mask`` is 0; answerable class 0
    = answerable, class 1 = impossible.

    float16: the heads keep float32 parameters; a float16 contextual embedding on a CPU (where
    MXNet 1.9.1 has no float16 GEMM) is computed in float32 and the logits return as float16.

    Raises ValueError when called on arrays (before any graph runs) for a ``p_mask`` that is not
    0/1 of shape (B, T), a ``start_position`` outside [0, T) or not (B,), and whatever the
    backbone's ``check_inputs`` refuses.
    """

    def __init__(self, backbone, units=384, dropout=0.1, activation='tanh',
                 layer_norm_eps=1e-12, kernels=Kernels(), fused_rowwise=None, **kwargs):
        super().__init__(**kwargs)
        _checks.check_positive_int('units', units)
        _checks.check_probability('dropout', dropout)
        like = getattr(backbone, 'kernels', None)
        self.kernels = from_legacy(type(self).__name__, kernels, fused_rowwise=fused_rowwise) \
            .resolve(like=like if isinstance(like, Kernels) else None)
        self.fused_rowwise = self.kernels.rowwise == 'fused'   # read by the call checks
        with self.name_scope():
            self.backbone = backbone
            self.start_scores = _dense(1)
            self.end_scores = _PairSequential(prefix='end_')
            self.end_scores.add(_dense(units, _PairDense), nn.Activation(activation),
                                ResidualLayerNorm(layer_norm_eps, units,
                                                  kernels=self.kernels), _dense(1))
            self.answerable_scores = nn.HybridSequential(prefix='answerable_')
            self.answerable_scores.add(_dense(units), nn.Activation(activation),
                                       nn.Dropout(dropout), _dense(2))

    def check_inputs(self, tokens, token_types, valid_length, p_mask, start_position):  # pylint: disable=arguments-differ
        _check_head_inputs(self, tokens, token_types, valid_length, p_mask)
        _checks.check_rank('start_position', start_position, (1,))
        _checks.check_valid_length(start_position, tokens.shape[1] - 1, 'start_position',
                                   batch_size=tokens.shape[0])

    def _start_scores(self, contextual_embedding):
        F = get_F(contextual_embedding)
        return F.np.squeeze(self.start_scores(contextual_embedding), -1)        # (B, T)

    @float32_on_cpu
    def get_start_logits(self, contextual_embedding, p_mask):
        """(B, T, C) embeddings, (B, T) p_mask -> (B, T) start log-probabilities."""
        return masked_log_softmax(self._start_scores(contextual_embedding), p_mask)

    @float32_on_cpu
    def get_end_logits(self, contextual_embedding, start_positions, p_mask):
        """End log-probabilities conditioned on each start.

        contextual_embedding (B, T, C), start_positions int (B, N), p_mask (B, T)
        -> (B, N, T) log-probabilities over end positions. The end head scores every
        [start; token] pair; its first dense layer multiplies each start and each token once
        and adds the two (the pairs are never built).
        """
        F = get_F(contextual_embedding)
        start_feature = select_vectors_by_position(contextual_embedding, start_positions)
        scores = self.end_scores(start_feature, contextual_embedding)             # (B, N, T, 1)
        scores = F.np.squeeze(scores, -1)                                         # (B, N, T)
        return masked_log_softmax(scores, F.np.expand_dims(p_mask, 1))

    @float32_on_cpu
    def get_answerable_logits(self, contextual_embedding, p_mask):
        """(B, T, C), (B, T) -> (B, 2) log-probabilities (0 answerable, 1 impossible).

        Pools the tokens with the masked softmax of the start scores, joins the [CLS] vector.
        """
        F = get_F(contextual_embedding)
        weights = masked_softmax(self._start_scores(contextual_embedding), p_mask)  # (B, T)
        pooled = F.np.squeeze(F.npx.batch_dot(F.np.expand_dims(weights, 1),
                                              contextual_embedding), 1)          # (B, C)
        cls = F.np.squeeze(F.npx.slice(contextual_embedding, (None, 0, None),
                                       (None, 1, None)), 1)                      # (B, C)
        scores = self.answerable_scores(F.np.concatenate([pooled, cls], axis=-1))
        return F.npx.log_softmax(scores, axis=-1)

    def hybrid_forward(self, F, tokens, token_types, valid_length, p_mask, start_position):  # pylint: disable=arguments-differ
        embedding = self.backbone(tokens, token_types, valid_length)
        start_logits = self.get_start_logits(embedding, p_mask)
        end_logits = self.get_end_logits(embedding, F.np.expand_dims(start_position, -1), p_mask)
        end_logits = F.np.squeeze(end_logits, 1)                                 # (B, T)
        return start_logits, end_logits, self.get_answerable_logits(embedding, p_mask)

    def inference(self, tokens, token_types, valid_length, p_mask, start_top_n=5, end_top_n=5):
        """Beam over starts; see :class:`QAInference` for the outputs."""
        return decode_heads(self, self.backbone(tokens, token_types, valid_length), p_mask,
                            start_top_n, end_top_n)


def decode_heads(model, embedding, p_mask, start_top_n, end_top_n):
    """The inference computation shared by :meth:`ModelForQAConditional.inference` and
    :class:`QAInference` (works imperatively and in a graph)."""
    F = get_F(embedding)
    start_logits = model.get_start_logits(embedding, p_mask)                     # (B, T)
    start_top_logits, start_top_index = F.npx.topk(start_logits, k=start_top_n, axis=-1,
                                                   ret_typ='both')              # (B, Ns)
    end_logits = model.get_end_logits(embedding, start_top_index, p_mask)        # (B, Ns, T)
    end_top_logits, end_top_index = F.npx.topk(end_logits, k=end_top_n, axis=-1,
                                               ret_typ='both')                  # (B, Ns, Ne)
    answerable_logits = model.get_answerable_logits(embedding, p_mask)           # (B, 2)
    return start_top_logits, start_top_index, end_top_logits, end_top_index, answerable_logits


@mx.util.use_np
class QAInference(CheckedBlock):
    """The exportable inference graph of a :class:`ModelForQAConditional` or of a
    :class:`~gluon_attention.models.qa_span.ModelForQASpan` (a plain start/end head, GluonNLP
    0.10's SQuAD model): the same five outputs either way.

    Call ``(tokens (B, T) int32, token_types (B, T) int32, valid_length (B,) int32,
    p_mask (B, T) float32)`` and get ``start_top_logits (B, Ns)``, ``start_top_index (B, Ns)``
    (float32), ``end_top_logits (B, Ns, Ne)``, ``end_top_index (B, Ns, Ne)`` (float32) and
    ``answerable_logits (B, 2)``. No end >= start or length constraint is applied here: span
    decoding does that. For a ``ModelForQASpan`` the outputs are its best
    ``start_top_n * end_top_n`` spans, one end per start (Ns = ``start_top_n * end_top_n``,
    Ne = 1; see :func:`~gluon_attention.models.qa_span.top_spans`). Raises ValueError when
    called on arrays with T < ``start_top_n`` or
    ``end_top_n``, or as :class:`ModelForQAConditional` on ``p_mask`` and the backbone inputs.
    """

    def __init__(self, model, start_top_n=5, end_top_n=5, **kwargs):
        super().__init__(**kwargs)
        self._top_n = (_checks.check_positive_int('start_top_n', start_top_n),
                       _checks.check_positive_int('end_top_n', end_top_n))
        with self.name_scope():
            self.model = model

    @property
    def kernels(self):
        """The resolved kernel choice of the model it runs (:class:`gluon_attention.Kernels`);
        the graph adds no kernel of its own."""
        return self.model.kernels

    def check_inputs(self, tokens, token_types, valid_length, p_mask):  # pylint: disable=arguments-differ
        _check_head_inputs(self.model, tokens, token_types, valid_length, p_mask)
        if tokens.ndim == 2 and tokens.shape[1] < max(self._top_n):
            _checks.fail('the sequence length T must be at least start_top_n and end_top_n '
                         '{}'.format(self._top_n), **{'tokens.shape': tokens.shape})

    def hybrid_forward(self, F, tokens, token_types, valid_length, p_mask):  # pylint: disable=arguments-differ
        embedding = self.model.backbone(tokens, token_types, valid_length)
        plain = getattr(self.model, 'inference_outputs', None)     # ModelForQASpan
        if plain is not None:
            return plain(embedding, p_mask, *self._top_n)
        return decode_heads(self.model, embedding, p_mask, *self._top_n)


def _check_loss_inputs(start_logits, start_position, end_position, is_impossible, **_):
    """On arrays: gold positions in [0, T) and labels in {0, 1}, one per batch row (npx.pick
    would silently clip an out-of-range index)."""
    if _checks.is_symbol(start_logits):
        return
    _checks.check_rank('start_logits', start_logits, (2,))
    batch, length = start_logits.shape
    for name, x, high in (('start_position', start_position, length - 1),
                          ('end_position', end_position, length - 1),
                          ('is_impossible', is_impossible, 1)):
        _checks.check_rank(name, x, (1,))
        _checks.check_valid_length(x, high, name, batch_size=batch)


@_checks.validated_by(_check_loss_inputs)
def qa_loss(start_logits, end_logits, answerable_logits, start_position, end_position,
            is_impossible, answerable_weight=1.0, sample_weight=None):
    """Mean negative log-likelihood of the gold span plus the weighted answerable loss.

    start_logits, end_logits (B, T) and answerable_logits (B, 2) are log-probabilities;
    start_position, end_position, is_impossible are int (B,). Impossible features point at
    [CLS] (position 0). ``sample_weight`` (B,) float, optional: each feature's weight in the
    answerable term (0 leaves the answerable head untrained on it). Imperatively, positions
    outside [0, T), labels other than 0/1 or a batch size other than B raise ValueError.
    Returns a () array: ``-0.5 * mean(start[gold] + end[gold])
    - answerable_weight * mean(sample_weight * answerable[is_impossible])``, the sum of the two
    terms of :func:`qa_loss_parts`.
    """
    span, answerable = qa_loss_parts(start_logits, end_logits, answerable_logits,
                                     start_position, end_position, is_impossible,
                                     answerable_weight, sample_weight)
    return span + answerable


@_checks.validated_by(_check_loss_inputs)
def qa_loss_parts(start_logits, end_logits, answerable_logits, start_position, end_position,
                  is_impossible, answerable_weight=1.0, sample_weight=None):
    """The two terms of :func:`qa_loss` (same arguments, same checks): (span, answerable).

    Returns two () arrays: the span loss ``-0.5 * mean(start[gold] + end[gold])`` and the
    weighted answerable loss ``-answerable_weight * mean(sample_weight *
    answerable[is_impossible])``; :func:`qa_loss` is their sum.
    """
    F = get_F(start_logits)
    span = F.npx.pick(start_logits, start_position, axis=-1) + \
        F.npx.pick(end_logits, end_position, axis=-1)
    answerable = F.npx.pick(answerable_logits, is_impossible, axis=-1)
    if sample_weight is not None:
        answerable = answerable * sample_weight
    return -0.5 * F.np.mean(span), -(answerable_weight * F.np.mean(answerable))
