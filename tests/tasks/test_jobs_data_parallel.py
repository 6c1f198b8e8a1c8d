"""The SQuAD and NLI jobs on the data-parallel engine: two ``dist_sync`` workers train the
parameters of one process with the same global batch (1e-5), the ``device`` kvstore over two
CPU contexts those of one context, rank 0 alone writes, a checkpoint resumes under another
layout of the same features per step, a ``dist_*`` kvstore outside a launched job is refused.

Every dropout is 0 (the workers draw other masks than one process). Launched jobs run a
scheduler, a server and two workers on 127.0.0.1 through ``scripts/launch.py``.
"""
import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import mxnet as mx
import numpy as onp
import pytest

from gluon_attention.data import squad
from jobs.engine.launch import DMLC_VARIABLES
from jobs.nli import job as nli
from jobs.nli.config import NLIConfig
from jobs.squad.config import TrainConfig
from jobs.squad.data import load_training_features
from jobs.squad.loop import check_resumable, train
from jobs.squad.model import build_model
from squad_tiny import (SCRIPT, make_tiny_bert, make_train_file, read_json, run_script,
                        tiny_args)

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 240           # seconds a launched job may take before the launcher stops it
NO_DROPOUT = ['--dropout', '0', '--classifier-dropout', '0', '--skip-export', '--lr', '0.01']
NLI_TINY = dict(max_train=96, epochs=1, max_steps=3, batch_size=16, embed_size=8, num_hiddens=8,
                dropout=0.0, seed=7, threads=1, progress=False)


def _launch(*command):
    """Run ``command`` as the two dist_sync workers of a launched job; returns its output."""
    env = dict(os.environ, OMP_NUM_THREADS='1', PYTHONWARNINGS='ignore')
    done = subprocess.run([sys.executable, str(ROOT / 'scripts' / 'launch.py'), '-n', '2', '-s',
                           '1', '--timeout', str(TIMEOUT), '--', sys.executable]
                          + [str(c) for c in command], capture_output=True, text=True, env=env,
                          cwd=str(ROOT), timeout=TIMEOUT + 60)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    return done.stdout


def _saved(path):
    return {k: v.asnumpy() for k, v in mx.npx.load(str(path)).items()}


def _assert_same(got, expected, moved_from=None):
    assert sorted(got) == sorted(expected)
    for key, value in expected.items():
        onp.testing.assert_allclose(got[key], value, rtol=1e-5, atol=1e-5, err_msg=key)
    if moved_from is not None:      # the runs trained: well beyond the tolerance
        assert max(onp.abs(expected[k] - moved_from[k]).max() for k in moved_from) > 1e-3


@pytest.fixture(scope='module')
def squad_runs(tmp_path_factory):
    """One process with 8 features per step, and two dist_sync workers with 4 each."""
    root = tmp_path_factory.mktemp('squad_dp')
    args = tiny_args(make_tiny_bert(root / 'bert'), make_train_file(root / 'train.json'))
    args += NO_DROPOUT
    single = run_script('train', '--output-dir', root / 'single', *args, '--batch-size', '8')
    assert single.returncode == 0, single.stdout[-2000:] + single.stderr[-3000:]
    output = _launch(SCRIPT, 'train', '--output-dir', root / 'dist', *args, '--batch-size', '4',
                     '--kvstore', 'dist_sync')
    return {'root': root, 'args': args, 'output': output}


def _squad_config(root, **options):
    """The tiny SQuAD recipe of ``squad_runs`` (every dropout 0) with ``options``."""
    return TrainConfig(model_dir=str(root / 'bert'), train_file=str(root / 'train.json'),
                       extra_train_file='', exclude_titles='', threshold_titles='Huguenot', max_seq_length=64,
                       doc_stride=24, max_query_length=16, dropout=0.0, classifier_dropout=0.0,
                       **options)


def test_squad_two_dist_sync_workers_equal_one_process_with_the_whole_batch(squad_runs):
    root = squad_runs['root']
    got = _saved(root / 'dist' / 'checkpoints' / 'ckpt-3.params')
    expected = _saved(root / 'single' / 'checkpoints' / 'ckpt-3.params')
    _assert_same(got, expected, _saved(root / 'single' / 'checkpoints' / 'ckpt-2.params'))
    metrics = read_json(root / 'dist' / 'metrics.json')       # written once, by rank 0
    assert metrics['train_steps'] == 3
    assert metrics['train_features_per_second'] == pytest.approx(
        3 * 8 / metrics['train_seconds'], rel=0.05)           # both workers' features
    assert squad_runs['output'].count(' exact: ') == 1         # one report, rank 0's
    assert '[worker 0]                      total: 12' in squad_runs['output']


