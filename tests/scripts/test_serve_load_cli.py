"""scripts/serve_load.py reads a named question file from --data-dir, as the jobs do, and its
help speaks of named data sets of the data folder; it sends to the URL the instance folder
records, and exits 1 when no request was answered."""
import http.server
import importlib.util
import json
import os
import socket
import threading

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _script():
    spec = importlib.util.spec_from_file_location(
        'serve_load_script', os.path.join(ROOT, 'scripts', 'serve_load.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_named_questions_are_read_from_data_dir(tmp_path, capsys):
    serve_load = _script()
    with pytest.raises(SystemExit) as info:        # nothing is sent: the file is missing there
        serve_load.main(['--data-dir', str(tmp_path), '--questions', 'haystack-small'])
    assert info.value.code == 2
    assert str(tmp_path) in capsys.readouterr().err.strip().splitlines()[-1]
    text = serve_load.build_parser().format_help()
    assert '--data-dir' in text and 'shipped' not in text


def _questions(tmp_path):
    path = tmp_path / 'questions.json'
    path.write_text(json.dumps({'version': 'v2.0', 'data': [{'title': 't', 'paragraphs': [{
        'context': 'The Normans ruled.', 'qas': [
            {'id': 'q{}'.format(i), 'question': 'Who ruled?', 'answers': [],
             'is_impossible': True} for i in range(3)]}]}]}), encoding='utf-8')
    return str(path)


def _instance(tmp_path, url):
    folder = tmp_path / 'instance'
    folder.mkdir()
    (folder / 'instance.json').write_text(json.dumps({'url': url}), encoding='utf-8')
    return str(folder)


class _Answers(http.server.BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802  (the name http.server calls)
        self.rfile.read(int(self.headers['Content-Length']))
        body = json.dumps({'answer': 'The Normans', 'score': 1.0}).encode('utf-8')
        self.send_response(200)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_requests_go_to_the_url_of_the_instance_folder(tmp_path, capsys):
    server = http.server.HTTPServer(('127.0.0.1', 0), _Answers)    # a port other than 8080
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = 'http://127.0.0.1:{}/predictions/squad'.format(server.server_address[1])
        status = _script().main(['--instance-dir', _instance(tmp_path, url), '--questions',
                                 _questions(tmp_path), '--concurrency', '1'])
    finally:
        server.shutdown()
        server.server_close()
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (status, summary['ok'], summary['failed']) == (0, 3, 0)


def test_exit_status_is_1_when_no_request_is_answered(tmp_path, capsys):
    with socket.socket() as probe:                     # a loopback port nothing listens on
        probe.bind(('127.0.0.1', 0))
        port = probe.getsockname()[1]
    url = 'http://127.0.0.1:{}/predictions/squad'.format(port)
    status = _script().main(['--instance-dir', _instance(tmp_path, url), '--questions',
                             _questions(tmp_path), '--concurrency', '1'])
    captured = capsys.readouterr()
    assert json.loads(captured.out.strip().splitlines()[-1])['ok'] == 0
    assert status == 1 and 'no request to {} was answered'.format(url) in captured.err
