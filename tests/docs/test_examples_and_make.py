"""docs/examples/float16_cpu.py runs as documented, and make demo passes ARGS first (a command
such as evaluate leads), adding --threads and --data-dir only where ARGS lacks them."""
import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_float16_example_shows_the_error_and_the_cast(capsys):
    spec = importlib.util.spec_from_file_location(
        'float16_cpu', ROOT / 'docs' / 'examples' / 'float16_cpu.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    failed, out = module.main()
    assert 'expected float16, got float32' in failed          # the documented MXNet error
    assert out.shape == (2, 16) and out.dtype == 'float32'
    assert 'float32 inputs: (2, 16) float32 -> back to float16' in capsys.readouterr().out


@pytest.mark.skipif(shutil.which('make') is None, reason='no make')
@pytest.mark.parametrize('args, expected', [
    ('', 'run_squad.py --threads 3 --data-dir D'),
    ('evaluate --max-eval-examples 5', 'run_squad.py evaluate --max-eval-examples 5 --threads 3 '
                                       '--data-dir D'),
    ('--threads 1 --data-dir E', 'run_squad.py --threads 1 --data-dir E'),
    ('curve --output-dir x', 'run_squad.py curve --output-dir x --threads 3'),
])
def test_make_demo_puts_args_first(tmp_path, args, expected):
    venv = tmp_path / 'venv'
    (venv / 'bin').mkdir(parents=True)
    (venv / '.installed').touch()
    lines = subprocess.run(['make', '-n', '-C', str(ROOT), 'demo', 'ARGS=' + args,
                            'VENV=' + str(venv), 'THREADS=3', 'DATA_DIR=D'],
                           capture_output=True, text=True, timeout=60, check=True).stdout
    command = next(' '.join(line.split()) for line in lines.replace('\\\n', ' ').splitlines()
                   if 'scripts/run_squad.py' in line)
    assert command.endswith(expected), command
