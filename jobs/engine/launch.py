"""The processes of a distributed job: joining one from a worker (:func:`create_kvstore`, checked
before a job reads its data by :func:`check_kvstore`) and starting one on this machine
(:func:`launch_local`: scheduler, servers and workers).

The processes find each other through MXNet's DMLC variables on the loopback address; their
output is forwarded line by line with a prefix (``[worker 1]``: the worker's kvstore rank, known
once it has joined through :func:`create_kvstore`; ``[worker ?0]`` before, with the launch
number). When one process fails (non-zero exit or a
signal) or the time limit passes, every process is stopped: a dead worker would otherwise leave
the others waiting for its gradients forever.

The scheduler and servers run ``python -c 'import mxnet'`` (MXNet enters their loop during the
import; servers only sum gradients) with this interpreter. MXNet 1.9.1's own
``tools/launch.py`` is not used: its tracker calls ``Thread.isAlive``, removed in Python 3.9.
"""
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import mxnet as mx

from gluon_attention import checks

from .common import atomic_path

__all__ = ['KVSTORES', 'DMLC_VARIABLES', 'RANK_FILE_VARIABLE', 'create_kvstore',
           'check_kvstore', 'HOST', 'free_port', 'launch_local']

#: The kvstore types accepted (``device`` sums on the devices, ``local`` on the CPU).
KVSTORES = ('device', 'local', 'dist_sync', 'dist_device_sync')
#: What a ``dist_*`` worker needs in its environment (set by ``scripts/launch.py``).
DMLC_VARIABLES = ('DMLC_ROLE', 'DMLC_PS_ROOT_URI', 'DMLC_PS_ROOT_PORT', 'DMLC_NUM_SERVER',
                  'DMLC_NUM_WORKER')
#: A worker writes its kvstore rank to the file this variable names (the launcher's prefixes).
RANK_FILE_VARIABLE = 'GLUON_ATTENTION_RANK_FILE'


def create_kvstore(kvstore):
    """Check a kvstore type and, for ``dist_*``, join the job described by the DMLC variables.

    Parameters
    ----------
    kvstore : str
        One of :data:`KVSTORES`.

    Returns
    -------
    str or mx.kv.KVStore
        The name for a local kvstore (``gluon.Trainer`` creates it, none for a single device),
        the joined distributed kvstore otherwise.

    Raises
    ------
    ValueError
        ``dist_async`` (it needs updates on the servers), any other unknown type, a ``dist_*``
        type in a process that is not a worker of a launched job (a DMLC variable missing), or a
        local type in a process launched as one of several workers.
    """
    if kvstore == 'dist_async':
        checks.fail("kvstore 'dist_async' needs the updates on the servers, which this engine "
                     "does not do (servers only sum gradients); use 'dist_sync' or "
                     "'dist_device_sync'", kvstore=kvstore)
    checks.check_choice('kvstore', kvstore, KVSTORES)
    if not kvstore.startswith('dist'):
        workers = int(os.environ.get('DMLC_NUM_WORKER') or 1)
        if os.environ.get('DMLC_ROLE') == 'worker' and workers > 1:
            checks.fail('this process was launched as one of several workers (DMLC_ROLE=worker, '
                         "DMLC_NUM_WORKER={}): use kvstore 'dist_sync' or 'dist_device_sync', or "
                         'the workers train apart'.format(workers),
                         kvstore=kvstore)
        return kvstore
    missing = [name for name in DMLC_VARIABLES if not os.environ.get(name)]
    if missing or os.environ['DMLC_ROLE'] != 'worker':
        checks.fail('kvstore {!r} runs in a worker process of a launched job: start it with '
                     'scripts/launch.py, or set {} by hand (DMLC_ROLE=worker)'.format(
                         kvstore, ', '.join(DMLC_VARIABLES)),
                     missing=missing, DMLC_ROLE=os.environ.get('DMLC_ROLE'))
    store = mx.kv.create(kvstore)
    if os.environ.get(RANK_FILE_VARIABLE):
        with atomic_path(os.environ[RANK_FILE_VARIABLE]) as tmp:
            with open(tmp, 'w', encoding='utf-8') as handle:
                handle.write(str(store.rank))
    return store

#: The only address the local launcher uses.
def check_kvstore(kvstore):
    """Check ``--kvstore`` before a job reads its data; returns the number of workers.

    Returns
    -------
    int
        ``DMLC_NUM_WORKER`` under a ``dist_*`` kvstore (set by ``scripts/launch.py``), else 1.

    Raises
    ------
    ValueError
        As :func:`create_kvstore` for a local kvstore (an unknown type, a process launched as
        one of several workers); for a ``dist_*`` kvstore in a process that is not a worker of
        a launched job (a DMLC variable missing). A ``dist_*`` kvstore is joined later, by the
        engine.
    """
    if kvstore not in KVSTORES or not kvstore.startswith('dist'):
        create_kvstore(kvstore)       # raises, or returns a local type's name (creates nothing)
        return 1
    missing = [name for name in DMLC_VARIABLES if not os.environ.get(name)]
    if missing or os.environ['DMLC_ROLE'] != 'worker':
        checks.fail('--kvstore {} trains in the workers of a launched job: start it with '
                     'scripts/launch.py, or set the DMLC variables by hand (README, "More than '
                     'one device or machine")'.format(kvstore),
                     missing=missing, DMLC_ROLE=os.environ.get('DMLC_ROLE'))
    return int(os.environ['DMLC_NUM_WORKER'])


HOST = '127.0.0.1'
_GRACE_SECONDS = 10.0   # how long the scheduler and servers get to finish after the workers


