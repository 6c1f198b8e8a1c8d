"""The data folder (docs/data.md): the data_dir argument (the scripts' --data-dir), else
GA_DATA_DIR, else ../shared/data from the repository root; no default for an installed package;
a missing file is one line naming the path looked for and where the official data set is
published, before any work. The library's messages name the argument data_dir; the scripts say
--data-dir."""
import importlib.util
from pathlib import Path

import pytest

from gluon_attention import _resources
from gluon_attention.data import snli, squad

ROOT = Path(__file__).resolve().parents[2]
SQUAD_URL = 'https://rajpurkar.github.io/SQuAD-explorer/'


def _script(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / 'scripts' / (name + '.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_folder_is_data_dir_then_the_environment_then_the_repository_default(monkeypatch):
    monkeypatch.setenv('GA_DATA_DIR', '/env/data')
    assert _resources.data_folder('/given') == (Path('/given'), 'data_dir')
    assert _resources.data_folder() == (Path('/env/data'), 'GA_DATA_DIR')
    monkeypatch.delenv('GA_DATA_DIR')
    assert _resources.data_folder('') == (
        ROOT.parent / 'shared' / 'data', 'the repository default ../shared/data')


def test_an_installed_package_needs_data_dir_or_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv('GA_DATA_DIR', raising=False)
    monkeypatch.setattr(_resources, '_PACKAGE', tmp_path / 'site-packages' / 'gluon_attention')
    with pytest.raises(ValueError, match=r'^data_dir must name the data folder, or '
                                         r'GA_DATA_DIR be set to it .*Received: data_dir=None'):
        squad.default_data_path('haystack-small')
    assert _resources.data_folder(tmp_path)[0] == tmp_path


def test_a_missing_named_file_is_one_line_with_the_path_and_the_official_source(tmp_path):
    path = tmp_path / 'squad' / 'v2.0' / 'dev-v2.0-35articles.xlsx.derived.json'
    with pytest.raises(ValueError) as info:
        squad.default_data_path('v2.0-dev', tmp_path)
    assert str(info.value) == (
        'SQuAD file not found: expected {} in the data folder {} (data_dir); data_dir must be a '
        "folder holding it (or GA_DATA_DIR set to one), or give the file's path. The official "
        'SQuAD is published at {}. Received: path={!r}'.format(path, tmp_path, SQUAD_URL,
                                                               str(path)))
    assert '--' not in str(info.value)                      # an argument, never a flag
    with pytest.raises(ValueError, match=r'^GloVe file not found: expected .*embeddings/glove'
                                         r'.*https://nlp\.stanford\.edu/projects/glove/'):
        snli.default_path('glove', tmp_path)
    with pytest.raises(ValueError, match=r'^SNLI file not found: expected .*/s1\.dev .*'
                                         r'https://nlp\.stanford\.edu/projects/snli/'):
        snli.default_path('train', tmp_path)


def test_run_squad_stops_before_any_work_on_a_missing_file(tmp_path, monkeypatch, capsys):
    run_squad = _script('run_squad')
    out = tmp_path / 'out'
    for args, source in ((['--data-dir', str(tmp_path)], '(--data-dir)'), ([], '(GA_DATA_DIR)')):
        monkeypatch.setenv('GA_DATA_DIR', str(tmp_path))
        with pytest.raises(SystemExit) as info:
            run_squad.main(['train', '--output-dir', str(out), '--threads', '1'] + args)
        assert info.value.code == 2
        [line] = capsys.readouterr().err.strip().splitlines()
        expected = tmp_path / 'squad' / 'v2.0' / 'dev-v2.0-cs224n-16articles.json'
        assert line.startswith('run_squad.py: error: SQuAD file not found: expected {} in the '
                               'data folder {} {}'.format(expected, tmp_path, source)), line
        assert SQUAD_URL in line
        assert not out.exists()


def test_train_nli_stops_before_any_work_on_a_missing_file(tmp_path):
    train_nli = _script('train_nli')
    out = tmp_path / 'out'
    with pytest.raises(SystemExit) as info:
        train_nli.main(['--data-dir', str(tmp_path), '--output-dir', str(out), '--threads', '1'])
    assert str(info.value.code) == (
        'train_nli.py: error: SNLI file not found: expected {} in the data folder {} '
        "(--data-dir); --data-dir must be a folder holding it (or GA_DATA_DIR set to one), or "
        "give the file's path. The official SNLI is published at "
        'https://nlp.stanford.edu/projects/snli/. '
        'Received: path={!r}'.format(tmp_path / 'snli/esnli_infersent_format/s1.dev', tmp_path,
                                     str(tmp_path / 'snli/esnli_infersent_format/s1.dev')))
    assert not out.exists()


def test_the_makefile_passes_the_data_folder():
    text = (ROOT / 'Makefile').read_text(encoding='utf-8')
    assert 'DATA_DIR ?= ../shared/data' in text
    for script in ('run_squad.py', 'train_nli.py', 'benchmark.py'):
        recipe = text[text.index('scripts/' + script):]
        assert '--data-dir $(DATA_DIR)' in recipe[:recipe.index('\n\n')], script


def test_scripts_say_the_flag_where_the_library_names_the_argument():
    from jobs.engine.config import as_flags  # pylint: disable=import-outside-toplevel
    message = ("SQuAD file not found: expected f in the data folder d (data_dir); data_dir must "
               "be a folder holding it. Received: path='f' (data_dir)")
    assert as_flags(message, ['data_dir']) == (
        "SQuAD file not found: expected f in the data folder d (--data-dir); --data-dir must "
        "be a folder holding it. Received: path='f' (data_dir)")
    assert as_flags(message, ['model_dir']) == message
