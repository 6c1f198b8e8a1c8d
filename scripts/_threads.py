"""``--threads`` -> ``OMP_NUM_THREADS`` before MXNet starts, for every script.

MXNet reads the variable once, when it starts, and importing gluon_attention starts it; so this
module imports nothing of the package and each script calls :func:`threads_before_mxnet` first
thing under ``if __name__ == '__main__'``. The option itself (default, help) is declared in each
script's own parser.
"""
import argparse
import os
import sys


def threads_before_mxnet(argv=None):
    """Set ``OMP_NUM_THREADS`` from ``--threads`` in ``argv`` (0 or absent: every core)."""
    early = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    early.add_argument('--threads', type=int, default=0)
    threads = early.parse_known_args(sys.argv[1:] if argv is None else argv)[0].threads
    os.environ['OMP_NUM_THREADS'] = str(threads if threads > 0 else os.cpu_count() or 1)
