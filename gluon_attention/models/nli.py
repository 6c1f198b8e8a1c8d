"""Decomposable attention for natural language inference (Parikh et al., 2016).

"A Decomposable Attention Model for Natural Language Inference", EMNLP 2016: attend (soft-align
each sentence to the other), compare (each token with its aligned phrase), aggregate (sum and
classify). Unlike the textbook version in Dive into Deep Learning (Zhang et al., "Natural
Language Inference: Using Attention"), which lets padding take part in the softmax and the sums,
padding is masked on both sides, so the logits do not depend on how much padding a batch has.

Dimension letters: B batch, L_A / L_B the lengths of sentences A (premise) and B (hypothesis),
C embedding size, H ``num_hiddens``. Sentence masks come from the core's builders
(:mod:`gluon_attention.core.masking`) and the alignment weights from its
:func:`gluon_attention.core.softmax.masked_softmax`; nothing here writes its own softmax or
fill. The blocks check a call's arrays once, before any graph runs (hybridized too).
"""
import mxnet as mx
from mxnet.gluon import nn

from .. import _checks
from ..core.base import CheckedBlock, Float32OnCPU, check_dense_inputs
from ..core.functional import zero_unattended
from ..core.masking import gen_mem_attn_mask, valid_length_to_mask
from ..core.softmax import masked_softmax

__all__ = ['Attend', 'Compare', 'Aggregate', 'DecomposableAttention']


def _feed_forward(num_hiddens, dropout, flatten):
    """Two ReLU layers, each preceded by dropout (the f, g and h of the paper)."""
    net = nn.HybridSequential()
    with net.name_scope():
        for _ in range(2):
            net.add(nn.Dropout(dropout),
                    nn.Dense(num_hiddens, activation='relu', flatten=flatten))
    return net


def _align(F, scores, mask):
    """Alignment weights from scores and mask, both (B, L_A, L_B).

    Returns ``(weights_b, weights_a)``, both (B, L_A, L_B): ``weights_b`` normalised over B's
    positions (axis 2), ``weights_a`` over A's positions (axis 1). Masked entries are exactly 0,
    and so are the fully masked rows/columns that padded positions (or a valid length 0) produce.
    """
    return masked_softmax(scores, mask, axis=-1), masked_softmax(scores, mask, axis=1)


def _zero_padding(F, data, valid_length):
    """data (B, L, C) with the rows at positions >= valid_length set to 0 (NaN included)."""
    mask = F.np.expand_dims(valid_length_to_mask(data, valid_length, axis=1), 1)   # (B, 1, L)
    return zero_unattended(data, mask)


def _check_sentences(A, B, valid_length_A, valid_length_B, names=('A', 'B'), rank=3):
    """Checks of a call's arrays: ranks, equal batch sizes, B and both sentence lengths at least
    1 (each sentence is the other's memory), lengths in range. ``names``: the two sentences'
    argument names, then (optionally) their lengths' (default ``valid_length_<sentence>``)."""
    name_a, name_b = names[:2]
    len_a, len_b = names[2:] or ('valid_length_' + name_a, 'valid_length_' + name_b)
    for name, x, ranks in ((name_a, A, (rank,)), (name_b, B, (rank,)),
                           (len_a, valid_length_A, (1,)), (len_b, valid_length_B, (1,))):
        if x is None:
            _checks.fail_type('{} is required (call blocks positionally)'.format(name),
                              **{name: None})
        _checks.check_rank(name, x, ranks)
    if not _checks.is_symbol(A):
        _checks.check_same_dim('batch sizes', **{name_a: (A, 0), name_b: (B, 0),
                                                 len_a: (valid_length_A, 0),
                                                 len_b: (valid_length_B, 0)})
        _checks.check_not_empty('the batch size B and both sentence lengths',
                                (A.shape[0], A.shape[1], B.shape[1]),
                                **{name_a + '.shape': A.shape, name_b + '.shape': B.shape})
        _checks.check_valid_length(valid_length_A, A.shape[1], len_a)
        _checks.check_valid_length(valid_length_B, B.shape[1], len_b)


