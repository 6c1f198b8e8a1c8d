"""The Multi Model Server handler of the QA model: ``jobs.serve.handler:handle``.

The archive (see :mod:`~jobs.serve.archive`) holds the fine-tuned model folder
(``model/``), its exported ``QAInference`` graph (``graph/qa-*``) and ``serve.json`` (features
per forward pass, request limits, the products' dtype). The worker loads the graph with
``SymbolBlock.imports`` through :class:`QAPredictor` (``graph=``), so the server answers as
``run_squad.py predict`` does; with ``matmul_dtype`` 'bfloat16' (``serve.py start --matmul-dtype``)
it loads it through ``Bfloat16Graph`` instead (``kernels=Kernels(matmul_dtype='bfloat16')``): the
worker, a process of its own, made its own AMX decision when it imported gluon_attention.

The server hands :func:`handle` a batch of requests (its ``batch_size``/``max_batch_delay``); every
valid question of the batch is answered in one :meth:`QAPredictor.answer_batch` call (the features
of all of them, ``features_per_pass`` per forward pass, each pass padded to its longest feature).
Bodies are parsed here from bytes (server option ``decode_input_request=false``): a body the
server cannot decode never reaches its own decoder, so it cannot take the worker down, and each
bad request gets its own 4xx through the context's per-request status while the others of the
batch are answered. The responses carry no header and their bodies are padded with spaces
(:mod:`~jobs.serve.frame`), so that the server's frontend decodes every batch.
"""
import json
import logging
import os
from http import HTTPStatus

from gluon_attention import Kernels, hardware
from gluon_attention.data import squad
from gluon_attention.pipelines import QAPredictor
from gluon_attention.pipelines.features import eval_features

from .frame import pad_bodies
from .protocol import SERVE_JSON, Limits, RequestError, answer_json, error_json, parse_request

__all__ = ['handle', 'QAService']
_LOG = logging.getLogger(__name__)
_SERVICE = None


class QAService:
    """A loaded archive: the predictor, the tokenizer (to count features before any forward
    pass) and the limits.

    Parameters
    ----------
    root : str
        The unpacked archive: ``serve.json``, ``model/`` and the graph files it names.
    """

    def __init__(self, root):
        with open(os.path.join(root, SERVE_JSON), encoding='utf-8') as handle:
            settings = json.load(handle)
        folder = os.path.join(root, settings['model'])
        self.limits = Limits(**settings['limits'])
        kernels = Kernels(matmul_dtype=settings.get('matmul_dtype', 'float32'))
        self.predictor = QAPredictor.from_folder(
            folder, graph=os.path.join(root, settings['graph']),
            threshold=settings['threshold'], batch_size=settings['features_per_pass'],
            kernels=kernels)
        # the worker is a process of its own: gluon_attention decided AMX at its import
        _LOG.info('dense products in %s; %s', kernels.matmul_dtype, hardware(verify=False).reason)
        self.tokenizer = self.predictor.tokenizer
        qa_config = self.predictor.qa_config
        self.lengths = qa_config['eval_max_seq_length'], qa_config['max_query_length']

    def count_features(self, pairs):
        """Features the pairs make (0 for a blank question or context: never run)."""
        live = [squad.SquadExample(str(i), '', q, c, [], False)
                for i, (q, c) in enumerate(pairs) if not squad.is_blank_input(q, c)]
        return len(eval_features(live, self.tokenizer, *self.lengths)) if live else 0

    def parse(self, row):
        """(pairs, is_list) of one request; RequestError when it is refused."""
        pairs, is_list = parse_request(row, self.limits)
        count = self.count_features(pairs)
        if count > self.limits.max_features:
            raise RequestError(413, 'body', 'at most {} features (chunks of {} tokens) per '
                               'request'.format(self.limits.max_features, self.lengths[0]),
                               '{} question(s) making {} features'.format(len(pairs), count))
        return pairs, is_list

    def answer(self, pairs):
        """Answers of all pairs in one call; if that fails, each request's pairs alone, so one
        request that breaks the model cannot fail the others (its slot holds the exception)."""
        flat = [pair for group in pairs for pair in group]
        try:
            answers = iter(self.predictor.answer_batch(flat))
            return [[next(answers) for _ in group] for group in pairs]
        except Exception:  # pylint: disable=broad-except
            _LOG.exception('a batch of %d questions failed; answering each request alone',
                           len(flat))
        results = []
        for group in pairs:
            try:
                results.append(self.predictor.answer_batch(group))
            except Exception as error:  # pylint: disable=broad-except
                _LOG.exception('a request of %d questions failed', len(group))
                results.append(error)
        return results

    def handle(self, rows, context):
        """One JSON text per request of the batch (padded for the frontend, see
        :func:`~jobs.serve.frame.pad_bodies`); statuses set on ``context``."""
        parsed, responses = [], [None] * len(rows)
        for i, row in enumerate(rows):
            try:
                parsed.append((i,) + self.parse(row))
            except RequestError as error:
                context.set_response_status(error.status, HTTPStatus(error.status).phrase, i)
                responses[i] = error_json(error)
        results = self.answer([pairs for _, pairs, _ in parsed]) if parsed else []
        for (i, _, is_list), answers in zip(parsed, results):
            if isinstance(answers, Exception):
                context.set_response_status(500, HTTPStatus(500).phrase, i)
                responses[i] = json.dumps({'error': 'prediction failed', 'field': 'body',
                                           'received': type(answers).__name__, 'status': 500})
                continue
            body = [answer_json(a) for a in answers]
            responses[i] = json.dumps(body if is_list else body[0], ensure_ascii=False)
        return pad_bodies(responses, context)


def handle(data, context):
    """The server's entry point: ``data`` None loads the archive (at worker start), else a batch
    of requests -> one JSON text per request."""
    global _SERVICE  # pylint: disable=global-statement
    if _SERVICE is None:
        _SERVICE = QAService(context.system_properties['model_dir'])
    if data is None:
        return None
    return _SERVICE.handle(data, context)
