"""The data-parallel engine: kvstore choices, parity across layouts (devices, micro-batches,
dist_sync workers), a killed worker and the resume, the local launcher.

The tiny job is ``dist_job.py`` (1-layer BertEncoder + QA head, every dropout 0, clipping active,
one lr_mult). Launched runs start a scheduler, a server and two workers on 127.0.0.1.
"""
import io
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import mxnet as mx
import numpy as onp
import pytest
from mxnet import autograd, gluon

import dist_job
from conftest import tol
from jobs.engine.distributed import DataParallel
from jobs.engine.launch import DMLC_VARIABLES, create_kvstore, launch_local

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 240      # seconds a launched job may take before the launcher stops it


def _params(model, ctx=None):
    return {k: p.data(ctx).asnumpy() for k, p in model._collect_params_with_prefix().items()}


def _saved(path):
    return {k: v.asnumpy() for k, v in mx.npx.load(str(path)).items()}


def _assert_same(got, expected, start=None):
    assert sorted(got) == sorted(expected)
    for key in expected:
        onp.testing.assert_allclose(got[key], expected[key], err_msg=key, **tol())
    if start is not None:        # the runs trained: parameters moved well beyond the tolerance
        assert max(onp.abs(expected[k] - start[k]).max() for k in start) > 1e-3


@pytest.fixture(scope='module')
def reference():
    """One process, one device, the whole global batch of 8 (no checkpoints)."""
    model, _, _ = dist_job.run(dist_job.parse([]))
    return _params(model)


@pytest.fixture(scope='module')
def initial():
    return _params(dist_job.build_model(3, [mx.cpu()]))


def _launch(output_dir, *extra, servers=1, kvstore='dist_sync'):
    command = [sys.executable, str(ROOT / 'scripts' / 'launch.py'), '-n', '2', '-s', str(servers),
               '--timeout', str(TIMEOUT), '--', sys.executable,
               str(ROOT / 'tests' / 'tasks' / 'dist_job.py'), '--kvstore', kvstore,
               '--output-dir', str(output_dir)] + list(extra)
    env = dict(os.environ, OMP_NUM_THREADS='1')
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=str(ROOT),
                          timeout=TIMEOUT + 60)
    return done.returncode, done.stdout + done.stderr


@pytest.fixture(scope='module')
def launched(tmp_path_factory):
    """Two dist_sync workers, each with half of every global batch, run straight through."""
    folder = tmp_path_factory.mktemp('dist_straight')
    code, text = _launch(folder)
    assert code == 0, text[-3000:]
    return folder


@pytest.mark.parametrize('ctx, kvstore, accum', [
    ('cpu(0),cpu(1)', 'device', 1), ('cpu(0),cpu(1)', 'local', 1), ('cpu', 'device', 3),
    ('cpu(0),cpu(1)', 'device', 2)])
def test_devices_and_micro_batches_equal_one_device(reference, initial, ctx, kvstore, accum):
    options = dist_job.parse(['--ctx', ctx, '--kvstore', kvstore, '--grad-accum-steps',
                              str(accum)])
    model, _, _ = dist_job.run(options)
    _assert_same(_params(model, mx.cpu(0)), reference, initial)
    if ',' in ctx:
        _assert_same(_params(model, mx.cpu(1)), reference)


def test_two_dist_sync_workers_equal_one_worker_with_the_whole_batch(reference, initial,
                                                                     launched):
    _assert_same(_saved(launched / 'final.params'), reference, initial)
    checkpoints = sorted(p.name for p in (launched / 'checkpoints').glob('*.params'))
    assert checkpoints == ['ckpt-4.params', 'ckpt-6.params']       # rank 0 only, keep=2


def test_dist_device_sync_with_two_servers_and_two_devices_per_worker(reference, tmp_path):
    code, text = _launch(tmp_path, '--ctx', 'cpu(0),cpu(1)', '--grad-accum-steps', '2',
                         servers=2, kvstore='dist_device_sync')
    assert code == 0, text[-3000:]
    _assert_same(_saved(tmp_path / 'final.params'), reference)


def test_killed_worker_stops_the_job_and_a_rerun_resumes_to_the_same_parameters(
        launched, reference, tmp_path):
    folder = tmp_path / 'killed'
    started = time.time()
    code, text = _launch(folder, '--die-after-step', '2', '--die-rank', '1')
    assert code == 128 + 9, text[-3000:]
    assert 'launch: worker 1 was killed by SIGKILL; stopping the other processes' in text
    assert time.time() - started < TIMEOUT / 2
    assert (folder / 'checkpoints' / 'ckpt-2.params').exists()
    assert not (folder / 'final.params').exists()
    shutil.copytree(folder / 'checkpoints', tmp_path / 'copy' / 'checkpoints')
    code, text = _launch(folder)
    assert code == 0, text[-3000:]
    assert '"resumed_from": 2' in (folder / 'result.json').read_text()
    _assert_same(_saved(folder / 'final.params'), _saved(launched / 'final.params'))
    # the two workers' checkpoint also resumes in one process with one device
    model, _, first = dist_job.run(dist_job.parse(['--output-dir', str(tmp_path / 'copy')]))
    assert first == 2
    _assert_same(_params(model), reference)


