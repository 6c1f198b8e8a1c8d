"""The QA model's inputs: evaluation features of questions and contexts, and the model run on
them in batches of similar lengths.

A question's context is split into chunks of the model's evaluation length (document stride
:func:`eval_stride`); each chunk is one feature (:class:`~gluon_attention.data.squad.SquadFeature`).
The inputs of ``QAInference`` (and of its export) are named :data:`INPUT_NAMES`, of dtypes
:data:`INPUT_DTYPES`.
"""
import mxnet as mx

from ..data import squad
from ..data.squad_layout import pair_layout

__all__ = ['INPUT_NAMES', 'INPUT_DTYPES', 'eval_stride', 'eval_features', 'run_batches']

#: The inputs of QAInference: input_ids int32 (B, T), token_types int32 (B, T),
#: valid_length int32 (B,), p_mask float32 (B, T).
INPUT_NAMES = ('input_ids', 'token_types', 'valid_length', 'p_mask')
INPUT_DTYPES = ('int32', 'int32', 'int32', 'float32')


def eval_stride(max_seq_length, max_query_length, num_special=3):
    """The document stride of evaluation chunks: 128, or less where the chunk is shorter
    (``num_special``: the special tokens of a pair, 3 for BERT, 4 for RoBERTa)."""
    return min(128, max_seq_length - max_query_length - num_special)


def eval_features(examples, tokenizer, max_seq_length, max_query_length):
    """Features of every chunk of every question (nothing dropped), at evaluation lengths,
    laid out as ``tokenizer`` lays out a pair
    (:func:`~gluon_attention.data.squad_layout.pair_layout`)."""
    stride = eval_stride(max_seq_length, max_query_length,
                         pair_layout(tokenizer).num_special)
    return squad.convert_examples_to_features(
        examples, tokenizer, max_seq_length, stride, max_query_length, is_training=False)


def run_batches(block, features, batch_size, ctx, progress=None):
    """Run a QA inference block (or its reloaded export) on features, length-sorted batches.

    Parameters
    ----------
    block : QAInference or SymbolBlock
        Takes ``input_ids`` int32 (B, T), ``token_types`` int32 (B, T), ``valid_length`` int32
        (B,), ``p_mask`` float32 (B, T) and returns the 5 outputs of ``QAInference``.
    features : list of SquadFeature
    batch_size : int
        Features per forward pass; features of similar lengths run together, each pass padded
        to its longest feature rounded up to a multiple of 8.
    ctx : mx.Context
    progress : callable, optional
        Wraps the list of batches, e.g. ``tqdm.tqdm`` for a progress bar (the library imports no
        progress-bar package); None: none.

    Returns
    -------
    list of tuple of numpy.ndarray
        One 5-tuple per feature, in the order of ``features``: ``start_top_logits`` float32
        (Ns,), ``start_top_index`` (Ns,), ``end_top_logits`` float32 (Ns, Ne),
        ``end_top_index`` (Ns, Ne), ``answerable_logits`` float32 (2,).
    """
    outputs = [None] * len(features)
    batches = squad.length_sorted_batches(features, batch_size) if features else []
    for index in (progress(batches) if progress else batches):
        arrays = squad.batchify([features[i] for i in index], round_to=8)
        batch = [mx.np.array(arrays[k], dtype=arrays[k].dtype, ctx=ctx) for k in INPUT_NAMES]
        result = [o.asnumpy() for o in block(*batch)]
        for row, i in enumerate(index):
            outputs[i] = tuple(r[row] for r in result)
    return outputs
