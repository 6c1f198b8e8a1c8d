"""``run_squad.py train``: fine-tune the encoder with the QA heads, choose the null threshold on
the held-out articles, save ``<output-dir>/model``, evaluate, export and check the reload.

:func:`prepare_train` checks what the command line names and reads the data (ValueError,
OSError or ImportError before any work starts, which the script reports as a one-line error);
:func:`run_train` does the work and returns the exit status.
"""
import dataclasses
import os
import time

import mxnet as mx

from gluon_attention.core import fused
from gluon_attention.core.matmul import require_matmul_dtype, set_matmul_dtype
from gluon_attention.data import squad
from gluon_attention.data.squad_layout import pair_layout
from gluon_attention.pipelines.folder import recorded_training

from ..engine.config import write_run_config
from ..engine.run_lock import hold_run_lock
from ..engine.train_log import TRAIN_LOG
from .config import NEVER_NULL, THRESHOLD_NAME, NullThreshold
from .data import (check_data_files, check_model_fits, check_no_shared_data, eval_stride,
                   heldout_examples, load_eval_examples, load_training_features,
                   note_evaluated_threshold_articles, paragraph_keys, training_examples)
from .evaluation import (ONNX_EXTRA, EvalSet, calibrate_threshold, check_export, contexts_of,
                         infer, score_and_write)
from .folder import model_folder, save_model_folder
from .loop import check_resumable, train
from .model import build_model

__all__ = ['TrainJob', 'prepare_train', 'run_train']


@dataclasses.dataclass(frozen=True)
class TrainJob:
    """What :func:`prepare_train` reads for :func:`run_train`.

    Attributes
    ----------
    contexts : list of mx.Context
        The ``--ctx`` devices.
    model_dir : str
        The pretrained encoder folder (its tokenizer files are copied into the saved folder).
    tokenizer : tokenizers.Tokenizer
        The folder's tokenizer.
    train_features : list of SquadFeature
        The training features (``is_training=True``).
    heldout_examples : list of SquadExample
        The questions of the ``--threshold-titles`` articles (empty without SQuAD 2.0).
    eval_set : EvalSet
        The evaluation questions and their features.
    overlap : dict
        The ``train_eval_shared_*`` counts of
        :func:`~jobs.squad.data.check_no_shared_data`, added to the metrics.
    trained_titles : list of str
        The training articles, with those the starting folder records, sorted.
    trained_paragraphs : list of str
        The training paragraphs (:func:`~jobs.squad.data.paragraph_keys`),
        with those the starting folder records, sorted.
    """
    contexts: list[mx.Context]
    model_dir: str
    tokenizer: 'tokenizers.Tokenizer'
    train_features: list[squad.SquadFeature]
    heldout_examples: list[squad.SquadExample]
    eval_set: EvalSet
    overlap: dict
    trained_titles: list[str]
    trained_paragraphs: list[str]


def prepare_train(config):
    """Devices, tokenizer, training features, held-out and evaluation questions; then
    ``run_config.json`` is written. Training and evaluation questions are read first and
    refused when they share an article or a paragraph
    (:func:`~jobs.squad.data.check_no_shared_data`; the articles the starting
    folder records count as training), before any feature is built. A folder another run
    holds is refused (:func:`~jobs.engine.run_lock.hold_run_lock`)."""
    contexts, folder = contexts_of(config), model_folder(config)
    print(require_matmul_dtype(config.matmul_dtype, contexts, fused.cpu_features()))
    check_model_fits(folder, {'max_seq_length': config.max_seq_length,
                             'eval_max_seq_length': config.eval_max_seq_length,
                             'freeze_layers': config.freeze_layers})
    check_data_files(config)
    hold_run_lock(config.output_dir)    # one run per folder, until this process ends
    check_resumable(config)
    train_examples, eval_examples = training_examples(config), load_eval_examples(config)
    inherited = recorded_training(folder)
    heldout = heldout_examples(config) if config.version_2_with_negative else []
    overlap = check_no_shared_data(train_examples, eval_examples,
                                   inherited['trained_titles'] or [], heldout)
    note_evaluated_threshold_articles(heldout, eval_examples)
    tokenizer = squad.load_tokenizer(folder)
    features, train_examples = load_training_features(config, tokenizer, train_examples)
    job = TrainJob(
        contexts=contexts, model_dir=folder, tokenizer=tokenizer, train_features=features,
        heldout_examples=heldout,
        eval_set=EvalSet.from_examples(eval_examples, tokenizer, config.eval_max_seq_length,
                                       config.max_query_length),
        overlap=overlap,
        trained_titles=sorted({e.title for e in train_examples}
                              | set(inherited['trained_titles'] or [])),
        trained_paragraphs=sorted(set(paragraph_keys(train_examples))
                                  | set(inherited['trained_paragraphs'] or [])))
    write_run_config(config.output_dir, config)
    return job


