"""The HTTP protocol of the QA server, free of MXNet and of the server: request bodies (bytes) ->
(question, context) pairs or a per-request error, answers -> JSON; and the small HTTP client
the server's tools use.

A request body is UTF-8 JSON, whatever its content type (``application/json``, ``text/plain`` or
none): one object ``{"question": str, "context": str}`` or a non-empty list of them (other keys
are ignored). The answer is one JSON object per question (a list for a list), with the keys of
:data:`ANSWER_KEYS`. A bad request gets its own status and a JSON error
``{"error": what was expected, "field": where, "received": what came, "status": code}``; the
other requests of its batch are answered. The limits (:class:`Limits`) keep one request well
under the server's response timeout.
"""
import dataclasses
import http.client
import json
import math
import urllib.parse

__all__ = ['Limits', 'RequestError', 'ANSWER_KEYS', 'SERVE_JSON', 'parse_request',
           'answer_json', 'error_json', 'http_request']

#: The archive's settings file: model folder, graph prefix, features per pass, limits, threshold.
SERVE_JSON = 'serve.json'

#: The keys of one answer: ``answer`` ('' = no answer), ``start``/``end`` (character offsets
#: [start, end) of the answer in the context, null for no answer), ``score`` (span score of the
#: best non-null span, null if none), ``null_score_diff``, ``threshold`` (the answer is '' where
#: null_score_diff > threshold), ``best_span``/``best_span_start``/``best_span_end`` (the best
#: non-null span even when the answer is '').
ANSWER_KEYS = ('answer', 'start', 'end', 'score', 'null_score_diff', 'threshold', 'best_span',
               'best_span_start', 'best_span_end')


@dataclasses.dataclass(frozen=True)
class Limits:
    """What one request may ask; larger requests get status 413 and a JSON error.

    Attributes
    ----------
    max_questions : int
        Questions in one request (a list body).
    max_context_chars : int
        Characters of one context (checked before it is tokenized).
    max_features : int
        Model inputs (chunks of ``eval_max_seq_length`` tokens) of all the request's questions
        together; a long context gives several (384 tokens each for the demo model).
    """
    max_questions: int = 16
    max_context_chars: int = 10000
    max_features: int = 24


class RequestError(Exception):
    """A request the server refuses: HTTP ``status``, the ``field`` at fault, what was expected
    and what was ``received`` (a short description, never the whole value)."""

    def __init__(self, status, field, expected, received):
        super().__init__('{}: {}. Received: {}'.format(field, expected, received))
        self.status, self.field, self.expected, self.received = status, field, expected, received

    def to_dict(self):
        return {'error': self.expected, 'field': self.field, 'received': self.received,
                'status': self.status}


def _describe(value):
    """A short description of a JSON value: its type and at most 60 characters of it."""
    if value is None:
        return 'null'
    text = json.dumps(value, ensure_ascii=False)
    kind = {dict: 'object', list: 'list', str: 'string', bool: 'boolean'}.get(
        type(value), 'number')
    return '{} {}'.format(kind, text if len(text) <= 60 else text[:57] + '...')


def _body(row):
    """The body bytes of one request as the server hands it to the handler."""
    if not isinstance(row, dict):
        raise RequestError(400, 'body', 'a request with a body', type(row).__name__)
    value = row.get('body', row.get('data'))
    if value is None:
        # form-encoded bodies are parsed into form fields by the server; nothing usable is left
        raise RequestError(400, 'body', 'a UTF-8 JSON body sent as application/json, text/plain '
                           'or without a content type', 'parameters {}'.format(sorted(row)))
    return value


def _decode(value):
    """Bytes (or an already decoded str/JSON value) -> the JSON value."""
    if isinstance(value, (bytes, bytearray)):
        try:
            value = bytes(value).decode('utf-8')
        except UnicodeDecodeError as err:
            raise RequestError(400, 'body', 'UTF-8 text', '{} bytes, not UTF-8 at byte {}'.format(
                len(value), err.start)) from None
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except (ValueError, RecursionError) as err:
        preview = value[:40] + ('...' if len(value) > 40 else '')
        raise RequestError(400, 'body', 'JSON ({})'.format(str(err).split(':')[0]),
                           '{} characters: {!r}'.format(len(value), preview)) from None