def free_port(host=HOST):
    """A TCP port the operating system reports free on ``host`` (bind to port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


class _Process:
    """One started process, its label and the thread that forwards its output."""

    def __init__(self, kind, number, command, env, rank_file, out, lock):
        self.kind, self.number, self.rank_file = kind, number, rank_file
        self.rank = None
        self.popen = subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, start_new_session=True)
        self.thread = threading.Thread(target=self._forward, args=(out, lock), daemon=True)
        self.thread.start()

    @property
    def label(self):
        if self.kind != 'worker':
            return self.kind if self.kind == 'scheduler' else 'server {}'.format(self.number)
        if self.rank is None and self.rank_file and os.path.exists(self.rank_file):
            with open(self.rank_file, encoding='utf-8') as handle:
                text = handle.read().strip()
            self.rank = int(text) if text.isdigit() else None
        return 'worker {}'.format(self.rank if self.rank is not None else '?%d' % self.number)

    def _forward(self, out, lock):
        for line in iter(self.popen.stdout.readline, b''):
            text = line.decode('utf-8', errors='replace').rstrip('\n')
            with lock:
                out.write('[{}] {}\n'.format(self.label, text))
                out.flush()

    def stop(self):
        """SIGTERM to the process group; SIGKILL what is left after 3 s."""
        for sig, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 5.0)):
            if self.popen.poll() is not None:
                break
            try:
                os.killpg(self.popen.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.popen.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                pass
        self.thread.join(timeout=2.0)


def _describe(code):
    if code < 0:
        try:
            return 'was killed by {}'.format(signal.Signals(-code).name)
        except ValueError:
            return 'was killed by signal {}'.format(-code)
    return 'exited with code {}'.format(code)


def _environment(port, num_workers, num_servers):
    env = dict(os.environ, DMLC_PS_ROOT_URI=HOST, DMLC_PS_ROOT_PORT=str(port),
               DMLC_NUM_SERVER=str(num_servers), DMLC_NUM_WORKER=str(num_workers),
               DMLC_NODE_HOST=HOST, PYTHONUNBUFFERED='1')
    env.pop(RANK_FILE_VARIABLE, None)
    return env


def _start_all(command, num_workers, num_servers, port, folder, out):
    lock, env, processes = threading.Lock(), _environment(port, num_workers, num_servers), []
    server = [sys.executable, '-c', 'import mxnet']
    roles = [('scheduler', 0)] + [('server', i) for i in range(num_servers)] + \
        [('worker', i) for i in range(num_workers)]
    for kind, number in roles:
        rank_file = os.path.join(folder, 'rank-%d' % number) if kind == 'worker' else None
        role_env = dict(env, DMLC_ROLE=kind)
        if rank_file:
            role_env[RANK_FILE_VARIABLE] = rank_file
        processes.append(_Process(kind, number, command if kind == 'worker' else server,
                                  role_env, rank_file, out, lock))
    return processes


def _watch(processes, timeout, out):
    """Wait for the workers; returns the exit code of the job (stopping everyone on failure)."""
    started, workers = time.time(), [p for p in processes if p.kind == 'worker']
    while True:
        for process in processes:
            code = process.popen.poll()
            if code:
                out.write('launch: {} {}; stopping the other processes\n'.format(
                    process.label, _describe(code)))
                return 128 - code if code < 0 else code
        if all(p.popen.poll() == 0 for p in workers):
            return 0
        if timeout and time.time() - started > timeout:
            out.write('launch: the job ran past --timeout {} s; stopping every process\n'.format(
                timeout))
            return 124
        time.sleep(0.1)


def launch_local(command, num_workers, num_servers=1, timeout=0, port=None, out=None):
    """Run ``command`` as ``num_workers`` workers of a ``dist_sync`` job on this machine.

    Parameters
    ----------
    command : list of str
        The worker's command line (it must use a ``dist_sync`` or ``dist_device_sync``
        kvstore, e.g. ``--kvstore dist_sync`` of a job).
    num_workers, num_servers : int >= 1
    timeout : float
        Stop every process after this many seconds (0: no limit).
    port : int, optional
        The scheduler's port on 127.0.0.1 (default: a free one).
    out : file, optional
        Where the prefixed output and the launcher's messages go (default ``sys.stdout``).

    Returns
    -------
    int
        0 when every worker exited with 0; else the first failure's exit code (128 + N for
        signal N, as a shell reports it) or 124 after the time limit.

    Raises
    ------
    ValueError
        An empty command, a count below 1 or a negative timeout.
    """
    if not command:
        checks.fail('expected a worker command after --', command=command)
    num_workers = checks.check_positive_int('num_workers', num_workers)
    num_servers = checks.check_positive_int('num_servers', num_servers)
    if timeout < 0:
        checks.fail('timeout must be >= 0 seconds (0: no limit)', timeout=timeout)
    out = out or sys.stdout
    with tempfile.TemporaryDirectory(prefix='ga-launch-') as folder:
        processes = _start_all(list(command), num_workers, num_servers,
                               port or free_port(), folder, out)
        try:
            code = _watch(processes, timeout, out)
            if code == 0:
                _finish(processes, out)
        finally:
            for process in processes:
                process.stop()
    return code


def _finish(processes, out):
    """After the workers: give the scheduler and servers a grace period to exit by themselves."""
    deadline = time.time() + _GRACE_SECONDS
    for process in processes:
        try:
            process.popen.wait(timeout=max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            out.write('launch: {} still running {} s after the workers finished; stopping '
                      'it\n'.format(process.label, _GRACE_SECONDS))
