"""``run_squad.py evaluate`` and ``predict``: load a saved model folder, answer questions.

``evaluate`` scores the questions of a SQuAD file with answers and writes the predictions and
``metrics.json`` to ``<output-dir>/evaluate/``; ``predict`` answers the questions of a
SQuAD-format file (answers not needed), writing its three prediction files to
``<output-dir>/predict/``, or one ``--question`` about one ``--context``. Neither ever replaces
the result files of the train run in ``<output-dir>`` (:func:`results_folder`). The sequence
lengths are those the folder was trained with (``qa_config.json``); the null threshold is the
saved one unless ``--null-score-diff-threshold`` gives a number. ``predict`` answers through
:class:`~gluon_attention.pipelines.predictor.QAPredictor`. ``prepare_*`` fails (ValueError,
OSError) before any work starts; ``run_*`` returns the exit status.
"""
import dataclasses
import json
import os
import time
from typing import Optional

import mxnet as mx

from gluon_attention import Kernels
from gluon_attention.checks import fail
from gluon_attention.data import squad
from gluon_attention.pipelines import (NullThreshold, QAFolder, QAPredictor, load_qa_folder,
                                       load_qa_model)

from ..engine.common import products_record
from .config import THRESHOLD_NAME
from .data import check_data_files, check_not_trained_on, data_path, load_eval_examples
from .evaluation import (EvalSet, contexts_of, eval_progress, infer, score_and_write,
                         write_predictions)
from .folder import model_folder
from .predict import describe_answer

__all__ = ['results_folder', 'EvaluateJob', 'prepare_evaluate', 'run_evaluate', 'PredictJob',
           'prepare_predict', 'run_predict']


@dataclasses.dataclass(frozen=True)
class EvaluateJob:
    """What :func:`prepare_evaluate` reads for :func:`run_evaluate`.

    Attributes
    ----------
    contexts : list of mx.Context
        The ``--ctx`` devices.
    folder : QAFolder
        The saved model folder, its ``qa_config.json`` read.
    eval_set : EvalSet
        The evaluation questions and their features, at the folder's sequence lengths.
    threshold : NullThreshold
        The null threshold to decode with (``--null-score-diff-threshold``, else the folder's).
    overlap : dict
        The ``train_eval_shared_*`` counts of
        :func:`~jobs.squad.data.check_not_trained_on`, added to the metrics.
    onnx_block : OnnxQABlock or None
        The ``--onnx-model`` file, loaded (None without it).
    kernels : Kernels
        The model's kernel choice (``--matmul-dtype``), checked on ``contexts``.
    """
    contexts: list[mx.Context]
    folder: QAFolder
    eval_set: EvalSet
    threshold: NullThreshold
    overlap: dict
    onnx_block: Optional['OnnxQABlock'] = None
    kernels: Kernels = Kernels()


@dataclasses.dataclass(frozen=True)
class PredictJob:
    """What :func:`prepare_predict` reads for :func:`run_predict`.

    Attributes
    ----------
    contexts : list of mx.Context
        The ``--ctx`` devices.
    folder : QAFolder
        The saved model folder, its ``qa_config.json`` read.
    examples : list of SquadExample or None
        The questions of ``--predict-file``; None for one ``--question``.
    onnx_block : OnnxQABlock or None
        The ``--onnx-model`` file, loaded (None without it).
    kernels : Kernels
        The model's kernel choice (``--matmul-dtype``), checked on ``contexts``.
    """
    contexts: list[mx.Context]
    folder: QAFolder
    examples: Optional[list[squad.SquadExample]]
    onnx_block: Optional['OnnxQABlock'] = None
    kernels: Kernels = Kernels()


def _onnx_block(config):
    """The ``--onnx-model`` file loaded in ONNX Runtime (None without it); ValueError, one line,
    for a file ONNX Runtime cannot load."""
    if not config.onnx_model:
        return None
    # pylint: disable-next=import-outside-toplevel
    from gluon_attention.pipelines.onnx import OnnxQABlock
    return OnnxQABlock(config.onnx_model, config.threads or None)


def inference_kernels(config, contexts):
    """The Kernels of ``--matmul-dtype``; ValueError (naming ``matmul_dtype``) where its products
    cannot run on ``contexts`` (:meth:`Kernels.resolve`), before any work."""
    kernels = Kernels(matmul_dtype=config.matmul_dtype)
    kernels.resolve(contexts)
    return kernels


def results_folder(config, command):
    """``<output-dir>/<command>``: where ``evaluate`` or ``predict`` writes (never the train run's
    own ``metrics.json`` and prediction files in ``<output-dir>``)."""
    return os.path.join(config.output_dir, command)


