"""Extractive QA with a plain start/end head: the model of GluonNLP 0.10's SQuAD fine-tuning
(``scripts/bert/finetune_squad.py``: ``Dense(2)`` over BERT's sequence output; Devlin et al.,
2019, section 4.2), converted by :func:`gluon_attention.convert.from_gluonnlp`.

Start and end scores are independent, so a span's score is ``start[s] + end[e]``; the best spans
are found over every pair at once (:func:`top_spans`) and given in the five outputs of
:class:`~gluon_attention.models.qa.QAInference`, so that span decoding, export, ONNX, INT8 and the
server treat both heads alike.

Glossary: B batch, T sequence length, D hidden size, K spans kept.
"""
import mxnet as mx

from .. import _checks
from ..core._ops import get_F
from ..core.base import CheckedBlock
from ..core.functional import select_vectors_by_position
from .heads import SpanHead

__all__ = ['ModelForQASpan', 'top_spans']

# Subtracted from the score of a pair that is not a valid span: far below any span's score
# (logits of trained heads are tens at most), small enough that float32 keeps the pair's own
# score, so such pairs rank by it too (never in a tie that two runtimes could break apart).
_EXCLUDED = 1e4


def _gather(F, scores, positions):
    """scores (B, T), positions (B, K) -> (B, K): ``scores[b, positions[b, k]]``."""
    picked = select_vectors_by_position(F.np.expand_dims(scores, -1), positions)   # (B, K, 1)
    return F.np.squeeze(picked, -1)


def top_spans(start, end, p_mask, top_k, max_answer_length, version_2=False):
    """The ``top_k`` best spans ``(s, e)`` by ``start[s] + end[e]`` as QAInference's outputs.

    A valid pair has ``p_mask`` 1 at both ends, neither at position 0 ([CLS], the null answer),
    and ``0 <= e - s < max_answer_length``; pairs that are not valid score 1e4 less (they come
    last, and span decoding, which checks the context range, drops them).

    Parameters
    ----------
    start, end : array (B, T) float32
        Start and end logits (unmasked).
    p_mask : array (B, T) float32
        1 where a token may be an answer position.
    top_k : int
        K, spans kept per sequence; at most T * T.
    max_answer_length : int
        Longest span, in tokens.
    version_2 : bool
        False: ``answerable_logits`` are ``(0, -inf)`` (null score difference -inf: never the
        null answer, SQuAD 1.1). True: ``(best span score, start[0] + end[0])``, so the null
        score difference is 0.10's ``score_null - best_non_null`` (per chunk).

    Returns
    -------
    tuple of arrays
        ``start_top_logits`` (B, K), ``start_top_index`` (B, K) float32, ``end_top_logits``
        (B, K, 1), ``end_top_index`` (B, K, 1) float32, ``answerable_logits`` (B, 2): span k
        is ``(start_top_index[:, k], end_top_index[:, k, 0])``, best first.
    """
    F = get_F(start)
    positions = F.npx.arange_like(start, axis=-1)                                 # (T,)
    answer = p_mask * F.np.minimum(positions, 1)                                  # no [CLS]
    width = F.np.expand_dims(positions, 0) - F.np.expand_dims(positions, 1)       # (T, T) e - s
    band = F.np.clip(width + 1, 0, 1) * F.np.clip(max_answer_length - width, 0, 1)
    allowed = F.np.expand_dims(answer, 2) * F.np.expand_dims(answer, 1) * band    # (B, T, T)
    scores = F.np.expand_dims(start, 2) + F.np.expand_dims(end, 1) + (allowed - 1) * _EXCLUDED
    top_scores, top_index = F.npx.topk(F.npx.reshape(scores, (-2, -5)), k=top_k, axis=-1,
                                       ret_typ='both')                             # (B, K)
    length = F.np.sum(F.np.ones_like(start), axis=-1, keepdims=True)              # (B, 1) T
    starts = F.np.floor(top_index.astype('float32') / length)
    ends = top_index.astype('float32') - starts * length
    pair = F.np.zeros_like(F.npx.slice(start, (None, 0), (None, 2)))              # (B, 2)
    second = pair + F.npx.arange_like(pair, axis=-1)                              # (0, 1)
    if version_2:      # (best span score, start[0] + end[0]), built without a concatenation
        first = F.npx.slice(top_scores, (None, 0), (None, 1))                     # (B, 1)
        null = F.npx.slice(start, (None, 0), (None, 1)) + F.npx.slice(end, (None, 0), (None, 1))
        answerable = first * (1 - second) + null * second
    else:              # (0, -inf): log(1) and log(0)
        answerable = F.np.log(1 - second)
    return (_gather(F, start, starts), starts, F.np.expand_dims(_gather(F, end, ends), -1),
            F.np.expand_dims(ends, -1), answerable)


@mx.util.use_np
class ModelForQASpan(CheckedBlock):
    """A backbone with a plain start/end head (:class:`~gluon_attention.models.heads.SpanHead`).

    Parameters
    ----------
    backbone : HybridBlock
        Called ``backbone(tokens, token_types, valid_length)`` -> hidden (B, T, D) float32
        (e.g. :class:`gluon_attention.BertEncoder`).
    head : SpanHead
        Its start and end logits.
    max_answer_length : int
        Longest span the inference outputs propose, in tokens (GluonNLP 0.10's default 30).
    version_2 : bool
        Whether the model was fine-tuned with unanswerable questions (SQuAD 2.0): its null
        answer is a span at [CLS] (see :func:`top_spans`).

    Call ``(tokens (B, T) int32, token_types (B, T) int32, valid_length (B,) int32)`` returns
    ``(start_logits, end_logits)``, float32 (B, T) each, unmasked. Raises ValueError (on arrays,
    before any graph runs) for what the backbone's ``check_inputs`` refuses, and from the
    constructor for a non-positive ``max_answer_length``; TypeError for a head of another kind.
    """

    def __init__(self, backbone, head, max_answer_length=30, version_2=False, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(head, SpanHead):
            _checks.fail_type('head must be a SpanHead', head=type(head).__name__)
        self.max_answer_length = _checks.check_positive_int('max_answer_length',
                                                            max_answer_length)
        self.version_2 = bool(version_2)
        self.fused_rowwise = False
        with self.name_scope():
            self.backbone = backbone
            self.head = head

    @property
    def kernels(self):
        """The backbone's resolved kernel choice (the head adds none), or None."""
        return getattr(self.backbone, 'kernels', None)

    def check_inputs(self, tokens, token_types, valid_length):  # pylint: disable=arguments-differ
        check_backbone = getattr(self.backbone, 'check_inputs', None)
        if check_backbone is not None:
            check_backbone(tokens, token_types, valid_length)

    def hybrid_forward(self, F, tokens, token_types, valid_length):  # pylint: disable=arguments-differ
        return self.head(self.backbone(tokens, token_types, valid_length))

    def inference_outputs(self, embedding, p_mask, start_top_n, end_top_n):
        """QAInference's five outputs from the backbone's hidden states (B, T, D): the
        ``start_top_n * end_top_n`` best spans (:func:`top_spans`)."""
        start, end = self.head(embedding)
        return top_spans(start, end, p_mask, start_top_n * end_top_n, self.max_answer_length,
                         self.version_2)

