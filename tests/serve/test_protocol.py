"""The server's request protocol and load-test bookkeeping, without a server: every bad body
gets its own status and a JSON error naming the field; answers become JSON; the load summary and
the answer comparison count what they should."""
import json
import math
import types

import pytest

from jobs.serve.load import Outcome, compare_answers, summarize
from jobs.serve.protocol import (ANSWER_KEYS, Limits, RequestError,
                                                  answer_json, error_json, parse_request)

LIMITS = Limits(max_questions=3, max_context_chars=50, max_features=4)
GOOD = {'question': 'Who?', 'context': 'The Normans.'}

# (body, status, field, a fragment of what was received)
BAD = [
    (b'not json', 400, 'body', "'not json'"),
    (b'\xff\xfe\x00garbage', 400, 'body', 'not UTF-8 at byte 0'),
    (b'', 400, 'body', '0 characters'),
    (b'[[[[' * 5000 + b']]]]' * 5000, 400, 'body', '40000 characters'),
    (b'"a string"', 400, 'body', 'string "a string"'),
    (b'[]', 400, 'body', 'an empty list'),
    (json.dumps({'context': 'x'}).encode(), 400, 'question', 'missing'),
    (json.dumps({'question': 5, 'context': 'x'}).encode(), 400, 'question', 'number 5'),
    (json.dumps({'question': 'q', 'context': None}).encode(), 400, 'context', 'null'),
    (json.dumps([GOOD, {'question': 'q', 'context': ['x']}]).encode(), 400, '[1].context',
     'list ["x"]'),
    (json.dumps([GOOD, 7]).encode(), 400, '[1]', 'number 7'),
    (b'{"question": "Who \\ud800 ruled?", "context": "x"}', 400, 'question',
     'lone surrogate at character 4'),
    (b'[{"question": "q", "context": "x"}, {"question": "q", "context": "\\udfff"}]', 400,
     '[1].context', 'lone surrogate at character 0'),
    (json.dumps({'question': 'q', 'context': 'x' * 51}).encode(), 413, 'context',
     '51 characters'),
    (json.dumps([GOOD] * 4).encode(), 413, 'body', 'a list of 4'),
]


def _is_text(body):
    try:
        body.decode('utf-8')
        return True
    except UnicodeDecodeError:
        return False


# each body as bytes (what the server hands over) and, where it is text, already decoded
CASES = [case + (False,) for case in BAD] + [case + (True,) for case in BAD if _is_text(case[0])]


@pytest.mark.parametrize('body, status, field, received, as_text', CASES)
def test_bad_body_gets_its_status_and_names_the_field(body, status, field, received, as_text):
    row = {'data': body.decode('utf-8')} if as_text else {'body': bytearray(body)}
    with pytest.raises(RequestError) as caught:
        parse_request(row, LIMITS)
    error = json.loads(error_json(caught.value))
    assert (error['status'], error['field']) == (status, field)
    assert received in error['received']
    assert set(error) == {'error', 'field', 'received', 'status'}


def test_form_body_is_refused_naming_the_form_fields():
    with pytest.raises(RequestError) as caught:
        parse_request({'question': b'x'}, LIMITS)
    assert caught.value.status == 400 and "['question']" in caught.value.received


def test_object_and_list_bodies_give_their_pairs():
    assert parse_request({'body': json.dumps(GOOD).encode()}, LIMITS) == (
        [('Who?', 'The Normans.')], False)
    extra = dict(GOOD, id='q1')       # other keys are ignored
    assert parse_request({'body': json.dumps([extra, GOOD]).encode()}, LIMITS) == (
        [('Who?', 'The Normans.')] * 2, True)
    # empty strings are valid: the predictor answers them with the null answer
    assert parse_request({'body': b'{"question": "", "context": " "}'}, LIMITS)[0] == [('', ' ')]


def test_answer_json_renames_text_and_writes_infinities_as_null():
    fields = dict(text='Normans', start=4, end=11, score=2.5, null_score_diff=-1.25,
                  threshold=math.inf, best_span='Normans', best_span_start=4, best_span_end=11)
    answer = types.SimpleNamespace(to_dict=lambda: dict(fields))     # a QAAnswer's to_dict
    assert answer_json(answer) == {'answer': 'Normans', 'start': 4, 'end': 11, 'score': 2.5,
                                   'null_score_diff': -1.25, 'threshold': None,
                                   'best_span': 'Normans', 'best_span_start': 4,
                                   'best_span_end': 11}
    assert tuple(answer_json(answer)) == ANSWER_KEYS
    json.dumps(answer_json(answer), allow_nan=False)


def _answer(text, score=1.0, diff=-2.0, threshold=0.0):
    return {'answer': text, 'score': score, 'null_score_diff': diff, 'threshold': threshold}


def test_compare_answers_tells_near_ties_from_wrong_answers():
    expected = {'a': _answer('x'), 'b': _answer('x', score=1.0), 'c': _answer('', diff=0.00005),
                'd': _answer('x'), 'e': _answer('', diff=-2.0), 'f': _answer('x')}
    got = {'a': _answer('x'), 'b': _answer('y', score=1.00005), 'c': _answer('x'),
           'd': _answer('y', score=1.5), 'e': _answer('x'), 'g': _answer('z')}
    assert compare_answers(expected, got) == {'compared': 5, 'same': 1, 'near_ties': 2,
                                              'wrong': 2, 'wrong_ids': ['d', 'e']}


def test_summarize_counts_failures_around_a_kill():
    outcomes = [Outcome(0, 0.0, 0.1, 200, ''), Outcome(1, 0.05, 0.2, 200, ''),
                Outcome(2, 0.3, 0.6, 500, ''),     # in flight at the kill
                Outcome(3, 0.55, 0.7, 0, ''),      # sent after the kill, before recovery
                Outcome(4, 0.6, 1.5, 200, ''),     # the first answer after the kill
                Outcome(5, 1.6, 1.7, 500, ''), Outcome(6, 1.7, 1.9, 200, '')]
    summary = summarize(outcomes, {'wall_s': 2.0, 'kill_s': 0.5}, total=8)
    assert (summary['sent'], summary['not_sent'], summary['ok'], summary['failed']) == (7, 1, 4, 3)
    assert summary['statuses'] == {'200': 4, '500': 2, '0': 1}
    assert summary['questions_per_s'] == 2.0
    assert summary['recovered_s'] == 1.0
    assert (summary['failed_before_recovery'], summary['failed_after_recovery']) == (2, 1)
    assert summary['p50_ms'] == pytest.approx(175.0)   # of 100, 150, 900, 200 ms
