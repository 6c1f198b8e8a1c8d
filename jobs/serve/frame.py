"""The worker's response to a batch, as Multi Model Server 1.1.11 sends it to its frontend, and the
padding that keeps the frontend from failing to decode it.

A worker answers a batch with one binary frame (``mms.protocol.otf_message_handler.
create_predict_response``): a status and a message, then for each request its id, content type,
4-byte status code, reason phrase, response headers and body, each length-prefixed except the
status code. The frontend (Java, Netty) decodes the frame as the bytes arrive and starts again
from the frame's beginning when some are missing; but two fields are read without checking that
their bytes have arrived: the status code (``IndexOutOfBoundsException: readerIndex(414) +
length(4) exceeds writerIndex(416)``) and the headers (``CorruptedFrameException: Invalid
message size: -3`` or ``Message size exceed limit``). When a read ends inside one of them the
frontend drops the worker connection: every request of the batch gets 500 ``Worker died.`` and
the worker loads the model again.

Where reads end: the frontend reads into buffers whose sizes Netty adapts to the sizes of recent
reads (16 to 496 bytes in steps of 16, then 512, 1024, ... 65536), so a frame longer than the
current buffer is cut at a multiple of 16 bytes from its start. Under batching this is routine:
single answers shrink the buffer to about one answer, and the next batch of several is cut
near the second answer's status code.

So the handler sets no response header (the response carries no ``Content-Type``; its body is
always JSON) and :func:`pad_bodies` appends spaces to each JSON body (JSON allows trailing white
space) so that every status code starts at :data:`STATUS_AT` modulo 16: its 4 bytes never
straddle a multiple of 16, and no read can end inside a field the frontend reads unchecked.
"""

__all__ = ['ALIGN', 'STATUS_AT', 'SUCCESS_MESSAGE', 'status_offsets', 'pad_bodies']

#: Read sizes of the frontend are multiples of this many bytes.
ALIGN = 16
#: Where every status code starts, modulo :data:`ALIGN` (6: it occupies bytes 6-9 of a block).
STATUS_AT = 6
#: The message of a successful batch (``mms.service.Service.predict``).
SUCCESS_MESSAGE = 'Prediction success'
_INT = 4


def _utf8(text):
    return len(text.encode('utf-8')) if text else 0


def _before_status(context, idx):
    """Bytes of one request's entry before its status code: request id and content type."""
    return _INT + _utf8(context.get_request_id(idx)) + _INT + _utf8(
        context.get_response_content_type(idx))


def _after_status(context, idx, body):
    """Bytes of one request's entry from its status code to its end."""
    headers = context.get_response_headers(idx)
    return (_INT + _INT + _utf8(context.get_response_status(idx)[1]) + _INT
            + sum(2 * _INT + _utf8(k) + _utf8(v) for k, v in headers.items())
            + _INT + len(body))


def status_offsets(bodies, context, message=SUCCESS_MESSAGE):
    """Byte offsets of each request's status code in the frame the worker sends for ``bodies``
    (one str per request of the batch, in the order of ``context.request_ids``)."""
    position, offsets = _INT + _INT + _utf8(message), []
    for idx in context.request_ids:
        position += _before_status(context, idx)
        offsets.append(position)
        position += _after_status(context, idx, bodies[idx].encode('utf-8'))
    return offsets


def pad_bodies(bodies, context, message=SUCCESS_MESSAGE):
    """``bodies`` with trailing spaces so that every request's status code in the worker's frame
    starts at :data:`STATUS_AT` modulo :data:`ALIGN`.

    Parameters
    ----------
    bodies : list of str
        One response body per request of the batch (indexed as ``context.request_ids``), after
        every status of the batch is set on ``context``.
    context : mms.context.Context
        Request ids, statuses, reason phrases and headers, as the worker will encode them.
    message : str
        The batch's message in the frame.

    Returns
    -------
    list of str
        The padded bodies (the first request's status code is placed by the fixed part of the
        frame: 70 bytes in, 6 modulo 16, with MMS's 36-character request ids).
    """
    ids = list(context.request_ids)
    padded = list(bodies)
    position = _INT + _INT + _utf8(message)
    for n, idx in enumerate(ids):
        position += _before_status(context, idx)
        position += _after_status(context, idx, padded[idx].encode('utf-8'))
        if n + 1 < len(ids):
            pad = (STATUS_AT - position - _before_status(context, ids[n + 1])) % ALIGN
            padded[idx] += ' ' * pad
            position += pad
    return padded
