"""Start, stop and inspect one Multi Model Server instance serving the QA model.

An instance lives in its own folder (``--instance-dir``, default ``runs/serve``)::

    config.properties   the server's configuration (127.0.0.1 only, decode_input_request=false)
    instance.json       what start started: ports, model, batching, the frontend's pid
    store/<name>.mar    the model archive;  stage/  the links it is built from
    export/qa-*         the exported graph, when the model folder had none beside it
    tmp/                TEMP/TMPDIR: the pid file, worker sockets, unpacked archives
    logs/               LOG_LOCATION/METRICS_LOCATION: the server's logs; frontend.log its console

:func:`start` uses the server's own launcher (``multi-model-server --start``, here
``python -m mms.model_server``) with that environment, waits for ``/ping``, registers the model
with its batching through the management API (``synchronous=true``: the workers have loaded it)
and checks that a question is answered. :func:`stop` ends the frontend found by this folder's pid
file and every process under it (the workers ignore SIGTERM, so they get SIGKILL).
"""
import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse

from gluon_attention.checks import fail
from gluon_attention.pipelines import NullThreshold
from gluon_attention.pipelines.folder import check_model_folder
import gluon_attention

from ..engine.common import atomic_path, atomic_write_json
from .archive import build_archive, default_graph, export_graph, graph_exists
from .protocol import Limits, http_request

__all__ = ['JAVA_PACKAGE', 'SERVE_EXTRA', 'ServeSetupError', 'instance_paths', 'check_runtime',
           'instance_url', 'running_pid', 'worker_pids', 'model_pids', 'kill_workers', 'start',
           'stop', 'http_request', 'MAX_REQUEST_BYTES', 'MAX_RESPONSE_BYTES']

JAVA_PACKAGE = 'openjdk-17-jre-headless'
SERVE_EXTRA = "pip install 'gluon_attention[serve]'"
HOST = '127.0.0.1'
#: The frontend's payload limits (bytes): a request body over the first gets the frontend's
#: own 413; a response over the second is not sent. Written into config.properties (their
#: Multi Model Server 1.1.11 defaults, 6,553,500 each, set explicitly).
MAX_REQUEST_BYTES = 6553500
MAX_RESPONSE_BYTES = 6553500
PING_QUESTION = {'question': 'What is served?', 'context': 'A question answering model is served.'}


class ServeSetupError(RuntimeError):
    """What the server needs is missing (Java, the [serve] extra) or it did not come up."""


def instance_paths(instance_dir):
    """The files and folders of an instance (absolute paths)."""
    root = os.path.abspath(instance_dir)
    names = {'config': 'config.properties', 'instance': 'instance.json', 'store': 'store',
             'tmp': 'tmp', 'logs': 'logs', 'export': os.path.join('export', 'qa')}
    paths = {key: os.path.join(root, name) for key, name in names.items()}
    paths.update(root=root, pid=os.path.join(paths['tmp'], '.model_server.pid'),
                 console=os.path.join(paths['logs'], 'frontend.log'))
    return paths


def instance_url(instance_dir):
    """The prediction URL that ``instance.json`` of ``instance_dir`` records; None without one."""
    path = instance_paths(instance_dir)['instance']
    if not os.path.isfile(path):
        return None
    with open(path, encoding='utf-8') as handle:
        return json.load(handle).get('url')


def java_path():
    """The ``java`` the server will run ($JAVA_HOME/bin/java, else PATH), or None."""
    home = os.environ.get('JAVA_HOME')
    if home:
        return shutil.which(os.path.join(home, 'bin', 'java'))
    return shutil.which('java')


def check_runtime():
    """Raise ServeSetupError naming what to install when Java or the [serve] extra is missing."""
    import importlib.util  # pylint: disable=import-outside-toplevel
    if java_path() is None:
        raise ServeSetupError('Multi Model Server needs a Java runtime (11 or later) on PATH or '
                              'in JAVA_HOME; on Debian/Ubuntu: sudo apt-get install -y '
                              + JAVA_PACKAGE)
    missing = [m for m in ('mms', 'model_archiver', 'psutil') if importlib.util.find_spec(m) is None]
    if missing:
        raise ServeSetupError('serving needs the [serve] extra (multi-model-server, '
                              'model-archiver): {} (missing: {})'.format(SERVE_EXTRA,
                                                                       ', '.join(missing)))


def _frontend(paths):
    """The psutil.Process of this instance's frontend, or None (no pid file, not running, or
    a reused pid that is not this instance's java)."""
    import psutil  # pylint: disable=import-outside-toplevel
    try:
        with open(paths['pid'], encoding='utf-8') as handle:
            process = psutil.Process(int(handle.read().strip()))
        mine = '-Djava.io.tmpdir={}'.format(paths['tmp']) in process.cmdline()
        return process if mine and process.status() != psutil.STATUS_ZOMBIE else None
    except (OSError, ValueError, psutil.Error):
        return None


def running_pid(instance_dir):
    """The pid of the instance's frontend when it runs, else None."""
    process = _frontend(instance_paths(instance_dir))
    return process.pid if process else None