@mx.util.use_np
class Attend(Float32OnCPU):
    """Soft alignment of two sentences (step 1, "attend", of Parikh et al., 2016), masked.

    Parameters
    ----------
    num_hiddens : int
        Width H of the shared feed-forward network f.
    dropout : float
        Dropout rate before each layer of f.

    Call ``(A, B, valid_length_A, valid_length_B)`` (positionally):

    - A : float32 (B, L_A, C); B : float32 (B, L_B, C)
    - valid_length_A, valid_length_B : (B,) int32/int64 (or integral float32), in [0, L_A] / [0, L_B]

    Returns ``(beta, alpha)``: beta float32 (B, L_A, C), the part of B aligned to each position of
    A; alpha float32 (B, L_B, C), the part of A aligned to each position of B. Padded positions of
    B get weight 0 in beta and padded positions of A weight 0 in alpha; rows of beta at padded
    positions of A (and of alpha at padded positions of B) are zeros, as is everything when the
    other sentence has valid length 0.

    Equivalent computation (NumPy, ``m`` the (B, L_A, L_B) 0/1 mask of valid pairs)::

        e = f(A) @ f(B).transpose(0, 2, 1)                          # (B, L_A, L_B)
        w_b = where(m, exp(e - max), 0); w_b /= max(w_b.sum(2, keepdims=True), tiny)
        w_a = where(m, exp(e - max), 0); w_a /= max(w_a.sum(1, keepdims=True), tiny)
        beta, alpha = w_b @ B, w_a.transpose(0, 2, 1) @ A

    Raises
    ------
    ValueError
        At construction for a bad ``num_hiddens`` or ``dropout``; when called on arrays
        (hybridized too, before the graph runs), for mismatched batch sizes, B = 0, L_A = 0 or
        L_B = 0, lengths outside their ranges, A and B of different feature sizes C, or a C
        other than that of the first call.
    """

    def __init__(self, num_hiddens, dropout=0.2, **kwargs):
        super().__init__(**kwargs)
        _checks.check_positive_int('num_hiddens', num_hiddens)
        _checks.check_probability('dropout', dropout)
        with self.name_scope():
            self.f = _feed_forward(num_hiddens, dropout, flatten=False)

    def _weights(self, F, A, B, valid_length_A, valid_length_B):
        """The alignment weights ``(weights_b, weights_a)``, both (B, L_A, L_B); see ``_align``."""
        scores = F.npx.batch_dot(self.f(A), self.f(B), transpose_b=True)  # (B, L_A, L_B)
        mask = gen_mem_attn_mask(B, valid_length_B, A, valid_length_A)     # (B, L_A, L_B)
        return _align(F, scores, mask)

    def check_inputs(self, A, B, valid_length_A, valid_length_B):  # pylint: disable=arguments-differ
        _check_sentences(A, B, valid_length_A, valid_length_B)
        _checks.check_same_dim('the feature sizes C of A and B', A=(A, 2), B=(B, 2))
        check_dense_inputs(('A', A, self.f[1]), ('B', B, self.f[1]))

    def hybrid_forward(self, F, A, B, valid_length_A, valid_length_B):
        weights_b, weights_a = self._weights(F, A, B, valid_length_A, valid_length_B)
        # Padded rows are zeroed too, so that even NaN padding cannot leak through 0 * NaN.
        B_valid = _zero_padding(F, B, valid_length_B)
        A_valid = _zero_padding(F, A, valid_length_A)
        beta = F.npx.batch_dot(weights_b, B_valid)                       # (B, L_A, C)
        alpha = F.npx.batch_dot(weights_a, A_valid, transpose_a=True)    # (B, L_B, C)
        return beta, alpha


@mx.util.use_np
class Compare(Float32OnCPU):
    """Compare each token with its aligned phrase (step 2 of Parikh et al., 2016).

    Parameters
    ----------
    num_hiddens : int
        Width H of the shared feed-forward network g.
    dropout : float

    Call ``(A, B, beta, alpha)`` with A (B, L_A, C), B (B, L_B, C), beta (B, L_A, C), alpha
    (B, L_B, C), float32. Returns ``(V_A, V_B)``, float32 (B, L_A, H) and (B, L_B, H):
    ``V_A = g([A, beta])``, ``V_B = g([B, alpha])`` (features joined on the last axis). Rows at
    padded positions hold values that :class:`Aggregate` ignores.
    """

    def __init__(self, num_hiddens, dropout=0.2, **kwargs):
        super().__init__(**kwargs)
        _checks.check_positive_int('num_hiddens', num_hiddens)
        _checks.check_probability('dropout', dropout)
        with self.name_scope():
            self.g = _feed_forward(num_hiddens, dropout, flatten=False)

    def hybrid_forward(self, F, A, B, beta, alpha):
        V_A = self.g(F.np.concatenate([A, beta], axis=-1))    # (B, L_A, H)
        V_B = self.g(F.np.concatenate([B, alpha], axis=-1))   # (B, L_B, H)
        return V_A, V_B


