#!/usr/bin/env python
"""Score SQuAD 2.0 answers with the mean null odds of several train runs of one split.

Every --run-dir is a ``run_squad.py train`` output folder (its ``run_config.json`` names the
held-out and evaluation articles; its ``null_odds.json`` and ``nbest_predictions.json`` hold its
answers to the evaluation questions); the --heldout-dir given in the same position holds the
same model's answers to the held-out articles (``run_squad.py evaluate --eval-file <the train
file> --eval-exclude-titles <its other articles>`` writes them to ``<output-dir>/evaluate/``).
The spans are the first run's; the threshold is the one of best F1 on the held-out articles;
``metrics.json``, ``predictions.json`` and ``null_odds.json`` (the mean) go to --output-dir.
See docs/squad.md.
"""
import argparse
import os
import sys

# the repository root, for the jobs (jobs/, not part of the installed package)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def build_parser():
    """The command line."""
    parser = argparse.ArgumentParser(prog='combine_null_odds.py',
                                     description=__doc__.split('\n\n')[0], epilog=__doc__.split(
                                         '\n\n', 1)[1], allow_abbrev=False,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--run-dir', action='append', required=True,
                        help='a train run folder (repeat for each run; the first gives the spans)')
    parser.add_argument('--heldout-dir', action='append', required=True,
                        help="the same run's answers to the held-out articles (one per --run-dir, "
                             'in the same order)')
    parser.add_argument('--output-dir', required=True, help='where the files are written')
    parser.add_argument('--data-dir', default='',
                        help="the data folder ('': the one the first run recorded)")
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    from jobs.engine.common import atomic_write_json
    from jobs.squad.combine import combine, read_run_outputs, run_split
    from jobs.squad.evaluation import format_metrics, write_metrics
    try:
        heldout, evaluation = run_split(args.run_dir, args.data_dir)
        results = combine(heldout, evaluation, [read_run_outputs(d) for d in args.heldout_dir],
                          [read_run_outputs(d) for d in args.run_dir])
    except (ValueError, OSError) as err:
        print('combine_null_odds.py: error: {}'.format(err), file=sys.stderr)
        return 2
    os.makedirs(args.output_dir, exist_ok=True)
    for name in ('final_predictions', 'null_odds'):
        atomic_write_json(os.path.join(args.output_dir, '{}.json'.format(
            'predictions' if name == 'final_predictions' else name)), results[name])
    write_metrics(args.output_dir, results['metrics'])
    print(format_metrics(results['metrics']))
    return 0


if __name__ == '__main__':
    sys.exit(main())
