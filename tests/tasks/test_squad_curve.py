"""The learning curve of a SQuAD train run (``run_squad.py curve``) on a tiny random encoder:
every checkpoint kept with ``--keep-checkpoints 0`` is scored, the last row reproduces the run's
own metrics, the load recorded with each checkpoint reaches the CSV, the PNG is drawn, and
without matplotlib the CSV is still written with the install hint."""
import os
import shutil
import sys

import mxnet as mx
import pytest
from mxnet.gluon import nn

from jobs.engine.checkpoints import CheckpointManager
from jobs.squad import curve as squad_curve
from jobs.squad.config import CurveConfig, TrainConfig, check_config
from squad_tiny import make_tiny_bert, make_train_file, read_json, run_script, tiny_args

@pytest.fixture(scope='module')
def curve_run(tmp_path_factory):
    """A tiny train run keeping every checkpoint (steps 1, 2, 3), then its curve command."""
    root = tmp_path_factory.mktemp('squad_curve')
    model, train_file = make_tiny_bert(root / 'bert'), make_train_file(root / 'train.json')
    run = root / 'run'
    proc = run_script('train', '--output-dir', run, *tiny_args(model, train_file),
                      '--checkpoint-every', '1', '--keep-checkpoints', '0', '--skip-export')
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    proc = run_script('curve', '--output-dir', run, '--threads', '1', '--no-progress')
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return {'run': run, 'stdout': proc.stdout,
            'rows': squad_curve.read_curve(run / 'curve.csv'),
            'index': read_json(run / 'checkpoints' / 'checkpoints.json')}


def test_keep_checkpoints_zero_keeps_every_checkpoint_with_the_machine_load(curve_run):
    assert [entry['step'] for entry in curve_run['index']] == [1, 2, 3]      # default keeps 2
    for entry in curve_run['index']:
        assert (curve_run['run'] / 'checkpoints' / entry['files']['params']['file']).is_file()
        load = entry['meta']['load_average']
        assert len(load) == 3 and all(value >= 0 for value in load)
        assert entry['meta']['cpu_count'] == os.cpu_count()


def test_curve_has_one_row_per_checkpoint_with_its_metadata(curve_run):
    rows, index = curve_run['rows'], curve_run['index']
    assert list(rows[0]) == list(squad_curve.CURVE_COLUMNS)
    assert [row['step'] for row in rows] == [1, 2, 3]
    for row, entry in zip(rows, index):
        meta = entry['meta']
        assert row['train_seconds'] == pytest.approx(meta['train_seconds'], abs=0.05)
        assert [row['load_1m'], row['load_5m'], row['load_15m']] == pytest.approx(
            meta['load_average'], abs=0.005)
        assert row['cpu_count'] == meta['cpu_count']
        assert 0 <= row['null_odds_auc'] <= 1
        # the oracle threshold is at least as good as the held-out one
        assert row['best_f1'] >= row['calibrated_f1'] - 1e-3
    assert 'step 3: null-odds AUC' in curve_run['stdout']


def test_last_row_reproduces_the_metrics_of_the_run(curve_run):
    """The run's model is its last checkpoint: rescoring it in a fresh process gives the same
    held-out threshold and the same evaluation metrics as train reported."""
    last, metrics = curve_run['rows'][-1], read_json(curve_run['run'] / 'metrics.json')
    assert last['step'] == metrics['train_steps']
    expected = {'threshold': metrics['null_threshold'], 'heldout_f1': metrics['heldout_f1'],
                'calibrated_f1': metrics['f1'], 'HasAns_f1': metrics['HasAns_f1'],
                'best_f1': metrics['best_f1'], 'null_odds_auc': metrics['null_odds_auc'],
                'always_answer_HasAns_f1': metrics['always_answer_HasAns_f1']}
    assert {k: last[k] for k in expected} == pytest.approx(expected, abs=1e-3)


def test_curve_png_is_drawn(curve_run):
    png = (curve_run['run'] / 'curve.png').read_bytes()
    assert png.startswith(b'\x89PNG\r\n\x1a\n') and len(png) > 10000
    # four panels of 2.4 inches at 110 dpi: F1, AUC, the training loss of train_log.jsonl, load
    assert int.from_bytes(png[20:24], 'big') == round((2.4 * 4 + 0.6) * 110)