def test_squad_checkpoint_resumes_under_another_layout_of_the_same_step(squad_runs):
    """The two workers' checkpoint (4 x 2 features per step) is accepted by one process with
    --batch-size 8 or 2 x --grad-accum-steps 4, refused with --batch-size 4."""
    root = squad_runs['root']
    config = _squad_config(root, max_steps=3, seed=5, lr=0.01, output_dir=str(root / 'dist'))
    check_resumable(dataclasses.replace(config, batch_size=8))
    check_resumable(dataclasses.replace(config, batch_size=2, grad_accum_steps=4))
    with pytest.raises(ValueError, match=r'features per step \(--batch-size x '
                                         r'--grad-accum-steps x workers\): 8 there, 4 now'):
        check_resumable(dataclasses.replace(config, batch_size=4))


def test_squad_checkpoint_without_a_newer_option_resumes_at_its_default(squad_runs, tmp_path):
    """A checkpoint written before --freeze-layers existed names no such option: it trained
    with the default (0), resumes with 0 and is refused with 1."""
    root = squad_runs['root']
    shutil.copytree(root / 'dist' / 'checkpoints', tmp_path / 'checkpoints')
    index = tmp_path / 'checkpoints' / 'checkpoints.json'
    entries = json.loads(index.read_text())
    recipes = [entry['meta']['recipe'] for entry in
               (entries if isinstance(entries, list) else entries.values())
               if isinstance(entry, dict) and 'recipe' in entry.get('meta', {})]
    assert recipes
    for recipe in recipes:
        del recipe['freeze_layers']
    index.write_text(json.dumps(entries))
    config = _squad_config(root, max_steps=3, seed=5, lr=0.01, output_dir=str(tmp_path),
                           batch_size=8)
    check_resumable(config)
    with pytest.raises(ValueError, match='--freeze-layers: 0 there, 1 now'):
        check_resumable(dataclasses.replace(config, freeze_layers=1))


def test_squad_device_kvstore_over_two_contexts_equals_one_context(squad_runs, tmp_path):
    config = _squad_config(squad_runs['root'], max_steps=2, lr=1e-3, batch_size=6,
                           progress=False, max_train_features=24, kvstore='device')
    features = load_training_features(config, squad.load_tokenizer(config.model_dir))[0]
    trained = []
    for contexts in ([mx.cpu(0)], [mx.cpu(0), mx.cpu(1)]):
        mx.random.seed(3)                              # the same initial heads
        model = build_model(config.model_dir, config, contexts)
        train(model, features, dataclasses.replace(
            config, output_dir=str(tmp_path / str(len(contexts)))), contexts)
        params = model._collect_params_with_prefix()  # pylint: disable=protected-access
        trained += [{k: p.data(c).asnumpy() for k, p in params.items()} for c in contexts]
    for copy in trained[1:]:
        _assert_same(copy, trained[0])


def test_nli_two_dist_sync_workers_equal_one_process(tmp_path):
    """--batch-size is the pairs of one update: the two workers train 8 rows of each 16."""
    config = NLIConfig(output_dir=str(tmp_path / 'single'), **NLI_TINY)
    nli.train(config)
    flags = [a for k, v in NLI_TINY.items() if k != 'progress'
             for a in ('--' + k.replace('_', '-'), v)]
    output = _launch(ROOT / 'scripts' / 'train_nli.py', '--kvstore', 'dist_sync', '--output-dir',
                     tmp_path / 'dist', '--no-progress', *flags)
    expected = _saved(tmp_path / 'single' / 'checkpoints' / 'ckpt-3.params')
    _assert_same(_saved(tmp_path / 'dist' / 'checkpoints' / 'ckpt-3.params'), expected)
    _assert_same(_saved(tmp_path / 'dist' / 'best.params'), expected)
    assert output.count('valid accuracy') == 1               # rank 0 scores, once
    assert read_json(tmp_path / 'dist' / 'metrics.json')['history'][0]['steps'] == 3


@pytest.mark.parametrize('job', ['squad', 'nli'])
def test_dist_kvstore_outside_a_launched_job_is_refused_before_any_work(job, monkeypatch,
                                                                       tmp_path):
    for name in DMLC_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    match = r'--kvstore dist_sync trains in the workers of a launched job.*Received: missing='
    with pytest.raises(ValueError, match=match):
        if job == 'squad':
            check_resumable(TrainConfig(kvstore='dist_sync', output_dir=str(tmp_path)))
        else:
            nli.check_resumable(NLIConfig(kvstore='dist_sync', output_dir=str(tmp_path)))
    assert not os.listdir(tmp_path)
