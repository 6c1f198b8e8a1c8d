"""The SQuAD 1.1 and 2.0 metrics (Rajpurkar et al. 2016, 2018) with the official definitions.

Written for this library from the published definitions of the official evaluation scripts, so
scores computed here equal the official ones on the same predictions and no-answer probabilities.
SQuAD 2.0 (:func:`squad_evaluate`):

- an answer is normalised by lowercasing, removing punctuation, removing the articles a/an/the and
  collapsing whitespace;
- EM and token F1 are the maximum over the gold answers; an unanswerable question has the single
  gold answer '' (F1 is then 1 for an empty prediction and 0 otherwise);
- every reported value is a percentage; ``best_*`` sweeps the no-answer threshold over the sorted
  no-answer probabilities (:func:`sweep_null_threshold` with the official rule).

SQuAD 1.1 (:func:`squad_v11_evaluate`) differs in two edge rules: token F1 is 0 whenever no
token is shared, so a gold answer and a prediction that both normalise to nothing score EM 1 but
F1 0; and every gold answer counts, those that normalise to nothing included.
"""
import collections
import re
import string

from .._checks import check_choice, fail

__all__ = ['normalize_answer', 'exact_match', 'f1_score', 'gold_answers', 'SWEEP_RULES',
           'sweep_null_threshold', 'squad_evaluate', 'METRIC_VERSIONS', 'squad_v11_evaluate',
           'degenerate_null_odds']

#: The metric definitions :func:`f1_score` and :func:`gold_answers` follow.
METRIC_VERSIONS = ('1.1', '2.0')

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


