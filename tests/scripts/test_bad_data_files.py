"""run_squad.py and train_nli.py on a missing or malformed data file: a non-zero exit, a message
naming the file (and the record), no traceback, and an existing output folder left untouched."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _script(name, args):
    env = dict(os.environ, OMP_NUM_THREADS='1')
    return subprocess.run([sys.executable, str(ROOT / 'scripts' / name)] + list(args),
                          capture_output=True, text=True, env=env, cwd=str(ROOT), timeout=300)


def _precious(folder):
    """An output folder holding a result that a failing run must not touch."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / 'metrics.json').write_text('{"f1": 61.5}')
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def _squad_with_wrong_offset(path):
    """One question whose answer_start (6) does not point at its answer text."""
    qa = {'id': 'q1', 'question': 'What?', 'is_impossible': False,
          'answers': [{'text': 'Alpha', 'answer_start': 6}]}
    path.write_text(json.dumps({'data': [{'title': 'T', 'paragraphs': [
        {'context': 'Alpha beta gamma.', 'qas': [qa]}]}]}))
    return path


def _failed_cleanly(result, path):
    assert result.returncode != 0
    assert 'Traceback' not in result.stderr, result.stderr[-3000:]
    assert str(path) in result.stderr, result.stderr[-3000:]


@pytest.mark.parametrize('case', ['missing', 'bad-json', 'bad-offset'])
def test_run_squad_reports_bad_data_file(tmp_path, case):
    out = tmp_path / 'out'
    before = _precious(out)
    path = {'missing': tmp_path / 'absent.json', 'bad-json': tmp_path / 'broken.json',
            'bad-offset': _squad_with_wrong_offset(tmp_path / 'train.json')}[case]
    if case == 'bad-json':
        path.write_text('{"data": [{"title": "T", ')
    result = _script('run_squad.py', ['--train-file', str(path), '--extra-train-file', '',
                                      '--output-dir', str(out), '--threads', '1'])
    _failed_cleanly(result, path)
    if case == 'bad-offset':
        assert "question id='q1'" in result.stderr and 'answer_start=6' in result.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


@pytest.mark.parametrize('case', ['bad-label', 'malformed'])
def test_train_nli_reports_bad_data_file(tmp_path, case):
    out = tmp_path / 'out'
    before = _precious(out)
    path = tmp_path / 'train.jsonl'
    good = json.dumps({'gold_label': 'neutral', 'sentence1': 'a b', 'sentence2': 'c'})
    bad = (json.dumps({'gold_label': 'maybe', 'sentence1': 'a', 'sentence2': 'b'})
           if case == 'bad-label' else '{"gold_label": "neutral", ')
    path.write_text(good + '\n' + bad + '\n')
    result = _script('train_nli.py', ['--train', str(path), '--output-dir', str(out),
                                      '--threads', '1', '--no-progress'])
    _failed_cleanly(result, path)
    err = result.stderr
    assert 'line 2 of' in err or str(path) + ':2' in err, err[-3000:]
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