def test_without_matplotlib_the_csv_is_written_with_the_install_hint(curve_run, tmp_path, capsys,
                                                                    monkeypatch):
    run = tmp_path / 'run'
    shutil.copytree(curve_run['run'], run, ignore=shutil.ignore_patterns('curve.*'))
    for name in ('matplotlib', 'matplotlib.figure'):
        monkeypatch.setitem(sys.modules, name, None)       # import raises ImportError
    config = CurveConfig(output_dir=str(run), threads=1, progress=False)
    assert squad_curve.run_curve(config, squad_curve.prepare_curve(config)) == 0
    assert squad_curve.PLOTS_EXTRA in capsys.readouterr().out
    assert not (run / 'curve.png').exists()
    # the same checkpoints score the same in another process
    assert (run / 'curve.csv').read_text() == (curve_run['run'] / 'curve.csv').read_text()


def test_a_second_curve_keeps_the_rows_already_scored_and_scores_the_rest(curve_run, tmp_path,
                                                                         capsys):
    """Rows of an earlier curve.csv whose step and training seconds match a checkpoint are kept
    (a marked value survives); a missing row and a row of another checkpoint are scored."""
    run = tmp_path / 'run'
    shutil.copytree(curve_run['run'], run, ignore=shutil.ignore_patterns('curve.png'))
    first, second, _ = (dict(row) for row in curve_run['rows'])
    first['null_odds_auc'] = 0.123                           # kept: same step and seconds
    second['null_odds_auc'], second['train_seconds'] = 0.456, second['train_seconds'] + 9
    squad_curve.write_curve(run / 'curve.csv', [first, second])
    config = CurveConfig(output_dir=str(run), threads=1, progress=False, plot=False)
    assert squad_curve.run_curve(config, squad_curve.prepare_curve(config)) == 0
    assert '3 checkpoints: 2 scored now, 1 kept from the earlier curve' in capsys.readouterr().out
    rows = squad_curve.read_curve(run / 'curve.csv')
    assert rows[0] == first
    assert rows[1:] == curve_run['rows'][1:]
    # a kept row is written back as it was first written
    assert (run / 'curve.csv').read_text().splitlines()[1].endswith(',{}'.format(os.cpu_count()))


def test_every_and_max_eval_examples_score_fewer_checkpoints_on_fewer_questions(curve_run,
                                                                              tmp_path):
    """--every 2 scores steps 2 and 3 (the last); --max-eval-examples 5 scores the first 5
    evaluation questions into curve-first5.csv, leaving curve.csv as it was."""
    run = tmp_path / 'run'
    shutil.copytree(curve_run['run'], run, ignore=shutil.ignore_patterns('curve.png'))
    before = (run / 'curve.csv').read_text()
    config = CurveConfig(output_dir=str(run), threads=1, progress=False, plot=False, every=2,
                         max_eval_examples=5)
    job = squad_curve.prepare_curve(config)
    assert len(job.eval_set.examples) == 5 and job.run.max_eval_examples == 5
    assert len(curve_run['index']) == 3
    assert squad_curve.run_curve(config, job) == 0
    rows = squad_curve.read_curve(run / 'curve-first5.csv')
    assert [row['step'] for row in rows] == [2, 3]
    assert (run / 'curve.csv').read_text() == before
    whole = {row['step']: row for row in curve_run['rows']}
    for row in rows:            # same checkpoint, same threshold; other questions scored
        assert row['threshold'] == pytest.approx(whole[row['step']]['threshold'], abs=1e-4)
        assert row['train_seconds'] == whole[row['step']]['train_seconds']


def test_curve_refuses_a_folder_without_run_config_or_checkpoints(curve_run, tmp_path):
    with pytest.raises(ValueError, match='run_config.json'):
        squad_curve.prepare_curve(CurveConfig(output_dir=str(tmp_path)))
    shutil.copy(curve_run['run'] / 'run_config.json', tmp_path)
    with pytest.raises(ValueError, match='intact checkpoints'):
        squad_curve.prepare_curve(CurveConfig(output_dir=str(tmp_path)))
    with pytest.raises(ValueError, match='keep-checkpoints'):
        check_config(TrainConfig(keep_checkpoints=-1))


class _NoState:
    """An optimizer stand-in without state."""

    @staticmethod
    def state_dict():
        return {}


@pytest.mark.parametrize('keep, kept', [(None, [1, 2, 3, 4]), (2, [3, 4])])
def test_checkpoint_manager_keeps_the_newest_or_all(tmp_path, keep, kept):
    block = nn.Dense(2, in_units=3)
    block.initialize(mx.init.One())
    manager = CheckpointManager(str(tmp_path), keep=keep)
    for step in (1, 2, 3, 4):
        manager.save(step, block, _NoState(), {})
    assert [entry['step'] for entry in manager.entries()] == kept
    assert sorted(p.name for p in tmp_path.glob('*.params')) == [
        'ckpt-{}.params'.format(step) for step in kept]
    (tmp_path / 'ckpt-{}.params'.format(kept[0])).write_bytes(b'cut')    # fails its sha256
    assert [entry['step'] for entry in manager.entries()] == kept[1:]