def worker_pids(instance_dir):
    """Pids of the instance's worker processes (every process under its frontend)."""
    process = _frontend(instance_paths(instance_dir))
    return [child.pid for child in process.children(recursive=True)] if process else []


def model_pids(instance_dir):
    """Pids of the model processes: those under the frontend's listening workers (each forks
    one per connection from the frontend), the processes that hold the model and answer."""
    process = _frontend(instance_paths(instance_dir))
    return [grandchild.pid for child in (process.children() if process else [])
            for grandchild in child.children(recursive=True)]


def kill_workers(instance_dir):
    """SIGKILL the processes that hold the model and answer requests; returns their pids.

    Each worker is a listening process that forks one model process per connection from the
    frontend; these model processes are killed, and the frontend reconnects, so the listener
    forks a new one that loads the model again. (Multi Model Server 1.1.11 does not start a new
    listener when the listener itself dies: it retries the connection with a growing delay.)
    """
    pids = model_pids(instance_dir)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return pids


def _ended(process):
    """Whether the process has ended: gone, or a zombie (the frontend is not our child: its
    parent, often the system's init, reaps it when it gets to it)."""
    import psutil  # pylint: disable=import-outside-toplevel
    try:
        return process.status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


def _wait_ended(processes, timeout):
    deadline = time.time() + timeout
    while not all(_ended(p) for p in processes) and time.time() < deadline:
        time.sleep(0.05)


def stop(instance_dir, timeout=30.0):
    """Stop the instance: SIGTERM to its frontend, then SIGKILL to whatever of it is left after
    ``timeout`` seconds (workers at once). Returns the frontend's pid, or None when it was not
    running. The pid file is removed."""
    import psutil  # pylint: disable=import-outside-toplevel
    paths = instance_paths(instance_dir)
    frontend = _frontend(paths)
    if frontend is None:
        if os.path.exists(paths['pid']):
            os.remove(paths['pid'])
        return None
    seen = {}
    try:
        seen.update((c.pid, c) for c in frontend.children(recursive=True))
        frontend.terminate()
        deadline = time.time() + timeout
        while not _ended(frontend) and time.time() < deadline:
            seen.update((c.pid, c) for c in frontend.children(recursive=True))
            time.sleep(0.05)
        if not _ended(frontend):
            frontend.kill()
    except psutil.Error:
        pass
    for child in seen.values():
        try:
            child.kill()
        except psutil.Error:
            pass
    _wait_ended(list(seen.values()) + [frontend], timeout=10)
    if os.path.exists(paths['pid']):
        os.remove(paths['pid'])
    return frontend.pid


def _check_port_free(port, name):
    if not 0 < port < 32768:      # the frontend parses ports as Java shorts
        fail('--{} must be a port from 1 to 32767 (Multi Model Server reads it as a 16-bit '
             'signed number)'.format(name.replace('_', '-')), **{name: port})
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((HOST, port))
        except OSError:
            fail('--{} must be a free port on {}'.format(name.replace('_', '-'), HOST),
                 **{name: port})


def _properties(config, paths):
    """config.properties: 127.0.0.1 only, request bodies left undecoded for the handler, the
    response timeout in seconds, both payload limits.

    Multi Model Server 1.1.11 reads ``default_response_timeout`` (and the register call's
    ``response_timeout``) in minutes, multiplying them by 60; ``default_response_timeout_seconds``
    is used as given when set. Only the seconds setting is written, and the register call names
    no timeout, so the model gets ``response_timeout`` seconds.
    """
    values = {'inference_address': 'http://{}:{}'.format(HOST, config.port),
              'management_address': 'http://{}:{}'.format(HOST, config.management_port),
              'model_store': paths['store'], 'default_workers_per_model': config.workers,
              'decode_input_request': 'false',
              'default_response_timeout_seconds': config.response_timeout,
              'unregister_model_timeout': config.response_timeout, 'preload_model': 'false',
              'max_request_size': MAX_REQUEST_BYTES, 'max_response_size': MAX_RESPONSE_BYTES,
              'async_logging': 'true'}
    if config.jvm_args.strip():
        values['vmargs'] = config.jvm_args.strip()
    with atomic_path(paths['config']) as tmp:
        with open(tmp, 'w', encoding='utf-8') as handle:
            handle.write(''.join('{}={}\n'.format(k, v) for k, v in values.items()))


def _threshold(config):
    """The null threshold the archive records: None for ``'auto'`` (the folder's), else a number
    (ValueError for anything else)."""
    return NullThreshold.of(config.null_score_diff_threshold, 'flag',
                            'null_score_diff_threshold').value


def _resolve_graph(config, paths, log):
    graph = config.graph or default_graph(config.model_dir)
    if graph_exists(graph):
        return graph
    if config.graph:
        fail('--graph must be the prefix of an exported graph (<prefix>-symbol.json, '
             '-0000.params, -inputs.json)', graph=config.graph)
    if not graph_exists(paths['export']):
        log('no exported graph beside {}: exporting it to {}'.format(config.model_dir,
                                                                       paths['export']))
        export_graph(config.model_dir, paths['export'])
    return paths['export']


