"""scripts/serve_load.py reads a named question file from --data-dir, as the jobs do, and its
help speaks of named data sets of the data folder."""
import importlib.util
import os

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
