"""The response timeout is in seconds end to end: with the model process stopped (SIGSTOP), the
request in flight gets an error within the timeout + 10 s, and the requests queued behind it are
answered or refused explicitly (none is left without an answer); the generated config.properties
sets the timeout in seconds and both payload limits."""
import concurrent.futures
import functools
import os
import signal
import time

from jobs.serve import instance as serve

from serve_helpers import post, questions, requires_java, start_server, tiny_model

pytestmark = requires_java

#: seconds: long enough for the tiny model to load in a new model process on busy cores
TIMEOUT = 8
#: starts tried before the test fails (see :func:`_start`)
STARTS = 3


def _properties(instance_dir):
    with open(os.path.join(instance_dir, 'config.properties'), encoding='utf-8') as handle:
        return dict(line.rstrip('\n').split('=', 1) for line in handle if '=' in line)


def _timed_post(url, body):
    begin = time.time()
    status, _ = post(url, body, timeout=TIMEOUT + 60)
    return status, time.time() - begin


def _start(tmp_path):
    """Start the instance with ``response_timeout=TIMEOUT``, trying again when the model load
    timed out.

    Multi Model Server 1.1.11 reads a model's response timeout once per worker, before the
    worker's first message (``WorkerThread.runWorker``), and bounds the model load and every
    batch with it: the load cannot be given a longer one. On a loaded machine the first load
    (cold file cache, MXNet imported in a new process) can pass ``TIMEOUT`` and the registration
    fails (500, 'Failed to start workers'); the start (stopped by ``serve.start``) is tried again,
    with the files now cached, up to :data:`STARTS` times.
    """
    start = functools.partial(start_server, tiny_model(tmp_path), 'instance', batch_size=1,
                              max_batch_delay=10, response_timeout=TIMEOUT)
    for _ in range(STARTS - 1):
        try:
            return start()
        except serve.ServeSetupError as error:
            if 'registering the model failed' not in str(error):
                raise
    return start()


def test_a_stalled_worker_answers_an_error_within_the_timeout(tmp_path):
    config, info = _start(tmp_path)
    stalled = []
    try:
        written = _properties(config.instance_dir)
        assert written['default_response_timeout_seconds'] == str(TIMEOUT)
        assert 'default_response_timeout' not in written         # MMS reads it in minutes
        assert int(written['max_request_size']) == serve.MAX_REQUEST_BYTES
        assert int(written['max_response_size']) == serve.MAX_RESPONSE_BYTES
        stalled = serve.model_pids(config.instance_dir)
        assert stalled
        for pid in stalled:
            os.kill(pid, signal.SIGSTOP)
        pairs = questions(3, start=30)
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            first = pool.submit(_timed_post, info['url'], pairs[0])
            time.sleep(0.5)                  # the first is in flight, the others queue
            queued = [pool.submit(_timed_post, info['url'], p) for p in pairs[1:]]
            results = [first.result()] + [f.result() for f in queued]
        status, seconds = results[0]
        assert status >= 500 and seconds <= TIMEOUT + 10, results
        # answered (a new model process) or refused with a status; none left hanging (0)
        assert all(s == 200 or s >= 400 for s, _ in results[1:]), results
    finally:
        for pid in stalled:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        serve.stop(config.instance_dir)
