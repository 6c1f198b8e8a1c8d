"""Span decoding for extractive QA: best valid span, n-best answers and the null decision.

A valid span (start s, end e) lies inside one chunk's context tokens (p_mask 1, never CLS), has
``s <= e`` and ``e - s + 1 <= max_answer_length``, and its score is start logit + end logit.
The null decision follows the answerable head (class 0 answerable, class 1 impossible): a question's
score difference is the minimum over its features of ``log P(impossible) - log P(answerable)``, so
one chunk that sees the answer makes the question answerable.
"""
import collections.abc
import math
import unicodedata

import numpy as onp

from .._checks import check_positive_int, fail

__all__ = ['is_blank_input', 'best_span', 'span_candidates', 'independent_top_spans',
           'decode_predictions']

_RESULT_KEYS = ('start_top_logits', 'start_top_index', 'end_top_logits', 'end_top_index',
                'answerable_logits')


def _has_visible_character(text):
    """True when ``text`` holds a character that is neither white space nor a control or format
    character (Unicode categories Cc and Cf: zero-width space, joiners, BOM, direction marks)."""
    return any(not ch.isspace() and unicodedata.category(ch) not in ('Cc', 'Cf') for ch in text)


def is_blank_input(question, context):
    """True when the question or the context is blank: empty, or only white space and invisible
    characters (control and format characters such as ``'\\u200b'``, the zero-width space).
    Such a question gets the null answer '' in every mode (evaluation, prediction), without
    running the model: it asks nothing, or about nothing."""
    return not _has_visible_character(question) or not _has_visible_character(context)


def best_span(start_logits, end_logits, p_mask=None, max_answer_length=30):
    """Best span when start and end scores are independent (unconditioned).

    Equivalent computation::

        score[s, e] = start_logits[s] + end_logits[e]
        valid[s, e] = p_mask[s] and p_mask[e] and s <= e < s + max_answer_length
        s, e = argmax over valid (first in row-major order on ties)

    Parameters
    ----------
    start_logits, end_logits : array_like, float, shape (T,)
    p_mask : array_like, shape (T,), optional
        1 = may be an answer position, 0 = may not. Default: all positions.
    max_answer_length : int
        In tokens.

    Returns
    -------
    (int, int, float) or None
        ``(start, end, score)``, or None when no span is valid.

    Raises
    ------
    ValueError
        For inputs that are not 1-D of one length, or a non-positive ``max_answer_length``.
    """
    start_logits = onp.asarray(start_logits, dtype=onp.float64)
    end_logits = onp.asarray(end_logits, dtype=onp.float64)
    p_mask = onp.ones(start_logits.shape, bool) if p_mask is None else onp.asarray(p_mask) != 0
    check_positive_int('max_answer_length', max_answer_length)
    if start_logits.ndim != 1 or not start_logits.shape == end_logits.shape == p_mask.shape:
        fail('start_logits, end_logits and p_mask must be 1-D of one length (T,)',
             start_shape=start_logits.shape, end_shape=end_logits.shape, p_mask_shape=p_mask.shape)
    positions = onp.arange(start_logits.shape[0])
    width = positions[None, :] - positions[:, None]
    valid = (width >= 0) & (width < max_answer_length) & p_mask[:, None] & p_mask[None, :]
    scores = onp.where(valid, start_logits[:, None] + end_logits[None, :], -onp.inf)
    if not onp.isfinite(scores).any():
        return None
    start, end = onp.unravel_index(int(onp.argmax(scores)), scores.shape)
    return int(start), int(end), float(scores[start, end])