@mx.util.use_np
class Aggregate(Float32OnCPU):
    """Sum the comparison vectors over valid positions and classify (step 3 of Parikh et al.).

    Parameters
    ----------
    num_hiddens : int
        Width H of the feed-forward network h.
    num_outputs : int
        Number of classes.
    dropout : float

    Call ``(V_A, V_B, valid_length_A, valid_length_B)`` with V_A (B, L_A, H), V_B (B, L_B, H)
    float32 and lengths (B,). Returns logits float32 (B, num_outputs):
    ``h([sum_{i < vl_A} V_A[:, i], sum_{j < vl_B} V_B[:, j]])`` followed by a linear layer.
    Padded positions (whatever they hold, NaN included) do not take part in the sums.
    """

    def __init__(self, num_hiddens, num_outputs, dropout=0.2, **kwargs):
        super().__init__(**kwargs)
        _checks.check_positive_int('num_hiddens', num_hiddens)
        _checks.check_positive_int('num_outputs', num_outputs)
        _checks.check_probability('dropout', dropout)
        with self.name_scope():
            self.h = _feed_forward(num_hiddens, dropout, flatten=True)
            self.output = nn.Dense(num_outputs, flatten=True)

    def check_inputs(self, V_A, V_B, valid_length_A, valid_length_B):  # pylint: disable=arguments-differ
        _check_sentences(V_A, V_B, valid_length_A, valid_length_B, ('V_A', 'V_B'))

    def hybrid_forward(self, F, V_A, V_B, valid_length_A, valid_length_B):
        v_A = _zero_padding(F, V_A, valid_length_A).sum(axis=1)   # (B, H)
        v_B = _zero_padding(F, V_B, valid_length_B).sum(axis=1)   # (B, H)
        return self.output(self.h(F.np.concatenate([v_A, v_B], axis=-1)))


@mx.util.use_np
class DecomposableAttention(CheckedBlock):
    """The decomposable-attention NLI classifier (Parikh et al., 2016), padding-masked.

    Parameters
    ----------
    vocab_size : int
        Number of token ids (the embedding has ``vocab_size`` rows).
    embed_size : int
        Embedding size C (100 matches the GloVe sample of the data folder).
    num_hiddens : int
        Width H of f, g and h.
    num_classes : int
        Number of labels (3 for SNLI: entailment, contradiction, neutral).
    dropout : float

    Call ``(premise, hypothesis, premise_valid_length, hypothesis_valid_length)`` positionally:
    token ids (B, L_p) and (B, L_h), integer (int32), valid lengths (B,) int32/int64 (or integral
    float32). Token ids must lie in [0, ``vocab_size``) (ValueError otherwise; an embedding would
    clip them silently); float token ids are a TypeError, as in :class:`BertEncoder` (an
    embedding would truncate them silently). Returns logits float32
    (B, num_classes). Appending more padding (any token ids) to a
    batch leaves the logits unchanged. After ``hybridize()`` and ``export``, the graph's inputs are
    ``data0..data3`` in this order and accept any B, L_p and L_h of at least 1.
    """

    def __init__(self, vocab_size, embed_size=100, num_hiddens=200, num_classes=3, dropout=0.2,
                 **kwargs):
        super().__init__(**kwargs)
        for name, value in (('vocab_size', vocab_size), ('embed_size', embed_size),
                            ('num_hiddens', num_hiddens), ('num_classes', num_classes)):
            _checks.check_positive_int(name, value)
        with self.name_scope():
            self.embedding = nn.Embedding(vocab_size, embed_size)
            # The child names are the paper's steps and part of the parameter names written by
            # save_parameters ('attend.f.1.weight'): renaming one breaks trained files.
            self.attend = Attend(num_hiddens, dropout)
            self.compare = Compare(num_hiddens, dropout)
            self.aggregate = Aggregate(num_hiddens, num_classes, dropout)

    def check_inputs(self, premise, hypothesis, premise_valid_length,  # pylint: disable=arguments-differ
                     hypothesis_valid_length):
        _check_sentences(premise, hypothesis, premise_valid_length, hypothesis_valid_length,
                         ('premise', 'hypothesis', 'premise_valid_length',
                          'hypothesis_valid_length'), rank=2)
        for name, ids in (('premise', premise), ('hypothesis', hypothesis)):
            _checks.check_token_ids(name, ids, self.embedding.weight.shape[0])

    def hybrid_forward(self, F, premise, hypothesis, premise_valid_length,
                       hypothesis_valid_length):
        A, B = self.embedding(premise), self.embedding(hypothesis)   # (B, L_p, C), (B, L_h, C)
        beta, alpha = self.attend(A, B, premise_valid_length, hypothesis_valid_length)
        V_A, V_B = self.compare(A, B, beta, alpha)
        return self.aggregate(V_A, V_B, premise_valid_length, hypothesis_valid_length)

    def alignment(self, premise, hypothesis, premise_valid_length, hypothesis_valid_length):
        """Alignment weights for inspection and plots (imperative only).

        Returns
        -------
        (weights_h, weights_p) : float32 (B, L_p, L_h) each
            ``weights_h[b, i]``: distribution over hypothesis tokens aligned to premise token i
            (zero row when i is padding); ``weights_p[b, :, j]``: distribution over premise tokens
            aligned to hypothesis token j.
        """
        with _checks.entry() as outermost:
            if outermost:
                self.check_inputs(premise, hypothesis, premise_valid_length,
                                  hypothesis_valid_length)
            A, B = self.embedding(premise), self.embedding(hypothesis)
            return self.attend._weights(mx.nd, A, B, premise_valid_length,
                                        hypothesis_valid_length)
