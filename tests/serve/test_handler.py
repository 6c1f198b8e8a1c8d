"""The handler's batch logic without a server: one predictor call for every valid question of the
batch, a status per request, and a model failure confined to the request that caused it."""
import json
import types

from gluon_attention.tasks.serve.handler import QAService
from gluon_attention.tasks.serve.protocol import Limits


class Context:
    """The per-request status and content type of a server context."""

    def __init__(self, size):
        self.status = [200] * size
        self.types = [None] * size

    def set_response_status(self, code, phrase, idx):
        assert phrase
        self.status[idx] = code

    def set_response_content_type(self, idx, value):
        self.types[idx] = value


class Predictor:
    """Answers a question with its reversed text; raises on the question 'boom'."""

    def __init__(self):
        self.calls = []

    def answer_batch(self, pairs):
        self.calls.append(list(pairs))
        if any(q == 'boom' for q, _ in pairs):
            raise RuntimeError('the model failed')
        return [types.SimpleNamespace(to_dict=lambda q=q: {
            'text': q[::-1], 'start': 0, 'end': len(q), 'score': 1.0, 'null_score_diff': -1.0,
            'threshold': 0.0, 'best_span': q[::-1], 'best_span_start': 0,
            'best_span_end': len(q)}) for q, _ in pairs]


def _service():
    service = QAService.__new__(QAService)
    service.limits, service.predictor = Limits(max_features=3), Predictor()
    service.count_features = lambda pairs: len(pairs)     # one feature per question
    service.lengths = (384, 64)
    return service


def _row(value):
    return {'body': json.dumps(value).encode('utf-8')}


def test_one_predictor_call_answers_every_valid_request_of_the_batch():
    service, context = _service(), Context(4)
    rows = [_row({'question': 'ab', 'context': 'x'}), {'body': b'\xff'},
            _row([{'question': 'cd', 'context': 'x'}, {'question': 'ef', 'context': 'y'}]),
            _row([{'question': 'q', 'context': 'x'}] * 4)]       # 4 features > 3
    out = [json.loads(text) for text in service.handle(rows, context)]
    assert service.predictor.calls == [[('ab', 'x'), ('cd', 'x'), ('ef', 'y')]]
    assert context.status == [200, 400, 200, 413]
    assert context.types == ['application/json'] * 4
    assert out[0]['answer'] == 'ba' and [a['answer'] for a in out[2]] == ['dc', 'fe']
    assert (out[1]['field'], out[3]['field'], out[3]['status']) == ('body', 'body', 413)
    assert out[3]['received'] == '4 question(s) making 4 features'


def test_a_failing_request_gets_500_and_the_others_of_its_batch_are_answered():
    service, context = _service(), Context(3)
    rows = [_row({'question': 'ab', 'context': 'x'}), _row({'question': 'boom', 'context': 'x'}),
            _row({'question': 'cd', 'context': 'x'})]
    out = [json.loads(text) for text in service.handle(rows, context)]
    assert context.status == [200, 500, 200]
    assert (out[0]['answer'], out[2]['answer']) == ('ba', 'dc')
    assert out[1] == {'error': 'prediction failed', 'field': 'body',
                      'received': 'RuntimeError', 'status': 500}
    # the batch call, then each request alone
    assert service.predictor.calls == [[('ab', 'x'), ('boom', 'x'), ('cd', 'x')], [('ab', 'x')],
                                       [('boom', 'x')], [('cd', 'x')]]
