"""What scripts/serve.py says: the stop command matching the instance folder it started, and,
without a model folder, both forms a model folder takes and to run ``make demo`` first."""
import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_SPEC = importlib.util.spec_from_file_location('serve_script',
                                               os.path.join(ROOT, 'scripts', 'serve.py'))
serve_script = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(serve_script)


def _info(instance_dir):
    return dict(model_dir='m', model_name='qa', pid=1, workers=1, threads=1, batch_size=8,
                max_batch_delay=10, url='http://127.0.0.1:8080/predictions/qa',
                instance_dir=instance_dir)


def test_the_stop_command_matches_the_instance_folder():
    default = serve_script._usage(_info(os.path.join('runs', 'serve')))  # pylint: disable=W0212
    assert default.splitlines()[-1].strip().startswith('make serve-stop ')
    other = serve_script._usage(_info('runs/other serve'))  # pylint: disable=W0212
    last = other.splitlines()[-1].strip()
    assert last.startswith("scripts/serve.py stop --instance-dir 'runs/other serve'"), last
    assert "make serve-stop SERVE_DIR='runs/other serve'" in last
    assert not last.startswith('make serve-stop '), last


def test_no_model_folder_names_both_forms_and_make_demo(tmp_path, capsys):
    absent = str(tmp_path / 'absent')
    assert serve_script.main(['start', '--model-dir', absent, '--instance-dir',
                              str(tmp_path / 'instance')]) == 2
    error, hint = capsys.readouterr().err.strip().splitlines()
    assert error.startswith('serve.py start: error: --model-dir must be a model folder saved '
                            'by train or converted'), error
    assert 'qa_config.json, qa_head.safetensors (or, for a converted folder, head_config.json, '\
        'head.safetensors in place of qa_config.json, qa_head.safetensors)' in error, error
    assert hint == ('serve.py start: {} does not exist: run make demo first (it trains and saves '
                    'the model folder runs/squad/model), or name a model folder with --model-dir '
                    '(make serve MODEL_DIR=...)'.format(absent))
    assert not (tmp_path / 'instance').exists()