def _pair(item, where, limits):
    if not isinstance(item, dict):
        raise RequestError(400, where or 'body', 'an object {"question": string, "context": '
                           'string}', _describe(item))
    pair = []
    for key in ('question', 'context'):
        name = '{}.{}'.format(where, key) if where else key
        if key not in item:
            raise RequestError(400, name, 'a string', 'nothing (the key is missing)')
        if not isinstance(item[key], str):
            raise RequestError(400, name, 'a string', _describe(item[key]))
        try:
            item[key].encode('utf-8')
        except UnicodeEncodeError as err:     # a lone surrogate: JSON allows "\\ud800"
            raise RequestError(400, name, 'Unicode text (no lone UTF-16 surrogate)',
                               'a string of {} characters with a lone surrogate at character '
                               '{}'.format(len(item[key]), err.start)) from None
        pair.append(item[key])
    if len(pair[1]) > limits.max_context_chars:
        raise RequestError(413, '{}.context'.format(where) if where else 'context',
                           'at most {} characters'.format(limits.max_context_chars),
                           '{} characters'.format(len(pair[1])))
    return tuple(pair)


def parse_request(row, limits=Limits()):
    """The questions of one request.

    Parameters
    ----------
    row : dict
        One request as the server gives it to the handler: ``{'body': bytes}`` (server option
        ``decode_input_request=false``; ``'data'`` is accepted too, and a str or an already
        decoded JSON value in place of bytes).
    limits : Limits

    Returns
    -------
    (list of (str, str), bool)
        The (question, context) pairs and whether the body was a list (the answer is a list).

    Raises
    ------
    RequestError
        400: no body, not UTF-8, not JSON, not an object or a non-empty list of objects, a
        missing or non-string ``question`` or ``context``, or one holding a lone UTF-16
        surrogate (JSON's ``"\\ud800"``: not Unicode text; the field is named ``[i].question`` in
        a list); 413: more than ``limits.max_questions`` questions or a context longer than
        ``limits.max_context_chars``.
    """
    value = _decode(_body(row))
    if isinstance(value, list):
        if not value:
            raise RequestError(400, 'body', 'at least one question', 'an empty list')
        if len(value) > limits.max_questions:
            raise RequestError(413, 'body', 'at most {} questions per request'.format(
                limits.max_questions), 'a list of {}'.format(len(value)))
        return [_pair(item, '[{}]'.format(i), limits) for i, item in enumerate(value)], True
    return [_pair(value, '', limits)], False


def _finite(value):
    """JSON has no infinity or NaN: such a number is written as null."""
    return value if value is None or math.isfinite(value) else None


def answer_json(answer):
    """One answer (a QAAnswer) as the JSON-able dict of :data:`ANSWER_KEYS`."""
    fields = answer.to_dict()
    out = {'answer': fields['text']}
    for key in ANSWER_KEYS[1:]:
        value = fields.get(key)
        out[key] = _finite(value) if isinstance(value, float) else value
    return out


def error_json(error):
    """The JSON text of a :class:`RequestError`."""
    return json.dumps(error.to_dict(), ensure_ascii=False)


def http_request(method, url, body=None, timeout=30.0, content_type='application/json'):
    """(status, text) of one HTTP request; status 0 with the error text when none came back.

    ``body``: bytes, or a JSON-able value (sent as JSON); ``content_type`` None sends no
    Content-Type header at all.
    """
    parts = urllib.parse.urlsplit(url)
    data = body if body is None or isinstance(body, bytes) else json.dumps(body).encode('utf-8')
    headers = {'Content-Type': content_type} if content_type else {}
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    try:
        connection.request(method, parts.path + ('?' + parts.query if parts.query else ''),
                           body=data, headers=headers)
        response = connection.getresponse()
        return response.status, response.read().decode('utf-8', 'replace')
    except (OSError, http.client.HTTPException) as error:
        return 0, '{}: {}'.format(type(error).__name__, error)
    finally:
        connection.close()
