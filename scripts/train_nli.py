#!/usr/bin/env python
"""Train, evaluate and export decomposable attention (Parikh et al., 2016) on real SNLI data.

Commands (``train`` when none is given):
  train           train, keep the best epoch, write metrics.json, export and check the reload
  evaluate PATH   score the model of --output-dir on PATH (either format) -> eval_metrics.json
  predict PREMISE HYPOTHESIS   print the label and the three probabilities of one pair
  plot-attention N             heat maps of the alignment of N validation pairs -> attention.png

Default run (no arguments; the files of the data folder: --data-dir, else $GA_DATA_DIR, else
../shared/data from the repository root, see docs/data.md): train on the SNLI dev pairs of the
e-SNLI line-format files minus the pairs that occur in the two SNLI 1.0 jsonl subsets (matched on
normalized text), validate on the 2,527 labelled jsonl pairs, keep the best epoch, write
``metrics.json``, export the hybridized model and check that the reloaded ``SymbolBlock`` agrees.
The options are written to ``<output-dir>/run_config.json``, with the environment variables that
change the numbers (MXNET_SAFE_ACCUMULATION, set to 1 unless already set, and OMP_NUM_THREADS); a
killed run rerun with the same options resumes after its last finished epoch
(``<output-dir>/checkpoints``). ``evaluate`` refuses pairs the model was trained on
(``<output-dir>/config.json`` records them).

Data paths: a ``*.jsonl`` (or ``.jsonl.gz``) file is read as SNLI 1.0 jsonl; anything else is the
one-sentence-per-line format given as the folder plus the split name, i.e. the common prefix of
``s1.X``/``s2.X``/``labels.X`` without ``s1.``: ``.../esnli_infersent_format/dev`` for ``s1.dev``.
``<command> --help`` lists every option with its default.
"""
import argparse
import sys
import os

# the repository root, for the jobs (jobs/, not part of the installed package)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

COMMANDS = ('train', 'evaluate', 'predict', 'plot-attention')
HELP = {'train': 'train, keep the best epoch, write metrics.json, export and check the reload',
        'evaluate': 'score the model of --output-dir on the labelled pairs of PATH',
        'predict': 'the label and the three probabilities of one pair',
        'plot-attention': 'heat maps of the alignment of the first N validation pairs'}
#: The options of NLIConfig that the commands using a trained model read.
MODEL_OPTIONS = {'evaluate': ('output_dir', 'ctx', 'threads'),
                 'predict': ('output_dir', 'ctx', 'threads'),
                 'plot-attention': ('output_dir', 'ctx', 'threads', 'valid', 'data_dir')}


def build_parser():
    """The command line: one sub-command per mode, each with the NLIConfig options it reads."""
    import dataclasses
    from jobs.engine.config import add_arguments
    from jobs.nli.config import NLIConfig
    parser = argparse.ArgumentParser(prog='train_nli.py', description=__doc__.split('\n\n')[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split('\n\n', 1)[1], allow_abbrev=False)
    commands = parser.add_subparsers(dest='command', metavar='{' + ','.join(COMMANDS) + '}')
    names = {f.name for f in dataclasses.fields(NLIConfig)}
    for name in COMMANDS:
        sub = commands.add_parser(name, help=HELP[name], description=HELP[name],
                                  allow_abbrev=False)
        keep = MODEL_OPTIONS.get(name, names)
        add_arguments(sub, NLIConfig, skip=names - set(keep))
        sub.set_defaults(parser=sub)
    commands.choices['evaluate'].add_argument('path', metavar='PATH',
                                              help='the labelled pairs to score, either format')
    commands.choices['evaluate'].add_argument(
        '--output', metavar='FILE', default='',
        help="the metrics file (default: '': <output-dir>/eval_metrics.json)")
    commands.choices['predict'].add_argument('premise', metavar='PREMISE')
    commands.choices['predict'].add_argument('hypothesis', metavar='HYPOTHESIS')
    commands.choices['plot-attention'].add_argument(
        'count', metavar='N', type=int,
        help='how many validation pairs (the first N; at most 32 and the number of pairs)')
    return parser


def _check_command(args):
    """The sentences of ``predict`` must not be empty."""
    from gluon_attention.checks import fail
    if args.command == 'predict' and not (args.premise.strip() and args.hypothesis.strip()):
        fail('predict needs a non-empty premise and hypothesis', premise=args.premise,
             hypothesis=args.hypothesis)


def _use_model(args, config):
    """evaluate, predict or plot-attention: the model of --output-dir at work."""
    from jobs.nli import model
    if args.command == 'evaluate':
        return model.evaluate(config, args.path, args.output)
    if args.command == 'predict':
        return model.predict(config, args.premise, args.hypothesis)
    return model.plot_attention(config, args.count)


def main(argv=None):
    """Run the command the command line names; returns what the library function returns."""
    import sys
    import mxnet as mx
    from jobs.engine.config import as_flags, from_args, parse_command
    from jobs.nli.config import NLIConfig, check_config
    args = parse_command(build_parser(), sys.argv[1:] if argv is None else argv)
    config = from_args(NLIConfig, args)
    try:
        check_config(config)
        _check_command(args)
    except (ValueError, TypeError) as err:
        args.parser.error(as_flags(err, NLIConfig))
    mx.npx.set_np()
    from jobs.nli import job, model
    try:            # a missing or malformed data file or model folder: one line, nothing written
        if args.command != 'train':
            return _use_model(args, config)
        data = model.load_data(config)
        entry = job.check_resumable(config)
    except (ValueError, OSError, ImportError) as err:
        raise SystemExit('train_nli.py: error: {}'.format(as_flags(err, NLIConfig))) from None
    from jobs.engine.loop import exit_interrupted
    try:
        return job.train(config, data, entry)
    except KeyboardInterrupt as stop:       # Ctrl-C: one line, status 130
        return exit_interrupted('train_nli.py', stop, True)


if __name__ == '__main__':
    import os
    from _threads import threads_before_mxnet   # scripts/_threads.py, before MXNet starts
    threads_before_mxnet()
    # float32 reductions accumulate in float64 unless the caller set the variable otherwise, as
    # under make nli, whose Makefile exports it: the recorded results were made so
    os.environ.setdefault('MXNET_SAFE_ACCUMULATION', '1')
    main()
