#!/usr/bin/env python
"""Bounded load test of a running QA server (make serve): every question of a SQuAD-format file
as one request, --concurrency requests in flight, over loopback only, stopping at --time-limit.

Prints one JSON object: throughput (questions/s), p50/p95/p99 latency (ms, answered requests),
errors by status, the load average; with --kill-worker-after K the worker's model process is
killed after K answers (the server starts a new one) and the summary says how many requests
failed around the kill and after the recovery; with --expected the answers are compared
(same / near-ties / wrong); --write-answers keeps them for a later comparison. Exits 1 when no
request was answered, a compared answer is wrong or requests failed after a recovery.
"""
import argparse
import json
import os
import sys

# the repository root, for the jobs (jobs/, not part of the installed package)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

DEFAULT_URL = 'http://127.0.0.1:8080/predictions/squad'


def build_parser():
    parser = argparse.ArgumentParser(prog='serve_load.py', description=__doc__.split('\n\n')[0],
                                     epilog=__doc__.split('\n\n', 1)[1], allow_abbrev=False)
    parser.add_argument('--url', default='', help='the prediction URL (loopback only; default: '
                        "the url of --instance-dir's instance.json, else {})".format(DEFAULT_URL))
    parser.add_argument('--questions', default='haystack-small', help='SQuAD-format file: a '
                        'path, or a named data set of the data folder (haystack-small, ...); its '
                        'answers are ignored')
    parser.add_argument('--data-dir', default='', help="the data folder holding the named SQuAD "
                        "files ('': $GA_DATA_DIR, else ../shared/data from the repository root; "
                        'see docs/data.md)')
    parser.add_argument('--requests', type=int, default=0, help='requests to send (0: one per '
                        'question; more cycle through the questions)')
    parser.add_argument('--concurrency', type=int, default=8, help='requests in flight')
    parser.add_argument('--time-limit', type=float, default=600.0, help='seconds after which '
                        'no request is sent')
    parser.add_argument('--kill-worker-after', type=int, default=0, help='kill the model '
                        'process of --instance-dir after this many answers (0: never)')
    parser.add_argument('--instance-dir', default='runs/serve', help='the server instance '
                        '(its URL, and for --kill-worker-after)')
    parser.add_argument('--expected', default='', help='answers JSON of an earlier run '
                        '(--write-answers) to compare with')
    parser.add_argument('--write-answers', default='', help='write the answers by question id')
    parser.add_argument('--out', default='', help='also write the summary JSON here')
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    from gluon_attention.data.squad import read_squad
    from gluon_attention.files import atomic_write_json
    from jobs.serve.instance import instance_url, kill_workers
    from jobs.serve.load import check_loopback, compare_answers, run_load, summarize
    from jobs.squad.data import data_path
    from jobs.engine.config import as_flags
    args.url = args.url or instance_url(args.instance_dir) or DEFAULT_URL
    try:
        check_loopback(args.url)
        examples = read_squad(data_path(args.questions, args.data_dir or None),
                              require_answers=False)
    except ValueError as err:
        build_parser().error(as_flags(err, ['data_dir']))
    count = args.requests or len(examples)
    order = [examples[i % len(examples)] for i in range(count)]
    bodies = [json.dumps({'question': e.question, 'context': e.context}).encode('utf-8')
              for e in order]
    outcomes, timing = run_load(args.url, bodies, args.concurrency, args.time_limit,
                                args.kill_worker_after,
                                lambda: kill_workers(args.instance_dir))
    summary = summarize(outcomes, timing, count)
    summary.update(concurrency=args.concurrency, load_average=[round(x, 2) for x in
                                                                os.getloadavg()])
    answers = {order[o.index].qas_id: json.loads(o.body) for o in outcomes if o.status == 200}
    if args.expected:
        with open(args.expected, encoding='utf-8') as handle:
            summary['answers'] = compare_answers(json.load(handle), answers)
    if args.write_answers:
        atomic_write_json(args.write_answers, answers)
    if args.out:
        atomic_write_json(args.out, summary)
    print(json.dumps(summary))
    wrong = summary.get('answers', {}).get('wrong', 0)
    if not summary['ok']:
        print('serve_load.py: error: no request to {} was answered'.format(args.url),
              file=sys.stderr)
    return 1 if wrong or summary.get('failed_after_recovery') or not summary['ok'] else 0


if __name__ == '__main__':
    sys.exit(main())
