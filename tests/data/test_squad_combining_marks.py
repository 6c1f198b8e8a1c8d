"""Combining marks travel with their base character: a context word written with a combining
accent ('Cafe' + U+0301) as the gold answer trains (no mismatch) and decodes with its accent."""
import numpy as onp
import pytest

from gluon_attention.data import squad
from gluon_attention.data.squad import SquadExample

CONTEXT = 'We met at the Cafe\u0301 de Flore, near the Cafe\u0301\u0327s.'


@pytest.fixture(scope='module')
def tokenizer():
    return squad.load_tokenizer()


def _example(answer, start):
    assert CONTEXT[start:start + len(answer)] == answer
    return SquadExample('q', 'T', 'Where did we meet?', CONTEXT, [(answer, start)], False)


@pytest.mark.parametrize('answer, start', [
    ('Cafe\u0301', 14),                     # one trailing combining acute
    ('Cafe\u0301 de Flore', 14),
    ('Cafe\u0301\u0327s', 39),              # marks inside the word already covered
])
def test_a_gold_answer_ending_in_a_combining_mark_trains_and_decodes(tokenizer, answer, start):
    example = _example(answer, start)
    stats = {}
    [feature] = squad.convert_examples_to_features([example], tokenizer, 64, 16, 16,
                                                   is_training=True, stats=stats)
    assert stats['mismatch'] == 0 and stats['skipped'] == 0
    first, last = feature.start_position, feature.end_position
    low = feature.context_offset
    assert feature.token_to_char[first - low][0] == start
    assert feature.token_to_char[last - low][1] == start + len(answer)
    # decoding forced onto the gold tokens gives the text as written, accent included
    start_logits = onp.full(feature.valid_length, -10.0)
    end_logits = onp.full(feature.valid_length, -10.0)
    start_logits[first], end_logits[last] = 10.0, 10.0
    result = squad.independent_top_spans(start_logits, end_logits, 5)
    predictions = squad.decode_predictions([example], [feature], [result])[0]
    assert predictions['q'] == answer


def test_offsets_never_overlap_and_cover_every_mark(tokenizer):
    [feature] = squad.convert_examples_to_features(
        [_example('Cafe\u0301', 14)], tokenizer, 64, 16, 16, is_training=False)
    spans = feature.token_to_char
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
    covered = {i for s, e in spans for i in range(s, e)}
    marks = [i for i, ch in enumerate(CONTEXT) if ch in '\u0301\u0327']
    assert set(marks) <= covered
