"""A bounded load test of the QA server: a fixed number of requests at a fixed concurrency over
loopback, stopping by itself at a time limit; throughput, latency percentiles, errors, and the
answers compared with expected ones (optionally while the worker is killed).

Used by ``scripts/serve_load.py`` and the server tests.
"""
import concurrent.futures
import dataclasses
import math
import threading
import time
import urllib.parse

import numpy as onp

from gluon_attention.checks import fail

from .protocol import http_request

__all__ = ['LOOPBACK', 'Outcome', 'check_loopback', 'run_load', 'summarize', 'compare_answers',
           'NEAR_TIE']

LOOPBACK = ('127.0.0.1', 'localhost', '::1')
#: Two answers that differ count as a near-tie, not a wrong answer, when their span scores, or
#: the null score difference and the threshold, are this close (batch padding moves the
#: float32 logits by about 1e-6).
NEAR_TIE = 1e-4


@dataclasses.dataclass
class Outcome:
    """One request: when it was sent and answered (seconds from the start), its status (0: no
    HTTP answer) and its body."""
    index: int
    sent: float
    done: float
    status: int
    body: str

    @property
    def latency(self):
        return self.done - self.sent


def check_loopback(url):
    """The URL, when its host is a loopback address (ValueError otherwise)."""
    host = urllib.parse.urlsplit(url).hostname
    if host not in LOOPBACK:
        fail('--url must name a loopback host ({})'.format(', '.join(LOOPBACK)), url=url)
    return url


def run_load(url, bodies, concurrency, time_limit, kill_after=0, kill=None, timeout=130.0):
    """POST every body of ``bodies`` to ``url`` with ``concurrency`` requests in flight.

    Parameters
    ----------
    url : str
        A loopback URL (checked).
    bodies : list of bytes
        JSON request bodies, sent in order.
    concurrency : int
    time_limit : float
        Seconds after which no new request is sent (those left are reported as not sent).
    kill_after : int
        When > 0, ``kill()`` is called once, after this many answers.
    kill : callable, optional
    timeout : float
        Seconds one request may take.

    Returns
    -------
    (list of Outcome, dict)
        The outcomes of the requests sent, in order of sending, and ``{'wall_s', 'kill_s'}``
        (when ``kill()`` had returned, None if it was not called).
    """
    check_loopback(url)
    lock, start = threading.Lock(), time.perf_counter()
    state = {'next': 0, 'answered': 0, 'kill_s': None}
    outcomes = []

    def worker():
        while True:
            with lock:
                index = state['next']
                if index >= len(bodies) or time.perf_counter() - start > time_limit:
                    return
                state['next'] += 1
            sent = time.perf_counter() - start
            status, text = http_request('POST', url, bodies[index], timeout=timeout)
            with lock:
                outcomes.append(Outcome(index, sent, time.perf_counter() - start, status, text))
                state['answered'] += 1
                due = kill_after and state['answered'] == kill_after and kill is not None
            if due:
                kill()
                state['kill_s'] = time.perf_counter() - start

    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        for future in [pool.submit(worker) for _ in range(concurrency)]:
            future.result()
    outcomes.sort(key=lambda o: o.sent)
    return outcomes, {'wall_s': time.perf_counter() - start, 'kill_s': state['kill_s']}


def _percentile(values, q):
    return round(float(onp.percentile(values, q)) * 1000, 1) if values else None


def summarize(outcomes, timing, total, questions_per_request=1):
    """Throughput (questions/s), latency percentiles (ms), errors, and around a kill: how long
    after it the first request sent after it was answered (``recovered_s``), how many requests
    sent until then failed, and how many sent after it failed (should be 0)."""
    ok = [o for o in outcomes if o.status == 200]
    latencies = [o.latency for o in ok]
    statuses = {}
    for o in outcomes:
        statuses[str(o.status)] = statuses.get(str(o.status), 0) + 1
    summary = {'requests': total, 'sent': len(outcomes), 'not_sent': total - len(outcomes),
               'ok': len(ok), 'failed': len(outcomes) - len(ok), 'statuses': statuses,
               'wall_s': round(timing['wall_s'], 2),
               'questions_per_s': round(len(ok) * questions_per_request / timing['wall_s'], 2),
               'p50_ms': _percentile(latencies, 50), 'p95_ms': _percentile(latencies, 95),
               'p99_ms': _percentile(latencies, 99)}
    kill = timing.get('kill_s')
    if kill is not None:
        back = min((o.done for o in ok if o.sent > kill), default=math.inf)
        summary.update(
            kill_s=round(kill, 2), recovered_s=None if back == math.inf else round(back - kill, 2),
            failed_before_recovery=sum(o.status != 200 for o in outcomes if o.sent <= back),
            failed_after_recovery=sum(o.status != 200 for o in outcomes if o.sent > back))
    return summary


def _near_tie(want, got):
    """Two differing answers: the null decision at the threshold (one is ''), or two spans of
    equal score."""
    if want['answer'] and got['answer']:
        return abs(want['score'] - got['score']) <= NEAR_TIE
    return any(a['null_score_diff'] is not None and a['threshold'] is not None
               and abs(a['null_score_diff'] - a['threshold']) <= NEAR_TIE for a in (want, got))


def compare_answers(expected, answers):
    """Compare answers by question id: ``{'compared', 'same', 'near_ties', 'wrong',
    'wrong_ids'}``. An answer that differs is a near-tie when the two span scores are within
    :data:`NEAR_TIE` (two spans of equal score) or, where one answer is '', either side's null
    score difference is that close to its threshold; otherwise it is wrong."""
    same = near = 0
    wrong = []
    for key, got in answers.items():
        want = expected.get(key)
        if want is None:
            continue
        if want['answer'] == got['answer']:
            same += 1
        elif _near_tie(want, got):
            near += 1
        else:
            wrong.append(key)
    return {'compared': same + near + len(wrong), 'same': same, 'near_ties': near,
            'wrong': len(wrong), 'wrong_ids': wrong[:20]}