def answer_features(config, job):
    """One 5-tuple of NumPy outputs per feature of ``job.eval_set``: the model folder's MXNet
    graph, or the ``--onnx-model`` file in ONNX Runtime (batches of ``--eval-batch-size``
    features of similar lengths either way)."""
    features = job.eval_set.features
    if job.onnx_block is not None:
        # pylint: disable-next=import-outside-toplevel
        from gluon_attention.pipelines.onnx import run_onnx_squad
        return run_onnx_squad(job.onnx_block.session, features, config.eval_batch_size)
    model = load_qa_model(job.folder, job.contexts, job.kernels)
    return infer(model, features, config, job.contexts[0])[1]


def converted_from(folder):
    """The GluonNLP 0.10 model a folder was converted from (``gluonnlp_model`` of its
    ``config.json``, as :func:`gluon_attention.convert.from_gluonnlp` records it), else None."""
    path = os.path.join(folder, 'config.json')
    if not os.path.isfile(path):
        return None
    with open(path, encoding='utf-8') as handle:
        return json.load(handle).get('gluonnlp_model') or None


def prepare_evaluate(config):
    """Devices, the model folder's settings and tokenizer, evaluation questions and features."""
    check_data_files(config)
    contexts, folder = contexts_of(config), load_qa_folder(model_folder(config))
    kernels = inference_kernels(config, contexts)
    model_config = folder.qa_config
    threshold = config.null_threshold.resolve(model_config, config.version_2_with_negative,
                                              THRESHOLD_NAME)
    onnx_block = _onnx_block(config)
    examples = load_eval_examples(config)
    overlap = check_not_trained_on(model_config, examples, config.eval_file,
                                   converted_from(folder.path))
    eval_set = EvalSet.from_examples(examples, folder.tokenizer(),
                                     model_config['eval_max_seq_length'],
                                     model_config['max_query_length'])
    return EvaluateJob(contexts, folder, eval_set, threshold, overlap, onnx_block, kernels)


def run_evaluate(config, job):
    """Load the model folder (or the ``--onnx-model`` file), run it on the evaluation questions,
    score, write the outputs."""
    start = time.time()
    outputs = answer_features(config, job)
    extra = {'eval_seconds': round(time.time() - start, 1), 'model_dir': job.folder.path}
    extra.update(products_record(job.kernels.matmul_dtype))
    if config.onnx_model:
        extra['onnx_model'] = config.onnx_model
    folder = results_folder(config, 'evaluate')
    score_and_write(job.eval_set, outputs, job.threshold, folder, dict(job.overlap, **extra),
                    n_best_size=config.n_best_size, max_answer_length=config.max_answer_length,
                    version_2_with_negative=config.version_2_with_negative)
    print('metrics and predictions written to {}'.format(folder))
    return 0


def prepare_predict(config):
    """Devices, the model folder and its threshold, the questions of ``--predict-file``."""
    contexts, folder = contexts_of(config), load_qa_folder(model_folder(config))
    kernels = inference_kernels(config, contexts)
    model_config = folder.qa_config
    config.null_threshold.resolve(model_config, model_config['version_2_with_negative'],
                                  THRESHOLD_NAME)
    examples = None
    if config.predict_file:
        examples = squad.read_squad(data_path(config.predict_file, config.data_dir),
                                    require_answers=False)
        if not examples:
            fail('--predict-file must hold at least one question',
                 predict_file=config.predict_file)
    return PredictJob(contexts, folder, examples, _onnx_block(config), kernels)


def run_predict(config, job):
    """Answer the questions: write the three prediction files, or print the one answer (a
    line, or with ``--json`` every field of the answer as a JSON object)."""
    predictor = QAPredictor.from_folder(
        job.folder, ctx=job.contexts[0], threshold=config.null_threshold,
        batch_size=config.eval_batch_size, max_answer_length=config.max_answer_length,
        start_top_n=config.start_top_n, end_top_n=config.end_top_n, kernels=job.kernels)
    if job.onnx_block is not None:    # the folder still gives the tokenizer, lengths, threshold
        predictor.block = job.onnx_block
    threshold = predictor.threshold
    if not config.predict_file:
        answer = predictor.answer(config.question, config.context)
        print(json.dumps(answer.to_dict(), sort_keys=True) if config.json
              else describe_answer(answer))
        return 0
    results = predictor.predict_examples(job.examples, config.n_best_size,
                                         eval_progress(config.progress))
    final = results['final_predictions']
    folder = results_folder(config, 'predict')
    write_predictions(folder, results)
    record = products_record(job.kernels.matmul_dtype)
    print('{} answers ({} with no answer) written to {} (threshold {:.4g}: {}; matmul dtype {}, '
          'AMX {})'.format(len(final), sum(not text for text in final.values()), folder,
                          threshold.value, threshold.source, record['matmul_dtype'],
                          'on' if record['amx'] else 'off'))
    return 0
