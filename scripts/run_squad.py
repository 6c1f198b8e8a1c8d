#!/usr/bin/env python
"""Fine-tune a BERT-architecture encoder with the conditional QA head on SQuAD 2.0.

Commands (``train`` when none is given):
  train     fine-tune, save the model folder, evaluate, export and check the reload
  evaluate  score a saved model folder on a SQuAD file with answers (-> <output-dir>/evaluate/)
  predict   answer the questions of a SQuAD file (-> <output-dir>/predict/), or one --question
            about one --context
  curve     score every kept checkpoint of a train run: curve.csv and curve.png (learning curve)
  quantize  write the model folder's QA model in INT8 for ONNX Runtime (<output-dir>/int8/);
            evaluate and predict run it with --onnx-model <output-dir>/int8/qa-int8.onnx

Defaults are the `make demo` recipe (see docs/squad.md). A killed ``train`` resumes from its last
checkpoint when rerun with the same --output-dir and options; other training options there are
refused (use another --output-dir). evaluate and predict load <output-dir>/model unless
--model-dir is given, and never write over the train run's own files in <output-dir>. ``<command> --help`` lists every option with its default.
"""
import argparse
import os
import sys

# the repository root, for the jobs (jobs/, not part of the installed package)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

COMMANDS = ('train', 'evaluate', 'predict', 'curve', 'quantize')


def build_parser():
    """The command line: one sub-command per config class of the job."""
    from jobs.engine.config import add_arguments
    from jobs.squad.config import (CurveConfig, EvaluateConfig, PredictConfig,
                                                    QuantizeConfig, TrainConfig)
    parser = argparse.ArgumentParser(prog='run_squad.py', description=__doc__.split('\n\n')[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split('\n\n', 1)[1], allow_abbrev=False)
    commands = parser.add_subparsers(dest='command', metavar='{' + ','.join(COMMANDS) + '}')
    for name, config_class in zip(COMMANDS, (TrainConfig, EvaluateConfig, PredictConfig,
                                             CurveConfig, QuantizeConfig)):
        sub = commands.add_parser(name, help=config_class.__doc__.splitlines()[0],
                                  description=config_class.__doc__, allow_abbrev=False)
        add_arguments(sub, config_class)
        sub.set_defaults(config_class=config_class, parser=sub)
    return parser


def parse_config(argv):
    """argv -> (command name, config); a bad value or a --model-dir that is not a model folder
    exits with status 2 and a one-line error, before any data is read."""
    from jobs.engine.config import as_flags, from_args, parse_command
    from jobs.squad.folder import model_folder
    from jobs.squad.config import check_config
    namespace = parse_command(build_parser(), argv)
    try:
        config = from_args(namespace.config_class, namespace)
        check_config(config)
        if namespace.command != 'curve':        # curve reads the run's own folders
            model_folder(config)
    except (ValueError, ImportError) as err:
        namespace.parser.error(as_flags(err, namespace.config_class))
    return namespace.command, config


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    import mxnet as mx
    mx.npx.set_np()
    command, config = parse_config(argv)
    from jobs.squad import curve, infer, quantize, train
    prepare, run = {'train': (train.prepare_train, train.run_train),
                    'evaluate': (infer.prepare_evaluate, infer.run_evaluate),
                    'predict': (infer.prepare_predict, infer.run_predict),
                    'curve': (curve.prepare_curve, curve.run_curve),
                    'quantize': (quantize.prepare_quantize, quantize.run_quantize)}[command]
    from jobs.engine.config import as_flags
    from jobs.engine.loop import exit_interrupted
    from jobs.engine.run_lock import release_run_locks
    try:
        try:            # what the command line names must exist before any work starts
            prepared = prepare(config)
        except (ValueError, OSError, ImportError) as err:   # a bad device, folder or data file
            print('run_squad.py: error: {}'.format(as_flags(err, type(config))),  # status 2, as
                  file=sys.stderr)                                          # the parser's
            raise SystemExit(2) from None
        return run(config, prepared)
    except KeyboardInterrupt as stop:       # Ctrl-C: one line, status 130
        return exit_interrupted('run_squad.py', stop, command == 'train')
    finally:
        release_run_locks()     # train's lock on its --output-dir


if __name__ == '__main__':
    from _threads import threads_before_mxnet   # scripts/_threads.py, before MXNet starts
    threads_before_mxnet()
    sys.exit(main())
