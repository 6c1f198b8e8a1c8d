"""The long form of the server test (GA_FULL_TESTS=1, make test-full): the bounded load test on
the tiny model at concurrency 8 with the server's batching, the worker killed under load (requests
sent after the recovery all answered, no answer wrong), and a stop and start that answers the
same questions identically."""
import json

import pytest

from jobs.serve import instance as serve
from jobs.serve.load import compare_answers, run_load, summarize

from serve_helpers import questions, requires_java, start_server, tiny_model

pytestmark = [requires_java, pytest.mark.slow]
COUNT = 240


def _load(info, pairs, concurrency, **kill):
    bodies = [json.dumps(p).encode('utf-8') for p in pairs]
    outcomes, timing = run_load(info['url'], bodies, concurrency, 300, timeout=30, **kill)
    answers = {str(o.index): json.loads(o.body) for o in outcomes if o.status == 200}
    return summarize(outcomes, timing, len(bodies)), answers


def test_load_kill_under_load_and_restart(tmp_path):
    model = tiny_model(tmp_path)
    pairs = questions(COUNT)
    config, info = start_server(model, 'instance', batch_size=8, max_batch_delay=20)
    try:
        summary, reference = _load(info, pairs, 8)
        assert (summary['ok'], summary['failed']) == (COUNT, 0)
        assert summary['questions_per_s'] > 0 and summary['p50_ms'] <= summary['p99_ms']
        summary, answers = _load(info, pairs, 8, kill_after=60,
                                 kill=lambda: serve.kill_workers(config.instance_dir))
        assert summary['kill_s'] is not None and summary['recovered_s'] is not None
        assert summary['failed_after_recovery'] == 0
        assert summary['failed'] == summary['failed_before_recovery'] <= 8 + 8
        assert compare_answers(reference, answers)['wrong'] == 0
        one_by_one = _load(info, pairs[:40], 1)[1]
    finally:
        serve.stop(config.instance_dir)
    assert serve.running_pid(config.instance_dir) is None
    config, info = start_server(model, 'instance', batch_size=8, max_batch_delay=20)
    try:
        again = _load(info, pairs[:40], 1)[1]
    finally:
        serve.stop(config.instance_dir)
    assert again == one_by_one           # same batches (one question each): identical answers
