#!/usr/bin/env python
"""Our SQuAD 1.1 fine-tuning against PyTorch + transformers: same data, same budget.

Commands:
  features  write the one feature file both sides read: the training chunks of SQuAD 1.1 as
            run_squad.py train builds them (T=128, stride 64; the official-protocol run's
            training articles), a dev prefix at the evaluation lengths (T=384, stride 128),
            and the batch order of each seed
  ours      train our model (the SQuAD job's loop and conditional head) on the file's batches
            for one seed and recipe, then predict the dev features
  theirs    the same with transformers' BertForQuestionAnswering: runs
            scripts/compare_transformers_peer.py in --peer-python (torch and transformers)
  score     decode every run its own way (ours: conditional n-best; theirs: the transformers
            example's start x end n-best), score with our SQuAD v1.1 scorer: table.md,
            results.json

Recipes: ours (run_squad.py train's defaults) and theirs (the transformers question-answering
example's: lr 3e-5, no warm-up, linear decay, no weight decay, AdamW epsilon 1e-8, clipping at 1,
nothing frozen, the model's dropout). Both sides start from the same encoder folder (its
sha256 is checked). See docs/squad.md, "Side by side with PyTorch + transformers".
"""
import argparse
import os
import sys

# the repository root, for the jobs (jobs/, not part of the installed package)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

COMMANDS = ('features', 'ours', 'theirs', 'score')


def _run_flags(sub):
    """The options of one training run, the same for both sides."""
    sub.add_argument('--features', default='runs/compare/features.npz', help='the feature file')
    sub.add_argument('--output-dir', required=True, help='the run folder')
    sub.add_argument('--seed', type=int, default=1, help='its batch order must be in the file')
    sub.add_argument('--steps', type=int, required=True, help='training steps')
    sub.add_argument('--batch', type=int, default=16, help='features per step (the file\'s)')
    sub.add_argument('--recipe', choices=('ours', 'theirs'), default='ours')
    sub.add_argument('--threads', type=int, default=1, help='threads (MXNet and torch alike)')


def build_parser():
    """The command line: features (the config of the feature file), ours, theirs, score."""
    from jobs.bench.compare import FeatureFileConfig
    from jobs.engine.config import add_arguments
    parser = argparse.ArgumentParser(prog='compare_transformers.py',
                                     description=__doc__.split('\n\n')[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split('\n\n', 1)[1], allow_abbrev=False)
    commands = parser.add_subparsers(dest='command', metavar='{' + ','.join(COMMANDS) + '}',
                                     required=True)
    features = commands.add_parser('features', help=FeatureFileConfig.__doc__.splitlines()[0],
                                   allow_abbrev=False)
    add_arguments(features, FeatureFileConfig)
    features.add_argument('--threads', type=int, default=1, help='threads')
    ours = commands.add_parser('ours', help='train and predict our side', allow_abbrev=False)
    _run_flags(ours)
    ours.add_argument('--checkpoint-every', type=int, default=0,
                      help='save a checkpoint every N steps (0: after the last only); a killed '
                           'run resumes from it')
    ours.add_argument('--progress', action=argparse.BooleanOptionalAction, default=False)
    ours.add_argument('--matmul-dtype', choices=('float32', 'bfloat16'), default='float32',
                      help="dtype of the encoder's dense products in the training steps "
                           '(bfloat16: CPU, oneDNN; the dev features are predicted in float32)')
    theirs = commands.add_parser('theirs', help='train and predict the PyTorch side',
                                 allow_abbrev=False)
    _run_flags(theirs)
    theirs.add_argument('--peer-python', default='.venv-peer/bin/python',
                        help='the interpreter with torch and transformers')
    score = commands.add_parser('score', help='decode, score, tabulate', allow_abbrev=False)
    score.add_argument('--features', default='runs/compare/features.npz')
    score.add_argument('--runs', nargs='+', required=True, help='run folders')
    score.add_argument('--output-dir', default='runs/compare', help='table.md, results.json')
    score.add_argument('--n-best-size', type=int, default=20)
    score.add_argument('--max-answer-length', type=int, default=30)
    score.add_argument('--threads', type=int, default=1, help='threads')
    return parser


def _run(args):
    import os
    from jobs.bench import compare_runs
    if args.threads < 1 or args.steps < 1:
        raise ValueError('--threads and --steps must be >= 1. Received: threads={}, '
                         'steps={}'.format(args.threads, args.steps))
    fields = {k: v for k, v in vars(args).items() if k in compare_runs.RunConfig.__annotations__}
    fields['peer_script'] = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                         'compare_transformers_peer.py')
    run = compare_runs.RunConfig(**fields)
    return (compare_runs.run_ours if args.command == 'ours' else compare_runs.run_theirs)(run)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    import mxnet as mx
    mx.npx.set_np()
    from jobs.engine.config import from_args
    try:
        if args.command == 'features':
            from jobs.bench import compare
            compare.write_feature_file(from_args(compare.FeatureFileConfig, args))
        elif args.command == 'score':
            from jobs.bench import compare_score
            compare_score.score_runs(args.features, args.runs, args.output_dir,
                                     args.n_best_size, args.max_answer_length)
        else:
            _run(args)
    except (ValueError, OSError, RuntimeError) as err:
        print('compare_transformers.py: error: {}'.format(err), file=sys.stderr)
        return 2
    return 0


if __name__ == '__main__':
    from _threads import threads_before_mxnet   # scripts/_threads.py, before MXNet starts
    threads_before_mxnet()
    sys.exit(main())
