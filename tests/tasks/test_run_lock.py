"""One train run per output folder: a second ``run_squad.py train`` on a folder another process
holds is refused at once (status 2, one line naming the folder), before it reads any data or
writes anything; the lock of a SIGKILLed run is gone with its process (resume still works)."""
import fcntl
import os
import signal
import subprocess
import sys

import pytest

from jobs.engine.run_lock import LOCK_NAME, hold_run_lock, release_run_locks
from squad_tiny import script_module

run_squad = script_module()
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HOLD = ('import sys, time; from jobs.engine.run_lock import hold_run_lock; '
        'hold_run_lock(sys.argv[1]); print("held", flush=True); time.sleep(600)')


def _holder(folder, **env):
    """A process that holds ``folder``'s lock until it is killed (started and holding)."""
    proc = subprocess.Popen([sys.executable, '-c', HOLD, str(folder)], stdout=subprocess.PIPE,
                            text=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT, **env))
    assert proc.stdout.readline().strip() == 'held'
    return proc


def test_a_second_train_on_a_held_folder_is_refused_at_once(tmp_path, capsys):
    holder = _holder(tmp_path)
    try:
        with pytest.raises(SystemExit) as info:
            run_squad.main(['train', '--output-dir', str(tmp_path), '--max-steps', '1',
                            '--threads', '1', '--threshold-titles', '', '--no-progress'])
        assert info.value.code == 2
        line = capsys.readouterr().err.strip().splitlines()[-1]
        assert line.startswith('run_squad.py: error: --output-dir must not be in use: another '
                               'run holds its lock'), line
        assert 'process {}'.format(holder.pid) in line and str(tmp_path) in line, line
        assert sorted(os.listdir(tmp_path)) == [LOCK_NAME]     # nothing written
    finally:
        holder.kill()
        holder.wait()


def test_the_lock_of_a_killed_run_is_gone_with_it(tmp_path):
    holder = _holder(tmp_path)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert hold_run_lock(str(tmp_path)) == os.path.join(str(tmp_path), LOCK_NAME)
    with open(os.path.join(str(tmp_path), LOCK_NAME), encoding='utf-8') as handle:
        assert handle.read() == str(os.getpid())
        with pytest.raises(BlockingIOError):    # now held by this process
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        release_run_locks()                     # a run that returned lets the next one in
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_the_workers_of_a_distributed_job_share_the_folder(tmp_path, monkeypatch):
    """Two launched workers (DMLC_ROLE set) hold it together; a plain run beside them is
    refused, and so is a worker beside a plain run."""
    workers = [_holder(tmp_path, DMLC_ROLE='worker') for _ in range(2)]
    try:
        with pytest.raises(ValueError, match='another run holds its lock'):
            hold_run_lock(str(tmp_path))
    finally:
        for worker in workers:
            worker.kill()
            worker.wait()
    single = _holder(tmp_path / 'single')
    try:
        monkeypatch.setenv('DMLC_ROLE', 'worker')
        with pytest.raises(ValueError, match='process {}'.format(single.pid)):
            hold_run_lock(str(tmp_path / 'single'))
    finally:
        single.kill()
        single.wait()
