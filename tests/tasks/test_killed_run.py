"""A SIGKILLed ``scripts/run_squad.py`` resumes from its last intact checkpoint and ends with the
metrics of an uninterrupted run; a checkpoint file cut short on disk is skipped.

Tiny settings (4 steps of 4 features at length 96, 8 evaluation questions) keep one run near 30 s
of CPU. The uninterrupted reference run and the run to be killed start together.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import mxnet as mx
import numpy as onp
import pytest
from mxnet.gluon import nn

from jobs.engine.distributed import DataParallel
from jobs.engine.checkpoints import CheckpointManager

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / 'scripts' / 'run_squad.py'
TINY = ['--max-steps', '4', '--checkpoint-every', '2', '--max-train-features', '48',
        '--max-eval-examples', '8', '--batch-size', '4', '--max-seq-length', '96',
        '--eval-max-seq-length', '128', '--doc-stride', '32', '--max-query-length', '24',
        '--extra-train-file', '', '--threads', '1', '--skip-export', '--seed', '11',
        '--threshold-titles', '', '--no-progress']
TIMING_KEYS = ('train_seconds', 'train_features_per_second', 'eval_seconds')
TIMEOUT = 600


def _start(output_dir, extra=()):
    env = dict(os.environ, OMP_NUM_THREADS='1', PYTHONUNBUFFERED='1')
    log = open(str(output_dir) + '.log', 'ab')
    return subprocess.Popen([sys.executable, str(SCRIPT), '--output-dir', str(output_dir)]
                            + TINY + list(extra), stdout=log, stderr=subprocess.STDOUT,
                            env=env, cwd=str(ROOT)), log


def _finish(proc, log, output_dir):
    try:
        rc = proc.wait(timeout=TIMEOUT)
    finally:
        log.close()
    text = Path(str(output_dir) + '.log').read_text(errors='replace')
    assert rc == 0, text[-3000:]
    return text


def _metrics(output_dir):
    metrics = json.loads((Path(output_dir) / 'metrics.json').read_text())
    return {k: v for k, v in metrics.items() if k not in TIMING_KEYS}


def _wait_for_checkpoint(proc, index_path):
    deadline = time.time() + TIMEOUT
    log = Path(str(index_path.parents[1]) + '.log')
    while not index_path.exists():
        assert proc.poll() is None, 'the run ended before its first checkpoint:\n' + \
            log.read_text(errors='replace')[-3000:]
        assert time.time() < deadline, 'no checkpoint within {} s'.format(TIMEOUT)
        time.sleep(0.1)


def _add_truncated_newer_checkpoint(folder):
    """Append a step-3 checkpoint whose files are listed with correct hashes and then cut short on
    disk (what a crash or a full disk leaves): a resume must skip it and use step 2."""
    index_path = folder / 'checkpoints.json'
    index = json.loads(index_path.read_text())
    good = index[-1]
    newer = {'step': good['step'] + 1, 'meta': good['meta'], 'files': {}}
    for kind, info in good['files'].items():
        name = info['file'].replace('ckpt-{}'.format(good['step']),
                                    'ckpt-{}'.format(newer['step']))
        shutil.copyfile(folder / info['file'], folder / name)
        newer['files'][kind] = {'file': name, 'sha256': info['sha256']}
        size = (folder / name).stat().st_size
        with open(folder / name, 'r+b') as f:
            f.truncate(size // 2)
    index_path.write_text(json.dumps(index + [newer]))
    return newer['step']


def test_sigkill_after_first_checkpoint_resumes_with_same_metrics(tmp_path):
    reference_dir, killed_dir = tmp_path / 'reference', tmp_path / 'killed'
    reference = _start(reference_dir)
    victim, victim_log = _start(killed_dir)
    try:
        index_path = killed_dir / 'checkpoints' / 'checkpoints.json'
        _wait_for_checkpoint(victim, index_path)
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=60)
    finally:
        if victim.poll() is None:
            victim.kill()
        victim_log.close()
    assert victim.returncode == -signal.SIGKILL
    assert not (killed_dir / 'metrics.json').exists()
    first = json.loads(index_path.read_text())[-1]['step']
    assert first == 2
    bad_step = _add_truncated_newer_checkpoint(killed_dir / 'checkpoints')
    resumed_text = _finish(*_start(killed_dir), killed_dir)
    reference_text = _finish(*reference, reference_dir)
    assert 'resuming from step 2 of 4' in resumed_text, resumed_text[-2000:]
    assert 'resuming from step {}'.format(bad_step) not in resumed_text
    assert 'resuming' not in reference_text
    assert _metrics(killed_dir) == _metrics(reference_dir)
    steps = [e['step'] for e in json.loads(index_path.read_text())]
    assert steps[-1] == 4


@mx.util.use_np
class _Tiny(nn.HybridBlock):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.dense = nn.Dense(3, in_units=5)

    def hybrid_forward(self, F, x):
        return self.dense(x)


def _tiny_block(seed):
    mx.random.seed(seed)
    block = _Tiny()
    block.initialize(mx.init.Normal(1.0))
    return block


def test_truncated_checkpoint_file_falls_back_to_previous(tmp_path):
    """CheckpointManager.latest() skips a checkpoint whose params or optimizer file is cut short or
    missing, and restore() then loads the previous good one exactly."""
    block = _tiny_block(1)
    optimizer = DataParallel(block.collect_params())
    manager = CheckpointManager(str(tmp_path), keep=3)
    saved = {}
    for step in (1, 2, 3):
        block.dense.weight.set_data(block.dense.weight.data() + step)
        manager.save(step, block, optimizer, {'fingerprint': 'x'})
        saved[step] = block.dense.weight.data().asnumpy().copy()
    assert manager.latest()['step'] == 3
    path = tmp_path / 'ckpt-3.params'
    with open(path, 'r+b') as f:
        f.truncate(path.stat().st_size - 7)
    assert manager.latest()['step'] == 2
    os.remove(tmp_path / 'ckpt-2.states.npz')
    entry = manager.latest()
    assert entry['step'] == 1
    other = _tiny_block(9)
    manager.restore(entry, other, DataParallel(other.collect_params()), mx.cpu())
    onp.testing.assert_array_equal(other.dense.weight.data().asnumpy(), saved[1])
    (tmp_path / 'checkpoints.json').write_text('[{"step": 5, "fi')      # index cut short
    assert manager.latest() is None


@pytest.mark.slow
def test_kill_at_every_checkpoint_and_truncate_latest(tmp_path):
    """Slow form: kill twice (after checkpoints 2 and 4 of 6), cut the newest file short, resume."""
    reference_dir, killed_dir = tmp_path / 'reference', tmp_path / 'killed'
    extra = ['--max-steps', '6']
    reference = _start(reference_dir, extra)
    for step in (2, 4):
        victim, log = _start(killed_dir, extra)
        index_path = killed_dir / 'checkpoints' / 'checkpoints.json'
        while not (index_path.exists()
                   and json.loads(index_path.read_text())[-1]['step'] >= step):
            assert victim.poll() is None
            time.sleep(0.1)
        victim.kill()
        victim.wait()
        log.close()
    latest = killed_dir / 'checkpoints' / 'ckpt-4.params'
    with open(latest, 'r+b') as f:
        f.truncate(latest.stat().st_size // 3)
    text = _finish(*_start(killed_dir, extra), killed_dir)
    _finish(*reference, reference_dir)
    assert 'resuming from step 2 of 6' in text
    assert _metrics(killed_dir) == _metrics(reference_dir)


@pytest.mark.slow
def test_two_uninterrupted_runs_give_identical_metrics(tmp_path):
    """Determinism: with one --seed, two fresh runs write the same metrics (timings aside)."""
    runs = [_start(tmp_path / name) for name in ('one', 'two')]
    for (proc, log), name in zip(runs, ('one', 'two')):
        _finish(proc, log, tmp_path / name)
    assert _metrics(tmp_path / 'one') == _metrics(tmp_path / 'two')
