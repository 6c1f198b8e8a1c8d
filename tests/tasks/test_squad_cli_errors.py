"""One-line errors of the SQuAD command line and the export runner for what a user may get
wrong: a file that is not an ONNX model, a missing inputs file, --predict-file with --question,
a train run's folder given for its model folder, a question that is not a str."""
import shutil
from pathlib import Path

import numpy as onp
import pytest

from gluon_attention._resources import default_model_dir
from gluon_attention.export.__main__ import main as export_main
from gluon_attention.pipelines.predictor import QAPredictor
from squad_tiny import script_module

run_squad = script_module()
LEGACY = Path(__file__).resolve().parents[1] / 'fixtures' / 'legacy_da7f4ab'


@pytest.fixture(scope='module')
def run_folder(tmp_path_factory):
    """A train run's folder holding a saved model folder (the legacy fixture's) in model/."""
    run = tmp_path_factory.mktemp('run')
    shutil.copytree(LEGACY / 'model', run / 'model')
    for name in ('vocab.txt', 'tokenizer.json'):
        shutil.copyfile(default_model_dir() / name, run / 'model' / name)
    (run / 'metrics.json').write_text('{"f1": 1.0}')
    return run


def _error_line(argv, capsys):
    """The error line of a command refused with status 2 (after the parser's usage, if any)."""
    with pytest.raises(SystemExit) as info:
        run_squad.main(argv)
    assert info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 or lines[0].startswith('usage: '), lines
    return lines[-1]


def test_a_file_that_is_not_onnx_is_one_line(run_folder, tmp_path, capsys):
    not_onnx = str(run_folder / 'metrics.json')
    common = ['--model-dir', str(run_folder / 'model'), '--onnx-model', not_onnx,
              '--output-dir', str(tmp_path), '--threads', '1']
    for argv in (['predict', '--question', 'Who?', '--context', 'Rollo.'] + common,
                 ['evaluate', '--eval-file', 'haystack-small', '--max-eval-examples', '2']
                 + common):
        line = _error_line(argv, capsys)
        assert line.startswith('run_squad.py: error: the ONNX file must be an ONNX model that '
                               'ONNX Runtime loads. Received: onnx_path={!r}, reason='
                               .format(not_onnx)), line
    assert not (tmp_path / 'evaluate').exists()


def test_export_runner_names_a_missing_inputs_file(tmp_path, capsys):
    assert export_main(['mha', str(tmp_path / 'nope.npz'), str(tmp_path / 'out.npz')]) == 2
    assert capsys.readouterr().err == (
        'python -m gluon_attention.export: error: INPUTS.npz must be an existing .npz file '
        '(arrays batch<i>/<input name>). Received: inputs={!r}\n'.format(
            str(tmp_path / 'nope.npz')))
    onp.savez(tmp_path / 'in.npz', x=onp.zeros(2))
    assert export_main([str(tmp_path / 'mha'), str(tmp_path / 'in.npz'), 'out.npz']) == 2
    assert 'an exported model needs {}-inputs.json'.format(tmp_path / 'mha') in \
        capsys.readouterr().err
    assert not (tmp_path / 'out.npz').exists()


def test_predict_file_and_question_exclude_each_other(run_folder, tmp_path, capsys):
    line = _error_line(['predict', '--model-dir', str(run_folder / 'model'), '--predict-file',
                        'haystack-small', '--question', 'Who?', '--context', 'Rollo.',
                        '--output-dir', str(tmp_path)], capsys)
    assert 'predict takes --predict-file or --question with --context: they exclude each ' \
           'other. Received: ' in line


def test_a_run_folder_given_as_model_dir_points_at_its_model(run_folder, tmp_path, capsys):
    line = _error_line(['predict', '--model-dir', str(run_folder), '--question', 'Who?',
                        '--context', 'Rollo.', '--output-dir', str(tmp_path)], capsys)
    assert '; did you mean {}, the model folder of that run?. Received: model_dir={!r}'.format(
        run_folder / 'model', str(run_folder)) in line


def test_answer_names_the_argument_that_is_not_a_str(run_folder):
    predictor = QAPredictor(None, None, {}, None)
    with pytest.raises(TypeError, match=r'^question must be a str\. Received: question=None$'):
        predictor.answer(None, 'ctx')
    with pytest.raises(TypeError, match=r'^context must be a str\. Received: context=3$'):
        predictor.answer('Who?', 3)


@pytest.mark.parametrize('argv, usage, error', [
    (['predcit', '--question', 'Who?'], 'usage: run_squad.py [-h]',
     "run_squad.py: error: argument {train,evaluate,predict,curve,quantize}: invalid choice: "
     "'predcit' (choose from 'train', 'evaluate', 'predict', 'curve', 'quantize')"),
    (['predict', '--questoin', 'Who?'], 'usage: run_squad.py predict [-h]',
     'run_squad.py predict: error: unrecognized arguments: --questoin Who?'),
    (['--max-stepz', '3'], 'usage: run_squad.py train [-h]',
     'run_squad.py train: error: unrecognized arguments: --max-stepz 3'),
])
def test_a_misspelled_command_or_option_names_its_command(argv, usage, error, capsys):
    with pytest.raises(SystemExit) as info:
        run_squad.main(argv)
    assert info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[0].startswith(usage) and lines[-1] == error
