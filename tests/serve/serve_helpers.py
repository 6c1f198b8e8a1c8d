"""What the server tests share: a tiny served model (the da7f4ab fixture folder with its exported
graph), free loopback ports, a started instance, the demo questions, a JSON POST, a worker's
context for one batch."""
import json
import os
import random
import shutil
import socket
import uuid
from pathlib import Path

import pytest

from gluon_attention._resources import default_model_dir
from gluon_attention.data.squad import read_squad
from jobs.serve import instance as serve
from jobs.serve.config import ServeConfig
from jobs.squad.data import data_path

ROOT = Path(__file__).resolve().parents[2]
LEGACY = ROOT / 'tests' / 'fixtures' / 'legacy_da7f4ab'
# the tiny random model answers '' almost always at its saved threshold: a large one makes every
# answer a span, so that the comparisons check spans and offsets
THRESHOLD = 1000.0

requires_java = pytest.mark.skipif(
    serve.java_path() is None,
    reason='no Java runtime: the server tests need one (Debian/Ubuntu: sudo apt-get install -y '
           '{})'.format(serve.JAVA_PACKAGE))


def free_port(taken=()):
    """A free loopback port below 32768 (the server reads ports as 16-bit signed numbers)."""
    for port in random.Random(os.getpid()).sample(range(20000, 32000), 200):
        with socket.socket() as probe:
            try:
                probe.bind(('127.0.0.1', port))
            except OSError:
                continue
        if port not in taken:
            return port
    pytest.fail('no free loopback port in 20000-32000')


def tiny_model(root, export=True):
    """The fixture's model folder with its tokenizer files (``root/model``) and, with
    ``export``, its exported graph (``root/export/qa``, where a train run writes it)."""
    shutil.copytree(LEGACY / 'model', root / 'model')
    if export:
        shutil.copytree(LEGACY / 'export', root / 'export')
    for name in ('vocab.txt', 'tokenizer.json'):
        shutil.copyfile(default_model_dir() / name, root / 'model' / name)
    return root


def start_server(model, instance, **options):
    """Start an instance serving ``tiny_model(model)`` on free ports (its graph: the export
    beside the folder, else exported by the start); fails (not skips) when Java is present but the
    [serve] extra is missing. Returns (config, instance.json content)."""
    try:
        serve.check_runtime()
    except serve.ServeSetupError as err:
        pytest.fail('Java is present but serving cannot start: {}'.format(err))
    port = free_port()
    values = dict(model_dir=str(model / 'model'), graph='',
                  instance_dir=str(model / instance), port=port,
                  management_port=free_port(taken=(port,)), threads=1,
                  null_score_diff_threshold=str(THRESHOLD), start_timeout=120)
    config = ServeConfig(**dict(values, **options))
    return config, serve.start(config, log=lambda _: None)


def questions(count, start=0):
    """``count`` questions of the demo's evaluation file as request objects."""
    examples = read_squad(data_path('haystack-small'), require_answers=False)
    return [{'question': e.question, 'context': e.context}
            for e in examples[start:start + count]]


def post(url, body, content_type='application/json', timeout=30):
    """(status, decoded JSON or text) of one POST."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode('utf-8')
    status, text = serve.http_request('POST', url, data, content_type=content_type,
                                      timeout=timeout)
    return status, json.loads(text) if text.startswith(('{', '[')) else text


def worker_context(size):
    """The context a Multi Model Server worker hands the handler for a batch of ``size`` requests
    (as mms.service.Service.predict sets it up); skips when the [serve] extra is missing."""
    mms_context = pytest.importorskip(
        'mms.context', reason='the [serve] extra (multi-model-server) is not installed')
    context = mms_context.Context('squad', '.', {}, size, None, '1.1.11')
    context.request_ids = {i: str(uuid.uuid4()) for i in range(size)}
    context.request_processor = [mms_context.RequestProcessor({}) for _ in range(size)]
    return context
