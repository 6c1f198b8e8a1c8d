"""One question about one context for ``run_squad.py predict``, and the answer of one question
with its character offsets. (The questions of a ``--predict-file`` are read by
``data.squad.read_squad(..., require_answers=False)``.)
"""
from ...data import squad

__all__ = ['pair_example', 'best_answer', 'describe_answer']


def pair_example(question, context):
    """One question about one context, as a SquadExample with the id 'question'."""
    return squad.SquadExample('question', '', question, context, [], False)


class _Offsets:
    """Stands for a context string: slicing it returns the slice's (start, stop) character
    offsets, so span decoding reports where a span is instead of its text."""

    def __getitem__(self, span):
        return span.start, span.stop


def best_answer(features, outputs, max_answer_length):
    """The best span of one question's features: (score, char_start, char_end), or None."""
    candidates = []
    for k, (feature, output) in enumerate(zip(features, outputs)):
        candidates += squad.span_candidates(feature, _Offsets(), output, max_answer_length, k)
    if not candidates:
        return None
    score, (start, end) = max(candidates, key=lambda c: c[0])
    return score, start, end


def describe_answer(context, span, null_diff, threshold):
    """One line: the answer, its character offsets [start, end) in the context and its score,
    or 'no answer' with the null score difference against the threshold."""
    if span is None or null_diff > threshold:
        why = 'no span inside the context' if span is None else \
            'null score difference {:.3f} > threshold {:.3f}'.format(null_diff, threshold)
        return 'no answer ({})'.format(why)
    score, start, end = span
    return 'answer: {!r} (characters {}-{} of the context; span score {:.3f}; null score ' \
           'difference {:.3f} <= threshold {:.3f})'.format(context[start:end], start, end, score,
                                                          null_diff, threshold)