def _unpack(result, index):
    if isinstance(result, collections.abc.Mapping):
        missing = [k for k in _RESULT_KEYS if k not in result]
        if missing:
            fail('results[{}] must have the keys {}'.format(index, ', '.join(_RESULT_KEYS)),
                 missing=missing)
        result = [result[k] for k in _RESULT_KEYS]
    if len(result) != len(_RESULT_KEYS):
        fail('results[{}] must be a mapping or a sequence of 5 arrays ({})'.format(
            index, ', '.join(_RESULT_KEYS)), length=len(result))
    s_logit, s_index, e_logit, e_index, answerable = (onp.asarray(r) for r in result)
    shape = (s_logit.size, e_logit.size // max(s_logit.size, 1))
    if answerable.size != 2 or e_logit.size != e_index.size or s_logit.size != s_index.size:
        fail('results[{}] must hold start_top_* (Ns,), end_top_* (Ns, Ne) and '
             'answerable_logits (2,)'.format(index), start_top_logits=s_logit.shape,
             start_top_index=s_index.shape, end_top_logits=e_logit.shape,
             end_top_index=e_index.shape, answerable_logits=answerable.shape)
    return (s_logit.reshape(-1), onp.rint(s_index).astype(onp.int64).reshape(-1),
            e_logit.reshape(shape), onp.rint(e_index).astype(onp.int64).reshape(shape),
            answerable.reshape(-1))


def span_candidates(feature, context, result, max_answer_length=30, index=0, max_context=True):
    """Valid (score, text) spans of one feature from the model's top-k starts and ends.

    Parameters
    ----------
    feature : SquadFeature
    context : str
        The example's context text.
    result : mapping or sequence
        ``start_top_logits`` (Ns,), ``start_top_index`` (Ns,), ``end_top_logits`` (Ns, Ne),
        ``end_top_index`` (Ns, Ne) (end conditioned on each start; indices may be float32) and
        ``answerable_logits`` (2,), by key or in that order.
    max_answer_length : int
    index : int
        Position of ``result`` in its list, for error messages.
    max_context : bool
        Keep only starts whose token has its maximum context in this chunk (False: every chunk
        proposes its spans, as Hugging Face's question-answering example decodes).

    Returns
    -------
    list of (float, str)
        Spans whose start and end lie in this chunk's context tokens, ``end >= start``, at most
        ``max_answer_length`` tokens, and (with ``max_context``) whose start token has its
        maximum context here. Text is ``context[char_start(start):char_end(end)]``.
    """
    s_logit, s_index, e_logit, e_index, _ = _unpack(result, index)
    low, high = feature.context_range
    candidates = []
    for i, start in enumerate(s_index):
        if not low <= start < high or (
                max_context and not feature.token_is_max_context[start - low]):
            continue
        for end, e_score in zip(e_index[i], e_logit[i]):
            score = float(s_logit[i] + e_score)
            if start <= end < min(high, start + max_answer_length) and math.isfinite(score):
                char_start = feature.token_to_char[start - low][0]
                char_end = feature.token_to_char[end - low][1]
                candidates.append((score, context[char_start:char_end]))
    return candidates


def independent_top_spans(start_logits, end_logits, top_n=20):
    """The 5 outputs :func:`decode_predictions` reads, for a head whose start and end scores are
    independent (Hugging Face's ``BertForQuestionAnswering``): its ``top_n`` starts, each paired
    with the same ``top_n`` ends, and never the null answer.

    Equivalent computation::

        starts = indices of the top_n start_logits (best first); ends likewise
        start_top_logits = start_logits[starts]                     # (N,)
        end_top_logits[i] = end_logits[ends] for every i            # (N, N)
        answerable_logits = (0, -inf): null score difference -inf

    Parameters
    ----------
    start_logits, end_logits : array_like, float, shape (T,)
        One feature's logits over its tokens (padding left out).
    top_n : int
        Starts and ends kept (fewer when T is smaller); ties keep the lower position.

    Returns
    -------
    tuple of numpy.ndarray
        ``start_top_logits`` (N,), ``start_top_index`` (N,), ``end_top_logits`` (N, N),
        ``end_top_index`` (N, N), ``answerable_logits`` (2,); float32 logits, int64 indices.

    Raises
    ------
    ValueError
        For inputs that are not 1-D of one non-zero length, or a non-positive ``top_n``.
    """
    start_logits = onp.asarray(start_logits, dtype=onp.float32)
    end_logits = onp.asarray(end_logits, dtype=onp.float32)
    check_positive_int('top_n', top_n)
    if start_logits.ndim != 1 or start_logits.shape != end_logits.shape or not start_logits.size:
        fail('start_logits and end_logits must be 1-D of one non-zero length (T,)',
             start_shape=start_logits.shape, end_shape=end_logits.shape)
    starts = onp.argsort(-start_logits, kind='stable')[:top_n]
    ends = onp.argsort(-end_logits, kind='stable')[:top_n]
    tiled = onp.broadcast_to(ends, (len(starts), len(ends)))
    return (start_logits[starts], starts, end_logits[tiled], tiled,
            onp.array([0.0, -onp.inf], onp.float32))


def _nbest(candidates, n_best_size):
    """The best-scoring distinct texts with softmax probabilities over the kept scores."""
    kept = {}
    for score, text in sorted(candidates, key=lambda c: -c[0]):
        if len(kept) == n_best_size:
            break
        kept.setdefault(text, score)
    if not kept:
        return []
    scores = onp.array(list(kept.values()))
    probs = onp.exp(scores - scores.max())
    probs /= probs.sum()
    return [{'text': t, 'score': float(s), 'probability': float(p)}
            for (t, s), p in zip(kept.items(), probs)]


def decode_predictions(examples, features, results, n_best_size=20, max_answer_length=30,
                       null_score_diff_threshold=0.0, max_context=True):
    """Answer texts, null decisions and n-best lists for every example.

    Parameters
    ----------
    examples : list of SquadExample
        The list the features were made from (``feature.example_index`` indexes it).
    features : list of SquadFeature
    results : list
        ``results[k]`` is the model output for ``features[k]``: a mapping or a 5-sequence of
        ``start_top_logits`` (Ns,), ``start_top_index`` (Ns,), ``end_top_logits`` (Ns, Ne),
        ``end_top_index`` (Ns, Ne), ``answerable_logits`` (2,) (log-probabilities, class 0
        answerable, class 1 impossible). Indices may be float32.
    n_best_size, max_answer_length : int
    null_score_diff_threshold : float
        Predict '' where the score difference exceeds it.
    max_context : bool
        As in :func:`span_candidates`.

    Returns
    -------
    predictions : dict of str -> str
        Best non-null span per question id ('' when no candidate is valid).
    final_predictions : dict of str -> str
        '' where the score difference > threshold, else the prediction.
    null_odds : dict of str -> float
        Score difference ``min over features of (answerable_logits[1] - answerable_logits[0])``.

    An example with a blank question or context (``is_blank_input``: empty, white space or
    invisible characters only) needs
    no feature: its answer is '' by rule (``predictions`` '', ``null_odds`` ``inf``, ``nbest``
    empty), whatever its features, if any, say.
    nbest : dict of str -> list of dict
        Up to ``n_best_size`` distinct texts, best first: ``text``, ``score``, ``probability``
        (softmax over the kept scores); empty when no candidate is valid.

    Raises
    ------
    ValueError
        When results and features differ in length, a feature does not belong to ``examples``,
        an example has no feature, or a result is malformed.
    """
    check_positive_int('n_best_size', n_best_size)
    check_positive_int('max_answer_length', max_answer_length)
    if len(results) != len(features):
        fail('expected one result per feature', num_features=len(features),
             num_results=len(results))
    grouped = collections.defaultdict(list)
    for k, feature in enumerate(features):
        index = feature.example_index
        if not 0 <= index < len(examples) or examples[index].qas_id != feature.qas_id:
            fail('expected features made from these examples', feature_index=k,
                 qas_id=feature.qas_id, example_index=index)
        grouped[index].append(k)
    predictions, final, null_odds, nbest = {}, {}, {}, {}
    for index, example in enumerate(examples):
        if is_blank_input(example.question, example.context):
            grouped[index] = []         # the null answer by rule, whatever the features say
        elif index not in grouped:
            fail('expected at least one feature per example (convert with is_training=False)',
                 qas_id=example.qas_id)
        candidates, diff = [], math.inf
        for k in grouped[index]:
            candidates += span_candidates(features[k], example.context, results[k],
                                          max_answer_length, k, max_context)
            answerable = _unpack(results[k], k)[4]
            diff = min(diff, float(answerable[1] - answerable[0]))
        qid = example.qas_id
        nbest[qid] = _nbest(candidates, n_best_size)
        predictions[qid] = nbest[qid][0]['text'] if nbest[qid] else ''
        final[qid] = '' if diff > null_score_diff_threshold else predictions[qid]
        null_odds[qid] = diff
    return predictions, final, null_odds, nbest
