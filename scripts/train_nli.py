#!/usr/bin/env python
"""Train, evaluate and export decomposable attention (Parikh et al., 2016) on real SNLI data.

Default run (no arguments; the data ships inside the package): train on the SNLI dev pairs of the
e-SNLI line-format files minus the pairs that occur in the two SNLI 1.0 jsonl subsets (matched on
normalized text), validate on the 2,527 labelled jsonl pairs, keep the best epoch, write
``metrics.json``, export the hybridized model and check that the reloaded ``SymbolBlock`` agrees.
The options are written to ``<output-dir>/run_config.json``; a killed run rerun with the same
options resumes after its last finished epoch (``<output-dir>/checkpoints``).

Data paths: a ``*.jsonl`` (or ``.jsonl.gz``) file is read as SNLI 1.0 jsonl; anything else is the
one-sentence-per-line format given as the folder plus the split name, i.e. the common prefix of
``s1.X``/``s2.X``/``labels.X`` without ``s1.``: ``.../esnli_infersent_format/dev`` for ``s1.dev``.

Other modes (they load the model of --output-dir instead of training):
  --evaluate PATH            score PATH (either format), write <output-dir>/eval_metrics.json
  --predict PREMISE HYPOTHESIS   print the label and the three probabilities
  --plot-attention N         heat maps of the alignment of N validation pairs -> attention.png
"""
import argparse


def build_parser():
    """The command line: the options of NLIConfig, then the modes that use a trained model."""
    from gluon_attention.tasks.engine.config import add_arguments
    from gluon_attention.tasks.nli.config import NLIConfig
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split('\n\n', 1)[1])
    add_arguments(parser.add_argument_group('training (the default mode)'), NLIConfig)
    modes = parser.add_argument_group('other modes (they read the model of --output-dir)')
    modes.add_argument('--evaluate', metavar='PATH', default='',
                       help="score the model on PATH, either format (default: '': train)")
    modes.add_argument('--output', metavar='FILE', default='',
                       help="metrics file of --evaluate (default: '': "
                            '<output-dir>/eval_metrics.json)')
    modes.add_argument('--predict', nargs=2, metavar=('PREMISE', 'HYPOTHESIS'), default=None,
                       help='print the label and the three probabilities of one pair '
                            '(default: None)')
    modes.add_argument('--plot-attention', type=int, metavar='N', default=0,
                       help='heat maps of the alignment of the first N validation pairs -> '
                            '<output-dir>/attention.png (default: 0: no plot)')
    return parser


def _check_modes(args):
    """At most one of --evaluate, --predict, --plot-attention; --predict sentences non-empty."""
    from gluon_attention._checks import fail
    modes = {'evaluate': args.evaluate, 'predict': args.predict,
             'plot_attention': args.plot_attention}
    given = {name: value for name, value in modes.items() if value}
    if len(given) > 1:
        fail('give at most one of --evaluate, --predict, --plot-attention', **given)
    if args.predict and not all(text.strip() for text in args.predict):
        fail('--predict needs a non-empty premise and hypothesis', premise=args.predict[0],
             hypothesis=args.predict[1])


def main(argv=None):
    """Run the mode the command line names; returns what the library function returns."""
    import mxnet as mx
    from gluon_attention.tasks.nli import job as nli
    from gluon_attention.tasks.engine.config import from_args
    from gluon_attention.tasks.nli.config import NLIConfig, check_config
    parser = build_parser()
    args = parser.parse_args(argv)
    config = from_args(NLIConfig, args)
    try:
        check_config(config)
        _check_modes(args)
    except (ValueError, TypeError) as err:
        parser.error(str(err))
    mx.npx.set_np()
    try:            # a missing or malformed data file or model folder: one line, nothing written
        if args.evaluate:
            return nli.evaluate(config, args.evaluate, args.output)
        if args.predict:
            return nli.predict(config, *args.predict)
        if args.plot_attention:
            return nli.plot_attention(config, args.plot_attention)
        data = nli.load_data(config)
        entry = nli.check_resume(config)
    except (ValueError, OSError, ImportError) as err:
        raise SystemExit('train_nli.py: error: {}'.format(err)) from None
    return nli.train(config, data, entry)


if __name__ == '__main__':
    from _threads import threads_before_mxnet   # scripts/_threads.py, before MXNet starts
    threads_before_mxnet()
    main()