def test_a_device_without_examples_in_a_step_adds_zero_gradient():
    """One example over two devices: the idle device's zero gradient counts, both update."""
    results = []
    for contexts in ([mx.cpu(0)], [mx.cpu(0), mx.cpu(1)]):
        mx.random.seed(0)
        net = gluon.nn.Dense(3, in_units=4)
        net.initialize(mx.init.Normal(1.0), ctx=contexts)
        engine = DataParallel(net.collect_params(), optimizer_params={'wd': 0.1})
        x = onp.arange(4, dtype='float32').reshape(1, 4)
        for _ in range(2):
            engine.forward_backward(lambda part: (net(part['x']) ** 2).sum(), {'x': x})
            engine.step(1, 0.1, max_grad_norm=1.0)
        results.append([_params(net, ctx) for ctx in contexts])
    for got in results[1]:
        _assert_same(got, results[0][0])


def test_engine_start_gives_every_copy_the_first_copys_parameters():
    """The kvstore broadcast at start (rank 0's values under dist_sync) happens before any
    forward pass, so copies initialised differently cannot drift."""
    net = gluon.nn.Dense(3, in_units=4)
    net.initialize(mx.init.Normal(1.0), ctx=[mx.cpu(0), mx.cpu(1)])
    net.weight.data(mx.cpu(1))[:] = 7.0
    first = _params(net, mx.cpu(0))
    DataParallel(net.collect_params())
    _assert_same(_params(net, mx.cpu(1)), first)


def test_non_finite_gradient_skips_the_update_with_a_warning():
    net = gluon.nn.Dense(2, in_units=2)
    net.initialize()
    engine = DataParallel(net.collect_params())
    before = _params(net)
    engine.forward_backward(lambda part: net(part['x']).sum() * float('inf'),
                            {'x': onp.ones((2, 2), 'float32')})
    with pytest.warns(UserWarning, match='update skipped'):
        assert not onp.isfinite(engine.step(2, 0.1, max_grad_norm=1.0))
    _assert_same(_params(net), before)


def test_engine_refuses_parameters_of_unknown_shape():
    net = gluon.nn.Dense(2)
    net.initialize()
    with pytest.raises(ValueError, match='one forward pass.*Received: deferred='):
        DataParallel(net.collect_params())


@pytest.mark.parametrize('kvstore, match', [
    ('dist_async', "needs the updates on the servers.*Received: kvstore='dist_async'"),
    ('nccl', "kvstore must be one of 'device', 'local', 'dist_sync', 'dist_device_sync'"),
])
def test_create_kvstore_rejects_unsupported_types(kvstore, match):
    with pytest.raises(ValueError, match=match):
        create_kvstore(kvstore)


def test_dist_kvstore_outside_a_launched_job_raises_instead_of_waiting(monkeypatch):
    for name in DMLC_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ValueError, match='scripts/launch.py.*Received: missing='):
        create_kvstore('dist_sync')


def test_local_kvstore_in_one_of_several_launched_workers_is_refused(monkeypatch):
    monkeypatch.setenv('DMLC_ROLE', 'worker')
    monkeypatch.setenv('DMLC_NUM_WORKER', '2')
    with pytest.raises(ValueError, match="use kvstore 'dist_sync'"):
        create_kvstore('device')


def test_launcher_stops_every_process_when_a_worker_fails():
    out, started = io.StringIO(), time.time()
    code = launch_local([sys.executable, '-c', 'import sys; sys.exit(3)'], 2, timeout=TIMEOUT,
                        out=out)
    assert code == 3
    assert 'exited with code 3; stopping the other processes' in out.getvalue()
    assert time.time() - started < 60


def test_launcher_timeout_stops_a_job_that_hangs():
    out = io.StringIO()
    code = launch_local([sys.executable, '-c', 'print("waiting", flush=True); '
                         'import time; time.sleep(600)'], 1, timeout=3, out=out)
    assert code == 124
    assert '[worker ?0] waiting' in out.getvalue()
    assert 'ran past --timeout 3 s' in out.getvalue()


@pytest.mark.parametrize('args, match', [
    (([], 1), 'expected a worker command'), ((['true'], 0), 'num_workers'),
    ((['true'], 1, 0), 'num_servers')])
def test_launcher_rejects_bad_arguments(args, match):
    with pytest.raises(ValueError, match=match):
        launch_local(*args)
