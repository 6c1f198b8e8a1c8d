"""The handler's batch logic without a server: one predictor call for every valid question of the
batch, a status per request, no response header, bodies padded for the frontend, and a model
failure confined to the request that caused it."""
import json
import types

from jobs.serve.frame import ALIGN, STATUS_AT, status_offsets
from jobs.serve.handler import QAService
from jobs.serve.protocol import Limits

from serve_helpers import worker_context


def _statuses(context, size):
    return [context.get_response_status(i)[0] for i in range(size)]


def _check_frame(context, texts):
    """No header set, every status code placed at STATUS_AT modulo 16 in the worker's frame."""
    assert all(context.get_response_headers(i) == {} for i in range(len(texts)))
    assert all(at % ALIGN == STATUS_AT for at in status_offsets(texts, context))
    assert all(context.get_response_status(i)[1] for i in range(len(texts))
               if context.get_response_status(i)[0] != 200)      # a reason phrase with a code


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
    service, context = _service(), worker_context(4)
    rows = [_row({'question': 'ab', 'context': 'x'}), {'body': b'\xff'},
            _row([{'question': 'cd', 'context': 'x'}, {'question': 'ef', 'context': 'y'}]),
            _row([{'question': 'q', 'context': 'x'}] * 4)]       # 4 features > 3
    texts = service.handle(rows, context)
    out = [json.loads(text) for text in texts]
    assert service.predictor.calls == [[('ab', 'x'), ('cd', 'x'), ('ef', 'y')]]
    assert _statuses(context, 4) == [200, 400, 200, 413]
    _check_frame(context, texts)
    assert out[0]['answer'] == 'ba' and [a['answer'] for a in out[2]] == ['dc', 'fe']
    assert (out[1]['field'], out[3]['field'], out[3]['status']) == ('body', 'body', 413)
    assert out[3]['received'] == '4 question(s) making 4 features'


def test_a_failing_request_gets_500_and_the_others_of_its_batch_are_answered():
    service, context = _service(), worker_context(3)
    rows = [_row({'question': 'ab', 'context': 'x'}), _row({'question': 'boom', 'context': 'x'}),
            _row({'question': 'cd', 'context': 'x'})]
    texts = service.handle(rows, context)
    out = [json.loads(text) for text in texts]
    assert _statuses(context, 3) == [200, 500, 200]
    _check_frame(context, texts)
    assert (out[0]['answer'], out[2]['answer']) == ('ba', 'dc')
    assert out[1] == {'error': 'prediction failed', 'field': 'body',
                      'received': 'RuntimeError', 'status': 500}
    # the batch call, then each request alone
    assert service.predictor.calls == [[('ab', 'x'), ('boom', 'x'), ('cd', 'x')], [('ab', 'x')],
                                       [('boom', 'x')], [('cd', 'x')]]


def test_a_lone_surrogate_gets_400_naming_its_field_and_the_batch_is_answered(tmp_path):
    """JSON's "\\ud800" decodes to a str tokenizers cannot take: that request alone is refused
    (before its features are counted with the real tokenizer), the other one is answered."""
    from gluon_attention.data.squad_features import load_tokenizer
    (tmp_path / 'vocab.txt').write_text('\n'.join(
        ['[PAD]', '[UNK]', '[CLS]', '[SEP]', 'who', 'ruled', '?', 'x']) + '\n')
    service, context = _service(), worker_context(2)
    service.tokenizer = load_tokenizer(tmp_path)
    service.count_features = types.MethodType(QAService.count_features, service)
    rows = [{'body': b'[{"question": "who ruled?", "context": "x"}, '
                     b'{"question": "who \\ud800 ruled?", "context": "x"}]'},
            _row({'question': 'ab', 'context': 'x'})]
    texts = service.handle(rows, context)
    out = [json.loads(text) for text in texts]
    assert _statuses(context, 2) == [400, 200]
    _check_frame(context, texts)
    assert (out[0]['field'], out[0]['status']) == ('[1].question', 400)
    assert 'lone surrogate at character 4' in out[0]['received']
    assert out[1]['answer'] == 'ba'
    assert service.predictor.calls == [[('ab', 'x')]]
