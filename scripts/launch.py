#!/usr/bin/env python
"""Run a command as the workers of a ``dist_sync`` job on this machine (127.0.0.1).

Starts MXNet's scheduler, SERVERS servers and WORKERS copies of the command with the DMLC
variables set, prefixes their output with the worker's rank, and stops every process as soon as
one fails or the time limit passes. The command must use a distributed kvstore, e.g.

  python scripts/launch.py -n 2 -s 1 -- python scripts/run_squad.py train --kvstore dist_sync \
      --batch-size 8    # 2 workers x 8 = the 16 features of one step of the demo

Exit status: 0 when every worker exited with 0; else the first failure's (128 + N for signal N)
or 124 after --timeout. For several machines, set the variables by hand (README, "More than one
device or machine").
"""
import argparse
import os
import signal
import sys

# the repository root, for the jobs (jobs/, not part of the installed package)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def build_parser():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split('\n\n', 1)[1], allow_abbrev=False)
    parser.add_argument('-n', '--num-workers', type=int, required=True, metavar='WORKERS',
                        help='worker processes (each runs the command)')
    parser.add_argument('-s', '--num-servers', type=int, default=1, metavar='SERVERS',
                        help='server processes summing the gradients (default: 1)')
    parser.add_argument('--timeout', type=float, default=0,
                        help='stop every process after this many seconds (default: 0, no limit)')
    parser.add_argument('--port', type=int, default=None,
                        help="the scheduler's port on 127.0.0.1 (default: a free one)")
    parser.add_argument('command', nargs=argparse.REMAINDER,
                        help='the worker command, after --')
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    command = args.command[1:] if args.command[:1] == ['--'] else args.command
    from jobs.engine.launch import launch_local
    # SIGTERM unwinds like Ctrl-C, so the started processes are stopped too
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    return launch_local(command, args.num_workers, args.num_servers, timeout=args.timeout,
                        port=args.port)


if __name__ == '__main__':
    sys.exit(main())
