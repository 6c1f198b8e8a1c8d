"""The SQuAD job's ONNX check (``train --onnx``, the default): a tiny train run converts its
export to ``export/qa.onnx``, answers the evaluation questions in ONNX Runtime and writes
``export/onnx_check.json``; without the [onnx] extra the step is skipped with one line saying how
to install it, and the run still succeeds; ``scripts/export_inference.py --squad-run`` exports
the run's model again."""
import argparse
import importlib.util
import shutil
import subprocess
import sys

import numpy as onp
import pytest

from conftest import squad_file
from gluon_attention.data import squad
from jobs.engine.config import add_arguments, from_args
from jobs.squad.config import TrainConfig
from jobs.squad.data import eval_features
from squad_tiny import (ROOT, SCRIPT, make_tiny_bert, make_train_file, read_json, run_script,
                        tiny_args)


EXPORT_SCRIPT = ROOT / 'scripts' / 'export_inference.py'


@pytest.fixture(scope='module')
def inputs(tmp_path_factory):
    """A tiny encoder folder and a small training file."""
    root = tmp_path_factory.mktemp('squad_onnx')
    return make_tiny_bert(root / 'bert'), make_train_file(root / 'train.json')


@pytest.fixture(scope='module')
def onnx_run(inputs, tmp_path_factory):
    """A finished tiny train run with the ONNX check: (run folder, stdout)."""
    pytest.importorskip('onnx', reason='the ONNX check needs the [onnx] extra')
    pytest.importorskip('onnxruntime', reason='the ONNX check needs the [onnx] extra')
    run = tmp_path_factory.mktemp('squad_onnx_run')
    # a threshold no score difference reaches: every question gets a span to compare
    proc = run_script('train', '--output-dir', run, *tiny_args(*inputs),
                      '--null-score-diff-threshold', '1000')
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return run, proc.stdout


def test_train_run_answers_in_onnx_runtime_as_in_mxnet(inputs, onnx_run):
    from gluon_attention.pipelines.onnx import run_onnx_squad
    run, stdout = onnx_run
    report = read_json(run / 'export' / 'onnx_check.json')
    assert report['status'] == 'ok' and report['total'] == 12
    assert report['identical'] == 12 - len(report['differences'])
    assert report['near_ties'] == len(report['differences'])
    assert all(d['gap'] < 1e-4 for d in report['differences'])
    assert report['max_abs_diff'] < 1e-4 and report['index_mismatches'] == 0
    summary = [line for line in stdout.splitlines() if line.startswith('ONNX check:')]
    assert len(summary) == 1 and summary[0].endswith('-> ok'), stdout[-2000:]
    # the written .onnx, run here on the job's evaluation features and decoded at the job's
    # threshold, gives predictions.json except at the listed near-ties
    examples, features = _eval_features(inputs[0])
    outputs = run_onnx_squad(run / 'export' / 'qa.onnx', features, batch_size=5)
    threshold = read_json(run / 'metrics.json')['null_threshold']
    _, final, _, _ = squad.decode_predictions(examples, features, outputs, 20, 30, threshold)
    predictions = read_json(run / 'predictions.json')
    assert set(final) == set(predictions)
    assert {q for q in final if final[q] != predictions[q]} == \
        {d['qas_id'] for d in report['differences']}
    assert all(text != '' for text in predictions.values())


def _eval_features(model_dir):
    """The tiny run's 12 evaluation questions and their features (T=96, queries of 16)."""
    examples = squad.read_squad(squad_file('haystack-small'))[:12]
    return examples, eval_features(examples, squad.load_tokenizer(model_dir), 96, 16)


@pytest.mark.parametrize('source', ['model folder', 'last checkpoint'])
def test_export_inference_squad_run_exports_the_runs_model(inputs, onnx_run, tmp_path, source):
    """export_inference.py --squad-run: the model folder, or the last checkpoint of a run
    without one, exported again computes what the job's own export computes."""
    import mxnet as mx
    from gluon_attention.export.block import import_block
    run = onnx_run[0]
    if source == 'last checkpoint':
        run = shutil.copytree(run, tmp_path / 'killed', ignore=shutil.ignore_patterns('model'))
    proc = subprocess.run([sys.executable, str(EXPORT_SCRIPT), '--squad-run', str(run),
                           '--output-prefix', str(tmp_path / 'qa'), '--threads', '1'],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    (job, spec), (script, script_spec) = [import_block(p) for p in (
        str(onnx_run[0] / 'export' / 'qa'), str(tmp_path / 'qa'))]
    assert script_spec['input_names'] == spec['input_names']
    arrays = squad.batchify(_eval_features(inputs[0])[1][:6], round_to=8)
    batch = [mx.np.array(arrays[k], dtype=arrays[k].dtype) for k in spec['input_names']]
    for want, got in zip(job(*batch), script(*batch)):
        onp.testing.assert_allclose(got.asnumpy(), want.asnumpy(), rtol=0, atol=1e-6)


def test_without_the_onnx_extra_the_step_is_skipped_with_an_install_hint(inputs, tmp_path,
                                                                          monkeypatch, capsys):
    spec = importlib.util.spec_from_file_location('run_squad_script', str(SCRIPT))
    run_squad = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_squad)
    monkeypatch.setitem(sys.modules, 'onnxruntime', None)   # import onnxruntime: ImportError
    monkeypatch.setenv('OMP_NUM_THREADS', '1')              # main sets it from --threads
    status = run_squad.main(['train', '--output-dir', str(tmp_path)] + tiny_args(*inputs))
    out = capsys.readouterr().out
    assert status == 0, out[-2000:]
    hints = [line for line in out.splitlines()       # the last line names the run's paths
             if 'onnx' in line.lower() and not line.startswith('model folder: ')]
    assert len(hints) == 1 and hints[0].startswith('ONNX check skipped'), out[-2000:]
    assert hints[0].endswith('pip install gluon_attention[onnx]')
    assert read_json(tmp_path / 'export' / 'check.json')['status'] == 'ok'
    assert not (tmp_path / 'export' / 'onnx_check.json').exists()
    assert not (tmp_path / 'export' / 'qa.onnx').exists()


def test_onnx_check_is_on_by_default_and_off_with_no_onnx():
    parser = add_arguments(argparse.ArgumentParser(), TrainConfig)
    assert from_args(TrainConfig, parser.parse_args([])).onnx is True
    assert from_args(TrainConfig, parser.parse_args(['--no-onnx'])).onnx is False
