"""Choosing the null threshold without the evaluation answers: on the questions of whole
training articles held out from training (``--threshold-titles``).

A question's answer is '' where its null score difference exceeds the threshold. The threshold
kept is the one with the best F1 on the held-out questions, placed midway between the score
differences of the last question answered and the first left unanswered.
"""
from ...data import squad

__all__ = ['choose_null_threshold']


def _f1(example, prediction):
    return max(squad.f1_score(gold, prediction) for gold in squad.gold_answers(example))


def choose_null_threshold(examples, predictions, null_odds):
    """The threshold of best F1 over ``examples`` and that F1.

    Parameters
    ----------
    examples : list of SquadExample
        With their answers (none: impossible).
    predictions : dict of str -> str
        The best non-null span of every question ('' when it has none).
    null_odds : dict of str -> float
        Score difference of every question.

    Returns
    -------
    (float, float)
        The threshold (questions with a score difference at most this are answered with their
        span, the others with '') and the F1 in percent it gives on ``examples``. Answering
        nothing gives ``min(null_odds) - 1``, answering everything ``max(null_odds) + 1``.
    """
    order = sorted(examples, key=lambda e: null_odds[e.qas_id])
    values = [null_odds[e.qas_id] for e in order]
    score = best = float(sum(1 for e in order if not e.answers))   # everything ''
    best_count = 0
    for count, example in enumerate(order, 1):
        score += _f1(example, predictions[example.qas_id]) - (not example.answers)
        # a threshold can only fall between two different score differences
        if (count == len(order) or values[count] > values[count - 1]) and score > best:
            best, best_count = score, count
    if best_count == 0:
        threshold = values[0] - 1.0
    elif best_count == len(order):
        threshold = values[-1] + 1.0
    else:
        threshold = (values[best_count - 1] + values[best_count]) / 2
    return threshold, 100.0 * best / len(order)