def _qa_config(model, config, calibration, job):
    return dict(calibration, trained_titles=job.trained_titles,
                trained_paragraphs=job.trained_paragraphs, head_units=model.backbone.config['units'],
                head_dropout=config.classifier_dropout, max_seq_length=config.max_seq_length,
                doc_stride=config.doc_stride, eval_max_seq_length=config.eval_max_seq_length,
                eval_doc_stride=eval_stride(config.eval_max_seq_length, config.max_query_length,
                                            pair_layout(job.tokenizer).num_special),
                max_query_length=config.max_query_length,
                version_2_with_negative=config.version_2_with_negative,
                p_mask='1 = may be an answer start or end ([CLS] and context tokens)')


def run_train(config, job):
    """Train (or resume), choose the null threshold, save ``<output-dir>/model``, evaluate,
    write the outputs, export and check the reload (and, with ``--onnx``, ONNX Runtime)."""
    contexts = job.contexts
    model = build_model(config.model_dir, config, contexts, config.matmul_dtype)
    result = train(model, job.train_features, config, contexts)
    if not result.is_chief:         # rank 0 of a distributed job evaluates and writes
        return 0
    set_matmul_dtype(model, 'float32')  # the threshold, evaluation and export: float32
    steps, train_seconds = result.steps, result.seconds
    saved, heldout = NullThreshold(None, NEVER_NULL), {}
    if config.version_2_with_negative:
        saved, heldout = calibrate_threshold(model, job.heldout_examples, job.tokenizer, config,
                                             contexts[0])
    calibration = dict(saved.record(), **heldout)
    save_model_folder(model, os.path.join(config.output_dir, 'model'), job.model_dir,
                      _qa_config(model, config, calibration, job))
    start = time.time()
    inference, outputs = infer(model, job.eval_set.features, config, contexts[0])
    threshold = config.null_threshold.resolve(saved, config.version_2_with_negative,
                                              THRESHOLD_NAME)
    extra = dict(calibration, **job.overlap, train_steps=steps,
                 train_seconds=round(train_seconds, 1), eval_seconds=round(time.time() - start, 1),
                 train_features_per_second=round(steps * result.features_per_step
                                                 / max(train_seconds, 1e-9), 2))
    results = score_and_write(job.eval_set, outputs, threshold, config.output_dir, extra,
                              n_best_size=config.n_best_size,
                              max_answer_length=config.max_answer_length,
                              version_2_with_negative=config.version_2_with_negative)
    status = 0 if config.skip_export else _check_exports(inference, job, outputs, config,
                                                         results, threshold)
    _say_where(config)
    return status


def _check_exports(inference, job, outputs, config, results, threshold):
    """Export, reload and compare (and with ``--onnx`` ONNX Runtime); the exit status."""
    check = check_export(inference, job.eval_set, outputs, config, results['final_predictions'],
                         threshold, job.contexts[0])
    print('export check: {identical}/{total} predictions identical after reload; max |output '
          'difference| {max_abs_diff:.2e} -> {status}'.format(**check))
    onnx_check = (_check_onnx(job.eval_set, outputs, config, threshold) if config.onnx
                  else None)
    failed = check['status'] != 'ok' or (onnx_check and onnx_check['status'] != 'ok')
    return 1 if failed else 0


def _say_where(config):
    """The last line of a train run: where its outputs went."""
    out = config.output_dir
    print('model folder: {}; metrics: {} (predictions.json, null_odds.json, '
          'nbest_predictions.json beside it); training log: {}{}'.format(
              os.path.join(out, 'model'), os.path.join(out, 'metrics.json'),
              os.path.join(out, TRAIN_LOG),
              '' if config.skip_export else '; export: {}'.format(
                  os.path.join(out, 'export', ''))))


def _check_onnx(eval_set, outputs, config, threshold):
    """:func:`~.onnx_check.check_onnx_export`, or None (said on stdout) without the ``[onnx]``
    extra (onnx 1.17, onnxruntime)."""
    try:
        import onnxruntime  # noqa: F401 pylint: disable=import-outside-toplevel,unused-import
        from .onnx_check import check_onnx_export  # pylint: disable=import-outside-toplevel
    except ImportError as error:
        print('ONNX check skipped ({}): {}'.format(error, ONNX_EXTRA))
        return None
    return check_onnx_export(eval_set.examples, eval_set.features, outputs, config, threshold)
