"""``run_squad.py evaluate`` and ``predict``: load a saved model folder, answer questions.

``evaluate`` scores the questions of a SQuAD file with answers and writes the predictions and
``metrics.json`` to ``<output-dir>/evaluate/``; ``predict`` answers the questions of a
SQuAD-format file (answers not needed), writing its three prediction files to
``<output-dir>/predict/``, or one ``--question`` about one ``--context``. Neither ever replaces
the result files of the train run in ``<output-dir>`` (:func:`results_folder`). The sequence
lengths are those the folder was trained with (``qa_config.json``); the null threshold is the
saved one unless ``--null-score-diff-threshold`` gives a number. ``prepare_*`` fails
(ValueError, OSError) before any work starts; ``run_*`` returns the exit status.
"""
import dataclasses
import os
import time

from ..._checks import fail
from ...data import squad
from ...models.encoder import BertEncoder
from .data import data_path, eval_features
from .evaluation import (contexts_of, decode, eval_job, infer, null_threshold, score_and_write,
                         write_predictions)
from .folder import load_qa_model, model_folder, read_qa_config
from .predict import best_answer, describe_answer, pair_example

__all__ = ['results_folder', 'load_model', 'prepare_evaluate', 'run_evaluate', 'prepare_predict', 'run_predict']


def results_folder(config, command):
    """``<output-dir>/<command>``: where ``evaluate`` or ``predict`` writes (never the train run's
    own ``metrics.json`` and prediction files in ``<output-dir>``)."""
    return os.path.join(config.output_dir, command)


def load_model(folder, contexts):
    """The QA model saved in ``folder`` (encoder, head), on ``contexts``."""
    return load_qa_model(folder, BertEncoder.from_pretrained(folder, ctx=contexts), contexts)[0]


def prepare_evaluate(config):
    """Devices, the model folder's settings and tokenizer, evaluation questions and features."""
    contexts, folder = contexts_of(config), model_folder(config)
    model_config = read_qa_config(folder)
    threshold = null_threshold(config, model_config, config.version_2_with_negative)
    tokenizer = squad.load_tokenizer(folder)
    job = eval_job(config, tokenizer, model_config['eval_max_seq_length'],
                   model_config['max_query_length'])
    job.update(contexts=contexts, folder=folder, threshold=threshold)
    return job


def run_evaluate(config, job):
    """Load the model folder, run it on the evaluation questions, score, write the outputs."""
    model = load_model(job['folder'], job['contexts'])
    start = time.time()
    outputs = infer(model, job['eval_features'], config, job['contexts'][0])[1]
    config = dataclasses.replace(config, output_dir=results_folder(config, 'evaluate'))
    score_and_write(config, job, outputs, job['threshold'],
                    {'eval_seconds': round(time.time() - start, 1), 'model_dir': job['folder']})
    print('metrics and predictions written to {}'.format(config.output_dir))
    return 0


def prepare_predict(config):
    """Devices, the model folder's settings and tokenizer, the questions and their features."""
    contexts, folder = contexts_of(config), model_folder(config)
    model_config = read_qa_config(folder)
    threshold = null_threshold(config, model_config, model_config['version_2_with_negative'])
    if config.predict_file:
        examples = squad.read_squad(data_path(config.predict_file), require_answers=False)
    else:
        examples = [pair_example(config.question, config.context)]
    if not examples:
        fail('--predict-file must hold at least one question', predict_file=config.predict_file)
    features = eval_features(examples, squad.load_tokenizer(folder),
                             model_config['eval_max_seq_length'], model_config['max_query_length'])
    return {'contexts': contexts, 'folder': folder, 'threshold': threshold,
            'examples': examples, 'eval_features': features}


def run_predict(config, job):
    """Answer the questions: write the three prediction files, or print the one answer."""
    model = load_model(job['folder'], job['contexts'])
    features = job['eval_features']
    outputs = infer(model, features, config, job['contexts'][0])[1]
    threshold = job['threshold'][0]
    _, final, null_odds, nbest = decode(job['examples'], features, outputs, config, threshold)
    if config.predict_file:
        folder = results_folder(config, 'predict')
        write_predictions(folder, {'final_predictions': final, 'null_odds': null_odds,
                                   'nbest': nbest})
        print('{} answers ({} with no answer) written to {} (threshold {:.4g}: {})'.format(
            len(final), sum(not text for text in final.values()), folder,
            threshold, job['threshold'][1]))
        return 0
    span = best_answer(features, outputs, config.max_answer_length)
    print(describe_answer(config.context, span, null_odds['question'], threshold))
    return 0