def f1_score(gold, prediction, version='2.0'):
    """Token F1 (float in [0, 1]) between the normalised answers, counting repeated tokens.

    Parameters
    ----------
    gold, prediction : str
    version : {'2.0', '1.1'}
        Which official definition decides when a side has no tokens: under '2.0' F1 is 1 if
        both are empty and 0 otherwise; under '1.1' F1 is 0 whenever no token is shared (both
        empty included).

    Raises
    ------
    ValueError
        For an unknown ``version``.
    """
    check_choice('version', version, METRIC_VERSIONS)
    gold_tokens = normalize_answer(gold).split()
    pred_tokens = normalize_answer(prediction).split()
    if version == '2.0' and (not gold_tokens or not pred_tokens):
        return float(gold_tokens == pred_tokens)
    same = sum((collections.Counter(gold_tokens) & collections.Counter(pred_tokens)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred_tokens), same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def gold_answers(example, version='2.0'):
    """The gold texts an example is scored against.

    Under '2.0' (the default), those whose normalisation is non-empty, or [''] when there are
    none; under '1.1', every gold text as written (an example without answers has none).
    ValueError for an unknown ``version``.
    """
    check_choice('version', version, METRIC_VERSIONS)
    if version == '1.1':
        return [text for text, _ in example.answers]
    texts = [text for text, _ in example.answers if normalize_answer(text)]
    return texts or ['']


#: The tie rules of :func:`sweep_null_threshold`.
SWEEP_RULES = ('official', 'between')


def sweep_null_threshold(null_odds, gains, start, rule):
    """The no-answer threshold of best total score: one sweep, two tie rules.

    Starts from "every question is answered ''" (total ``start``), then walks the questions in
    increasing null odds, switching each to its span answer (the total changes by its gain),
    and keeps the best total seen. A question is answered with its span where its null odds are
    at most the threshold, '' where they exceed it.

    Parameters
    ----------
    null_odds : dict of str -> float
        No-answer score per question id (higher = more likely unanswerable: a probability or a
        score difference). Its order breaks ties in the walk (stable sort).
    gains : dict of str -> float
        Per question id in ``null_odds``: total with its span answer minus total with ''.
    start : float
        The total when every question is answered ''.
    rule : {'official', 'between'}
        ``'official'``: the official SQuAD 2.0 script's ``find_best_thresh``: every question
        is a cut, ties in null odds included (a cut between equal null odds cannot be applied
        as a threshold), the threshold is the null odds of the last question switched, 0.0 when
        answering nothing is best; ``best_f1``/``best_f1_thresh`` follow it. ``'between'``:
        only cuts between different null odds count (the threshold reproduces the total), placed
        midway between the last question answered and the first left ''; answering nothing
        gives ``min - 1``, answering everything ``max + 1``. Both keep the first best
        (a later total must be strictly larger).

    Returns
    -------
    (float, float)
        The best total and its threshold.

    Raises
    ------
    ValueError
        For an unknown ``rule``, or no questions with ``'between'``.
    """
    if rule not in SWEEP_RULES:
        fail('rule must be one of {}'.format(', '.join(map(repr, SWEEP_RULES))), rule=rule)
    order = sorted(null_odds, key=null_odds.get)
    if rule == 'between' and not order:
        fail("expected at least one question for rule='between'", num_questions=0)
    values = [null_odds[q] for q in order]
    current = best = start
    threshold, best_count = 0.0, 0
    for count, qid in enumerate(order, 1):
        current += gains[qid]
        cut = rule == 'official' or count == len(order) or values[count] > values[count - 1]
        if cut and current > best:
            best, threshold, best_count = current, values[count - 1], count
    if rule == 'official':
        return best, threshold
    if best_count == 0:
        return best, values[0] - 1.0
    if best_count == len(order):
        return best, values[-1] + 1.0
    return best, (values[best_count - 1] + values[best_count]) / 2


def _percentages(exact, f1, qids, prefix=''):
    total = len(qids)
    return {prefix + 'exact': 100.0 * sum(exact[q] for q in qids) / total,
            prefix + 'f1': 100.0 * sum(f1[q] for q in qids) / total,
            prefix + 'total': total}


def degenerate_null_odds(values):
    """Why no-answer scores cannot be swept, or None when they can.

    Parameters
    ----------
    values : sequence of float
        The no-answer scores of the questions scored.

    Returns
    -------
    str or None
        'a NaN no-answer score' when one is NaN; 'constant no-answer scores' when there are two
        or more and all are equal; None otherwise.
    """
    if any(v != v for v in values):
        return 'a NaN no-answer score'
    if len(values) > 1 and len(set(values)) == 1:
        return 'constant no-answer scores'
    return None


def _checked_ids(examples, **tables):
    """Question ids of ``examples``; ValueError for none, or an id missing from a given table."""
    if not examples:
        fail('expected at least one example', num_examples=0)
    qids = [e.qas_id for e in examples]
    for name, table in tables.items():
        missing = [q for q in qids if table is not None and q not in table]
        if missing:
            fail('expected {} for every question'.format(name), missing=len(missing),
                 first_missing=missing[0])
    return qids


def squad_v11_evaluate(examples, predictions):
    """Official SQuAD 1.1 scores: the v1.1 script's ``exact_match`` and ``f1``.

    Each question scores the maximum over all its gold answers (kept as written, those that
    normalise to nothing included) of EM and of the v1.1 token F1 (0 when no token is shared).

    Parameters
    ----------
    examples : list of SquadExample
        The gold questions; each must have at least one answer.
    predictions : dict of str -> str
        Answer text per question id; extra ids are ignored.

    Returns
    -------
    dict
        ``exact_match`` and ``f1`` (percent, the official v1.1 keys) and ``total``.

    Raises
    ------
    ValueError
        For no examples, a question without a prediction, or a question without answers.
    """
    qids = _checked_ids(examples, predictions=predictions)
    unanswerable = [e.qas_id for e in examples if not e.answers]
    if unanswerable:
        fail('expected SQuAD 1.1 questions with at least one gold answer',
             unanswerable=len(unanswerable), first_unanswerable=unanswerable[0])
    exact = {e.qas_id: max(exact_match(g, predictions[e.qas_id]) for g in gold_answers(e, '1.1'))
             for e in examples}
    f1 = {e.qas_id: max(f1_score(g, predictions[e.qas_id], '1.1') for g in gold_answers(e, '1.1'))
          for e in examples}
    result = _percentages(exact, f1, qids)
    return {'exact_match': result['exact'], 'f1': result['f1'], 'total': result['total']}


def squad_evaluate(examples, predictions, na_probs=None, na_prob_thresh=1.0):
    """Official SQuAD 2.0 scores (SQuAD 1.1 questions: :func:`squad_v11_evaluate`).

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
        when ``na_probs`` is given); for ``na_probs`` that are degenerate on the questions: a
        NaN, or one value for every question of two or more (constant scores rank no question
        above another, so the sweep would report a threshold and ``best_*`` as if it had swept
        real scores; call without ``na_probs`` instead, see :func:`degenerate_null_odds`).
    """
    qids = _checked_ids(examples, predictions=predictions, na_probs=na_probs)
    reason = degenerate_null_odds([na_probs[q] for q in qids]) if na_probs is not None else None
    if reason:
        fail('expected no-answer scores that can be swept ({})'.format(reason),
             num_questions=len(qids), first_value=na_probs[qids[0]])
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
        start = sum(1 for q in has_answer if not has_answer[q])     # every question answered ''
        for key, scores in (('exact', exact), ('f1', f1)):
            gains = {q: scores[q] if has_answer[q] else -float(bool(predictions[q]))
                     for q in ordered}
            best, thresh = sweep_null_threshold(ordered, gains, start, 'official')
            result['best_' + key] = 100.0 * best / len(has_answer)
            result['best_{}_thresh'.format(key)] = thresh
    return result
