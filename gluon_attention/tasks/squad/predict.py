"""Questions without answers for ``run_squad.py predict``: a SQuAD-format file whose questions
need not have answers, or one question about one context; and the answer of one question with
its character offsets.
"""
import json

from ..._checks import fail
from ...data import squad

__all__ = ['read_questions', 'pair_example', 'best_answer', 'describe_answer']


def _text(record, key, where):
    value = record.get(key) if isinstance(record, dict) else None
    if not isinstance(value, str):
        fail('{}: expected a string {!r}'.format(where, key), **{key: value})
    return value


def _list(record, key, where):
    value = record.get(key) if isinstance(record, dict) else None
    if not isinstance(value, list):
        fail('{}: expected a list {!r}'.format(where, key), **{key: type(value).__name__})
    return value


def read_questions(path):
    """The questions of a SQuAD-format file, answered or not (answers are ignored).

    Parameters
    ----------
    path : str
        ``{"data": [{"title", "paragraphs": [{"context", "qas": [{"id", "question"}]}]}]}``;
        ``title`` may be absent.

    Returns
    -------
    list of SquadExample
        In file order, without answers.

    Raises
    ------
    ValueError
        An unreadable file, invalid JSON, a missing key or a repeated question id; the message
        names the file and the record.
    """
    try:
        with open(path, encoding='utf-8') as handle:
            raw = json.load(handle)
    except (OSError, ValueError) as err:
        fail('--predict-file must be a readable SQuAD-format JSON file ({})'.format(
            str(err).splitlines()[0]), predict_file=str(path))
    examples, seen = [], set()
    for i, article in enumerate(_list(raw, 'data', str(path))):
        title = article.get('title', '') if isinstance(article, dict) else ''
        for j, paragraph in enumerate(_list(article, 'paragraphs', '{} data[{}]'.format(path, i))):
            where = '{} data[{}] paragraphs[{}]'.format(path, i, j)
            context = _text(paragraph, 'context', where)
            for qa in _list(paragraph, 'qas', where):
                qas_id = _text(qa, 'id', where)
                if qas_id in seen:
                    fail('{}: expected unique question ids'.format(where), id=qas_id)
                seen.add(qas_id)
                examples.append(squad.SquadExample(qas_id, str(title), _text(qa, 'question', where),
                                                   context, [], False))
    return examples


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
