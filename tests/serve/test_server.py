"""The QA model behind Multi Model Server, on a tiny model (the da7f4ab fixture folder, its graph
exported by the server's start): started on free loopback ports, it answers as the in-process
predictor and ``run_squad.py predict`` do (both from the folder's weights), gives every bad
request its own 4xx JSON error while answering the good ones, survives a killed worker, and stops
without leaving a process behind.

Skipped (with what to install) when no Java runtime is present; fails when Java is present and the
[serve] extra is missing. The long form is tests/serve/test_server_load.py (GA_FULL_TESTS=1).
"""
import concurrent.futures
import importlib.util
import json
import time
import zipfile
from pathlib import Path

import pytest

from gluon_attention.pipelines import QAPredictor
from jobs.serve import instance as serve
from jobs.serve.protocol import ANSWER_KEYS

from serve_helpers import ROOT, THRESHOLD, post, questions, requires_java, start_server, tiny_model

pytestmark = requires_java
# what the archive holds: the graph, qa_config.json, the tokenizer file the handler reads (the
# fixture folder has tokenizer.json and vocab.txt: tokenizer.json is read), serve.json
# the handler's code travels with the archive: the server's worker runs outside the repository
ARCHIVED = ['graph/qa-0000.params', 'graph/qa-inputs.json', 'graph/qa-symbol.json',
            'jobs/__init__.py', 'jobs/serve/__init__.py', 'jobs/serve/frame.py',
            'jobs/serve/handler.py', 'jobs/serve/protocol.py', 'model/qa_config.json',
            'model/tokenizer.json', 'serve.json']


@pytest.fixture(scope='module')
def model(tmp_path_factory):
    """The tiny model folder without an exported graph: the server's start exports it."""
    return tiny_model(tmp_path_factory.mktemp('served'), export=False)


@pytest.fixture(scope='module')
def server(model):
    config, info = start_server(model, 'instance', batch_size=4, max_batch_delay=50)
    yield config, info
    serve.stop(config.instance_dir)


def _reference(model, pairs):
    predictor = QAPredictor.from_folder(str(model / 'model'), threshold=THRESHOLD)
    return [predictor.answer(p['question'], p['context']).to_dict() for p in pairs]


def _same(got, want):
    assert (got['answer'], got['start'], got['end']) == (want['text'], want['start'],
                                                          want['end'])
    assert got['null_score_diff'] == pytest.approx(want['null_score_diff'], abs=1e-4)
    assert got['score'] == pytest.approx(want['score'], abs=1e-4)
    assert got['threshold'] == THRESHOLD


def _run_squad_predict(model, pair, capsys):
    """``run_squad.py predict --json`` on one question (its main, in this process)."""
    spec = importlib.util.spec_from_file_location('run_squad', ROOT / 'scripts' / 'run_squad.py')
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    capsys.readouterr()
    assert script.main(['predict', '--model-dir', str(model / 'model'), '--json',
                        '--question', pair['question'], '--context', pair['context'],
                        '--null-score-diff-threshold', str(THRESHOLD), '--threads', '1']) == 0
    return json.loads(capsys.readouterr().out)


def test_server_answers_as_the_in_process_model_and_run_squad_predict(server, model, capsys):
    config, info = server
    assert info['graph'] == str(Path(config.instance_dir) / 'export' / 'qa')   # exported
    names = zipfile.ZipFile(info['archive']).namelist()
    assert sorted(n for n in names if not n.startswith('MAR-INF/')) == ARCHIVED
    pairs = questions(6)
    with concurrent.futures.ThreadPoolExecutor(4) as pool:     # batched by the server
        singles = list(pool.map(lambda p: post(info['url'], p), pairs[:4]))
    status, listed = post(info['url'], pairs)
    assert status == 200 and [s for s, _ in singles] == [200] * 4
    want = _reference(model, pairs)
    for got, ref in zip([a for _, a in singles] + listed, want[:4] + want):
        _same(got, ref)
        assert got['answer'] and pairs[0]  # the large threshold: every answer is a span
    for got, pair in zip(listed, pairs):
        assert pair['context'][got['start']:got['end']] == got['answer']
    _same(listed[0], _run_squad_predict(model, pairs[0], capsys))


BAD = [(b'not json', 400, 'body'), (b'\xff\xfe\x00\x01 garbage', 400, 'body'),
       (json.dumps({'question': 3, 'context': 'x'}).encode(), 400, 'question'),
       (json.dumps({'question': 'Who?'}).encode(), 400, 'context'),
       (json.dumps({'question': 'Who?', 'context': 'w ' * 50000}).encode(), 413, 'context'),
       (json.dumps([{'question': 'Who?', 'context': 'x'}] * 17).encode(), 413, 'body'),
       (json.dumps([{'question': 'Who?', 'context': 'word ' * 1900}] * 3).encode(), 413, 'body')]


@pytest.mark.parametrize('content_type', ['application/json', 'text/plain', None])
def test_bad_requests_get_their_own_error_and_the_good_ones_of_the_batch_answers(
        server, content_type):
    _, info = server
    good = questions(2, start=10)
    bodies = [json.dumps(good[0]).encode()] + [body for body, _, _ in BAD] + [
        json.dumps(good[1]).encode()]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda b: post(info['url'], b, content_type), bodies))
    for (status, error), (_, want_status, field) in zip(results[1:-1], BAD):
        assert (status, error['status'], error['field']) == (want_status, want_status, field)
        assert error['error'] and error['received']
    for status, answer in (results[0], results[-1]):
        assert status == 200 and set(ANSWER_KEYS) <= set(answer)
    # an empty question is the null answer, no error
    status, answer = post(info['url'], {'question': ' ', 'context': 'The Normans.'},
                           content_type)
    assert status == 200 and (answer['answer'], answer['start']) == ('', None)


def _replaced(instance_dir, old_pids, seconds):
    """The worker processes once one that was not running before appears (the server noticed
    the death and forked a new model process; a request sent in the instant the worker dies may
    get no answer at all from Multi Model Server 1.1.11, see docs/serving.md)."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        pids = serve.worker_pids(instance_dir)
        if set(pids) - set(old_pids):
            return pids
        time.sleep(0.1)
    pytest.fail('no new worker process {} s after the worker was killed'.format(seconds))


def test_killed_worker_is_replaced_and_answers_the_same(server):
    config, info = server
    pairs = questions(3, start=20)
    before = [post(info['url'], p) for p in pairs]
    old_pids = serve.worker_pids(config.instance_dir)
    killed = serve.kill_workers(config.instance_dir)
    assert killed and set(killed) <= set(old_pids)
    pids = _replaced(config.instance_dir, old_pids, 60)
    assert not set(killed) & set(pids)
    # answered once the new process has loaded the archive (the requests wait in the queue)
    after = [post(info['url'], p, timeout=60) for p in pairs]
    assert [s for s, _ in before] == [s for s, _ in after] == [200] * 3
    assert after == before


def test_stop_leaves_no_process_behind(server):
    config, _ = server
    pids = serve.worker_pids(config.instance_dir) + [serve.running_pid(config.instance_dir)]
    assert None not in pids
    assert serve.stop(config.instance_dir) == pids[-1]
    assert serve.running_pid(config.instance_dir) is None
    for pid in pids:
        assert not Path('/proc/{}'.format(pid)).exists() or \
            'Z' in Path('/proc/{}/stat'.format(pid)).read_text().split()[2]
    assert serve.stop(config.instance_dir) is None
