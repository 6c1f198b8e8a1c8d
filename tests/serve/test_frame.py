"""The worker's batch response as Multi Model Server 1.1.11 frames it (its own Python encoder), read
by a model of its frontend's decoder: with the handler's padding and no response header, a read
that ends at any multiple of 16 bytes leaves the decoder waiting for more bytes; with a
Content-Type header, or without the padding, some such read makes it throw (the decode errors
seen under batching, which drop the worker connection and fail the whole batch)."""
import json
import struct

import pytest

from jobs.serve.frame import ALIGN, STATUS_AT, pad_bodies, status_offsets

from serve_helpers import worker_context

otf = pytest.importorskip('mms.protocol.otf_message_handler',
                          reason='the [serve] extra (multi-model-server) is not installed')

_UNDER_RUN, _END, _MAX = -3, -1, 6553500


class Incomplete(Exception):
    """The decoder returns and waits for more bytes (it starts again from the frame's start)."""


class Corrupt(Exception):
    """The decoder throws: the frontend closes the worker connection."""


class Decoder:
    """``ModelResponseDecoder.decode`` of the 1.1.11 frontend on the bytes received so far: the
    per-request status code is read with a bare readInt, and the header map with lengths
    checked against what is readable, whose under-run becomes a negative size."""

    def __init__(self, data):
        self.data, self.pos, self.status_at = bytes(data), 0, []

    def readable(self):
        return len(self.data) - self.pos

    def read_int(self):
        if self.readable() < 4:
            raise Corrupt('IndexOutOfBoundsException at {}'.format(self.pos))
        value = struct.unpack_from('!i', self.data, self.pos)[0]
        self.pos += 4
        return value

    def read_length(self, limit):
        if self.readable() < 4:
            return _UNDER_RUN
        length = self.read_int()
        if length > limit:
            raise Corrupt('Message size exceed limit: {}'.format(length))
        return _UNDER_RUN if length > self.readable() else length

    def read(self, length):
        if length < 0:
            raise Corrupt('Invalid message size: {}'.format(length))
        value = self.data[self.pos:self.pos + length]
        self.pos += length
        return value

    def checked(self):
        length = self.read_length(_MAX)
        if length == _UNDER_RUN:
            raise Incomplete()
        return self.read(length)

    def headers(self, count):
        out = {}
        for _ in range(count):
            key = self.read(self.read_length(self.readable()))
            out[key] = self.read(self.read_length(self.readable()))
        return out

    def decode(self):
        """(code, [(request id, status, phrase, headers, body)]); raises Incomplete or Corrupt."""
        if len(self.data) < 9:
            raise Incomplete()
        code, _ = self.read_int(), self.checked()
        out = []
        while True:
            length = self.read_length(_MAX)
            if length == _END:
                return code, out
            if length == _UNDER_RUN:
                raise Incomplete()
            request_id = self.read(length)
            self.checked()                               # content type
            self.status_at.append(self.pos)
            status = self.read_int()
            phrase = self.checked()
            count = self.read_length(_MAX)
            if count == _UNDER_RUN:
                raise Incomplete()
            headers = self.headers(count)
            out.append((request_id.decode(), status, phrase.decode(), headers, self.checked()))


def _context(statuses, content_type=None):
    """A worker's context for one batch with these statuses (and a content type)."""
    context = worker_context(len(statuses))
    for i, status in enumerate(statuses):
        if status != 200:
            context.set_response_status(status, 'Phrase {}'.format(status), i)
        if content_type:
            context.set_response_content_type(i, content_type)
    return context


def _bodies(lengths):
    """JSON texts of the given lengths in characters (some not ASCII)."""
    return [json.dumps({'answer': ('é' if n % 3 else 'a') * n}, ensure_ascii=False)
            for n in lengths]


def _fatal_cuts(frame):
    """Read sizes (multiples of 16) at which the decoder throws."""
    fatal = []
    for cut in range(ALIGN, len(frame), ALIGN):
        try:
            Decoder(frame[:cut]).decode()
        except Incomplete:
            continue
        except Corrupt:
            fatal.append(cut)
    return fatal


BATCHES = [[200], [200, 200], [200, 400, 200, 413], [400] * 3, [200] * 8]


@pytest.mark.parametrize('statuses', BATCHES)
def test_padded_frames_survive_every_16_byte_read(statuses):
    for shift in range(ALIGN):        # body lengths covering every residue modulo 16
        lengths = [37 * i + shift for i in range(len(statuses))]
        context = _context(statuses)
        bodies = _bodies(lengths)
        padded = pad_bodies(bodies, context)
        frame = otf.create_predict_response(padded, context.request_ids, 'Prediction success',
                                            200, context=context)
        decoder = Decoder(frame)
        code, got = decoder.decode()
        assert code == 200 and decoder.pos == len(frame)
        assert [status for _, status, _, _, _ in got] == statuses
        assert [json.loads(body) for *_, body in got] == [json.loads(b) for b in bodies]
        assert [p.rstrip(' ') for p in padded] == bodies
        assert all(len(p) - len(b) < ALIGN for p, b in zip(padded, bodies))
        assert decoder.status_at == status_offsets(padded, context)
        assert all(offset % ALIGN == STATUS_AT for offset in decoder.status_at)
        assert all(headers == {} for _, _, _, headers, _ in got)
        assert _fatal_cuts(frame) == []


def test_a_content_type_header_or_no_padding_leaves_reads_that_break_the_decoder():
    statuses = [200, 200, 400]
    context = _context(statuses, content_type='application/json')
    bodies = pad_bodies(_bodies([40, 50, 60]), context)
    frame = otf.create_predict_response(bodies, context.request_ids, 'Prediction success', 200,
                                        context=context)
    assert _fatal_cuts(frame)             # inside a header map: always, whatever the padding
    broken = 0
    for shift in range(ALIGN):
        context = _context(statuses)
        frame = otf.create_predict_response(_bodies([40 + shift, 50, 60]), context.request_ids,
                                            'Prediction success', 200, context=context)
        broken += bool(_fatal_cuts(frame))
    assert 0 < broken < ALIGN             # a status code across a 16-byte boundary, by chance
