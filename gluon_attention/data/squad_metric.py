"""The SQuAD 2.0 metric (Rajpurkar et al. 2018) with the official evaluation script's definitions.

Written for this library; the definitions are those of the official v2.0 script, so scores computed
here equal the official ones on the same predictions and no-answer probabilities:

- an answer is normalised by lowercasing, removing punctuation, removing the articles a/an/the and
  collapsing whitespace;
- EM and token F1 are the maximum over the gold answers; an unanswerable question has the single
  gold answer '' (F1 is then 1 for an empty prediction and 0 otherwise);
- every reported value is a percentage; ``best_*`` sweeps the no-answer threshold over the sorted
  no-answer probabilities.
"""
import collections
import re
import string

from .._checks import fail

__all__ = ['normalize_answer', 'exact_match', 'f1_score', 'gold_answers', 'best_threshold',
           'squad_evaluate']

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r'\b(a|an|the)\b')


def normalize_answer(text):
    """Lowercase, drop punctuation, drop the articles a/an/the, collapse whitespace.

    >>> normalize_answer('The  Norman-conquest, of A land!')
    'normanconquest of land'
    """
    text = ''.join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return ' '.join(_ARTICLES.sub(' ', text).split())


def exact_match(gold, prediction):
    """1 when the normalised strings are equal, else 0 (int)."""
    return int(normalize_answer(gold) == normalize_answer(prediction))


def f1_score(gold, prediction):
    """Token F1 (float in [0, 1]) between the normalised answers, counting repeated tokens.

    When either side has no tokens, F1 is 1 if both are empty and 0 otherwise.
    """
    gold_tokens = normalize_answer(gold).split()
    pred_tokens = normalize_answer(prediction).split()
    if not gold_tokens or not pred_tokens:
        return float(gold_tokens == pred_tokens)
    same = sum((collections.Counter(gold_tokens) & collections.Counter(pred_tokens)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred_tokens), same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def gold_answers(example):
    """Gold texts of an example whose normalisation is non-empty, or [''] when there are none."""
    texts = [text for text, _ in example.answers if normalize_answer(text)]
    return texts or ['']


def best_threshold(predictions, scores, na_probs, has_answer):
    """Best score over no-answer thresholds (official ``find_best_thresh`` semantics).

    Starts from "answer nothing" (one point per unanswerable question), then walks the questions in
    increasing no-answer probability, switching each to its prediction: an answerable one gains its
    score, an unanswerable one loses a point when its prediction is non-empty.

    Parameters
    ----------
    predictions : dict of str -> str
    scores : dict of str -> float
        Raw per-question EM or F1 in [0, 1], keyed by question id.
    na_probs : dict of str -> float
        No-answer probability (any real score: higher = more likely unanswerable); its order breaks
        ties, as in the official script.
    has_answer : dict of str -> bool

    Returns
    -------
    (float, float)
        The best score in percent of ``len(scores)`` and the threshold (the no-answer
        probability at which it is reached; 0.0 when answering nothing is best).
    """
    current = best = sum(1 for qid in scores if not has_answer[qid])
    threshold = 0.0
    for qid in sorted(na_probs, key=na_probs.get):
        if qid not in scores:
            continue
        if has_answer[qid]:
            current += scores[qid]
        elif predictions[qid]:
            current -= 1
        if current > best:
            best, threshold = current, na_probs[qid]
    return 100.0 * best / len(scores), threshold


def _percentages(exact, f1, qids, prefix=''):
    total = len(qids)
    return {prefix + 'exact': 100.0 * sum(exact[q] for q in qids) / total,
            prefix + 'f1': 100.0 * sum(f1[q] for q in qids) / total,
            prefix + 'total': total}


def squad_evaluate(examples, predictions, na_probs=None, na_prob_thresh=1.0):
    """Official SQuAD 2.0 scores (also valid on SQuAD 1.1 data).

    Parameters
    ----------
    examples : list of SquadExample
        The gold questions (``qas_id``, ``answers``); an example with no answers is unanswerable.
    predictions : dict of str -> str
        Answer text per question id ('' = no answer); extra ids are ignored.
    na_probs : dict of str -> float, optional
        No-answer probability (or score difference) per question id. A question whose value
        exceeds ``na_prob_thresh`` counts as answered with ''.
    na_prob_thresh : float

    Returns
    -------
    dict
        ``exact``, ``f1`` (percent), ``total``; ``HasAns_exact``, ``HasAns_f1``, ``HasAns_total``
        when there are answerable questions; ``NoAns_*`` likewise for unanswerable ones; and,
        when ``na_probs`` is given, ``best_exact``, ``best_exact_thresh``, ``best_f1``,
        ``best_f1_thresh``.

    Raises
    ------
    ValueError
        For no examples, or a question without a prediction (or without a no-answer probability
        when ``na_probs`` is given).
    """
    if not examples:
        fail('expected at least one example', num_examples=0)
    qids = [e.qas_id for e in examples]
    for name, table in (('predictions', predictions), ('na_probs', na_probs)):
        missing = [q for q in qids if table is not None and q not in table]
        if missing:
            fail('expected {} for every question'.format(name), missing=len(missing),
                 first_missing=missing[0])
    has_answer = {e.qas_id: bool(e.answers) for e in examples}
    exact = {e.qas_id: max(exact_match(g, predictions[e.qas_id]) for g in gold_answers(e))
             for e in examples}
    f1 = {e.qas_id: max(f1_score(g, predictions[e.qas_id]) for g in gold_answers(e))
          for e in examples}
    probs = na_probs if na_probs is not None else dict.fromkeys(qids, 0.0)
    null_wins = {q: float(not has_answer[q]) for q in qids if probs[q] > na_prob_thresh}
    result = _percentages({**exact, **null_wins}, {**f1, **null_wins}, qids)
    for prefix, wanted in (('HasAns_', True), ('NoAns_', False)):
        subset = [q for q in qids if has_answer[q] == wanted]
        if subset:
            result.update(_percentages({**exact, **null_wins}, {**f1, **null_wins}, subset, prefix))
    if na_probs is not None:
        ordered = {q: na_probs[q] for q in na_probs if q in has_answer}
        for key, scores in (('exact', exact), ('f1', f1)):
            best, thresh = best_threshold(predictions, scores, ordered, has_answer)
            result['best_' + key], result['best_{}_thresh'.format(key)] = best, thresh
    return result