def _environment(config, paths):
    env = dict(os.environ, TEMP=paths['tmp'], TMPDIR=paths['tmp'], LOG_LOCATION=paths['logs'],
               METRICS_LOCATION=paths['logs'], OMP_NUM_THREADS=str(config.threads))
    # OpenMP threads that spin while they wait make a worker on cores busy with other work up to
    # 40x slower (measured: 6.5 s instead of 0.17 s per question, 2 threads at load 12 on 2 cores)
    env.setdefault('OMP_WAIT_POLICY', 'PASSIVE')
    # the workers import this copy of the library (the server puts the archive, which carries
    # the handler's code, first)
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(gluon_attention.__file__)))
    env['PYTHONPATH'] = os.pathsep.join(p for p in (package_root, env.get('PYTHONPATH')) if p)
    return env


def _log_tail(paths, lines=30):
    for name in ('model_log.log', 'mms_log.log', 'frontend.log'):
        path = os.path.join(paths['logs'], name)
        if os.path.isfile(path) and os.path.getsize(path):
            with open(path, encoding='utf-8', errors='replace') as handle:
                return '{} (last lines):\n{}'.format(path, ''.join(handle.readlines()[-lines:]))
    return 'no log in {}'.format(paths['logs'])


def _wait_for_ping(config, paths, deadline):
    url, started = 'http://{}:{}/ping'.format(HOST, config.port), time.time()
    while time.time() < deadline:
        if http_request('GET', url, timeout=5)[0] == 200:
            return
        if _frontend(paths) is None and time.time() > started + 5:
            break
        time.sleep(0.1)
    raise ServeSetupError('the server did not answer /ping; ' + _log_tail(paths))


def _register(config, paths, deadline):
    query = urllib.parse.urlencode({
        'url': config.model_name + '.mar', 'model_name': config.model_name,
        'batch_size': config.batch_size, 'max_batch_delay': config.max_batch_delay,
        'initial_workers': config.workers, 'synchronous': 'true'})   # timeout: the default
    status, text = http_request('POST', 'http://{}:{}/models?{}'.format(
        HOST, config.management_port, query), timeout=max(deadline - time.time(), 1),
        content_type=None)
    if status != 200:
        raise ServeSetupError('registering the model failed ({}: {}); {}'.format(
            status, text.strip(), _log_tail(paths)))
    status, text = http_request('POST', 'http://{}:{}/predictions/{}'.format(
        HOST, config.port, config.model_name), PING_QUESTION, timeout=config.response_timeout)
    if status != 200 or 'answer' not in json.loads(text or '{}'):
        raise ServeSetupError('the model did not answer a question ({}: {}); {}'.format(
            status, text.strip(), _log_tail(paths)))


def start(config, log=print):
    """Start an instance (see the module documentation); returns the content of instance.json.

    Raises
    ------
    ServeSetupError
        Java or the [serve] extra is missing, or the server did not come up (the message holds
        the end of its log); what was started is stopped.
    ValueError
        The instance already runs, a port is taken, the model folder or graph is incomplete.
    """
    check_model_folder(config.model_dir, fine_tuned=True)    # before Java: no model, no server
    check_runtime()
    _threshold(config)
    gluon_attention.Kernels(matmul_dtype=config.matmul_dtype).resolve()  # bfloat16 runs here
    paths = instance_paths(config.instance_dir)
    if running_pid(config.instance_dir):
        fail('--instance-dir must not hold a running server (stop it: scripts/serve.py stop '
             '--instance-dir {})'.format(config.instance_dir), instance_dir=config.instance_dir)
    for port, name in ((config.port, 'port'), (config.management_port, 'management_port')):
        _check_port_free(port, name)
    shutil.rmtree(paths['tmp'], ignore_errors=True)   # a stopped instance's sockets, archives
    for key in ('store', 'tmp', 'logs'):
        os.makedirs(paths[key], exist_ok=True)
    graph = _resolve_graph(config, paths, log)
    archive, built = build_archive(config.model_dir, graph, paths['store'], config.model_name,
                                   Limits(), config.features_per_pass, _threshold(config),
                                   config.matmul_dtype)
    log('{} {}'.format('archived' if built else 'archive up to date:', archive))
    _properties(config, paths)
    deadline = time.time() + config.start_timeout
    with open(paths['console'], 'ab') as console:
        subprocess.run([sys.executable, '-m', 'mms.model_server', '--start', '--mms-config',
                        paths['config'], '--model-store', paths['store']],
                       env=_environment(config, paths), cwd=paths['root'], stdout=console,
                       stderr=subprocess.STDOUT, start_new_session=True, check=False, timeout=60)
    try:
        _wait_for_ping(config, paths, deadline)
        _register(config, paths, deadline)
    except BaseException:
        stop(config.instance_dir)
        raise
    info = dict(dataclasses.asdict(config), pid=running_pid(config.instance_dir), graph=graph,
                archive=archive, url='http://{}:{}/predictions/{}'.format(
                    HOST, config.port, config.model_name))
    atomic_write_json(paths['instance'], info)
    return info
