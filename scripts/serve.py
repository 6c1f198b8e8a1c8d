#!/usr/bin/env python
"""Serve a fine-tuned SQuAD model over HTTP with Multi Model Server (127.0.0.1 only).

Commands:
  start   export the graph if needed, archive model and graph into a .mar, start the server,
          register the model with its batching, wait until it answers, print how to query it
  stop    stop the instance of --instance-dir (by its own pid file)
  status  say whether it runs, its pid, workers and URL

Needs a Java runtime (Debian/Ubuntu: openjdk-17-jre-headless) and the [serve] extra
(pip install 'gluon_attention[serve]'). See docs/serving.md.
"""
import argparse
import json
import os
import shlex
import sys

# the repository root, for the jobs (jobs/, not part of the installed package)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

COMMANDS = ('start', 'stop', 'status')
#: the instance folder of ``make serve`` and of stop/status without --instance-dir
DEFAULT_INSTANCE_DIR = os.path.join('runs', 'serve')


def build_parser():
    from jobs.engine.config import add_arguments
    from jobs.serve.config import ServeConfig
    parser = argparse.ArgumentParser(prog='serve.py', description=__doc__.split('\n\n')[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split('\n\n', 1)[1], allow_abbrev=False)
    commands = parser.add_subparsers(dest='command', required=True)
    add_arguments(commands.add_parser('start', help='start a server', allow_abbrev=False),
                  ServeConfig)
    for name in ('stop', 'status'):
        sub = commands.add_parser(name, help='{} the server of --instance-dir'.format(name),
                                  allow_abbrev=False)
        sub.add_argument('--instance-dir', default=DEFAULT_INSTANCE_DIR,
                         help='the instance folder (default: {})'.format(DEFAULT_INSTANCE_DIR))
    return parser


def _usage(info):
    question = json.dumps({'question': 'Who ruled the duchy of Normandy?',
                           'context': 'The duchy of Normandy was ruled by the Normans.'})
    return ('serving {model_dir} as {model_name} (pid {pid}, {workers} worker(s) x {threads} '
            'threads, batch {batch_size}, delay {max_batch_delay} ms)\n'
            'query it:\n  curl -s -H "Content-Type: application/json" -d \'{q}\' {url}\n'
            'stop it:\n  {stop}'.format(q=question, stop=_stop_command(info['instance_dir']),
                                        **info))


#: the second line of the error when the model folder does not exist (yet)
_NO_MODEL = ('serve.py start: {} does not exist: run make demo first (it trains and saves the '
             'model folder runs/squad/model), or name a model folder with --model-dir (make '
             'serve MODEL_DIR=...)')


def _stop_command(instance_dir):
    """How to stop the instance of ``instance_dir``: ``make serve-stop`` for the default one."""
    script = 'scripts/serve.py stop --instance-dir {}'.format(shlex.quote(instance_dir))
    if os.path.normpath(instance_dir) == DEFAULT_INSTANCE_DIR:
        return 'make serve-stop   (or: {})'.format(script)
    return '{}   (or: make serve-stop SERVE_DIR={})'.format(script, shlex.quote(instance_dir))


def main(argv=None):
    from jobs.engine.config import as_flags, from_args
    from jobs.serve import instance as serve
    from jobs.serve.config import ServeConfig
    namespace = build_parser().parse_args(argv)
    if namespace.command == 'stop':
        pid = serve.stop(namespace.instance_dir)
        print('stopped the server of {} (pid {})'.format(namespace.instance_dir, pid)
              if pid else 'no server runs in {}'.format(namespace.instance_dir))
        return 0
    if namespace.command == 'status':
        pid = serve.running_pid(namespace.instance_dir)
        if not pid:
            print('no server runs in {}'.format(namespace.instance_dir))
            return 1
        url = serve.instance_url(namespace.instance_dir) or '?'
        print('running: pid {}, workers {}, {}'.format(
            pid, serve.worker_pids(namespace.instance_dir), url))
        return 0
    config = from_args(ServeConfig, namespace)
    try:
        info = serve.start(config)
    except (ValueError, RuntimeError) as err:     # ServeSetupError is a RuntimeError
        print('serve.py start: error: {}'.format(as_flags(err, ServeConfig)), file=sys.stderr)
        if not os.path.isdir(config.model_dir):
            print(_NO_MODEL.format(config.model_dir), file=sys.stderr)
        return 2
    print(_usage(info))
    return 0


if __name__ == '__main__':
    sys.exit(main())
