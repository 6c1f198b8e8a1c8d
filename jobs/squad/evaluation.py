"""Inference, decoding and scoring for the SQuAD job: model outputs per feature -> predictions,
null odds, n-best lists, the official metrics, the null threshold on held-out questions, and the
files a run writes.

The evaluation questions travel with their features as one :class:`EvalSet`. :func:`evaluate`
and :func:`score_and_write` take the decoding options they read; :func:`infer`,
:func:`calibrate_threshold` and :func:`check_export` take a config of
:mod:`~jobs.squad.config` (any of the command configs: they read the shared
inference and decoding options only, unless said otherwise).
"""
import dataclasses
import functools
import math
import os

import mxnet as mx
from tqdm import tqdm

from gluon_attention.data import squad
from gluon_attention.export.block import export_and_check
from gluon_attention.models.qa import QAInference
from gluon_attention.pipelines import NullThreshold
from gluon_attention.pipelines.features import (INPUT_DTYPES, INPUT_NAMES, eval_features,
                                                run_batches)

from ..engine.common import atomic_write_json, parse_devices
from .scoring import choose_threshold, null_odds_auc, v2_metrics

__all__ = ['contexts_of', 'EvalSet', 'infer', 'eval_progress', 'evaluate',
           'v2_metrics', 'null_odds_auc', 'calibrate_threshold', 'choose_threshold',
           'score_and_write',
           'write_predictions', 'write_metrics', 'format_metrics', 'check_export', 'ONNX_EXTRA']

METRIC_KEYS = ('exact', 'f1', 'HasAns_f1', 'NoAns_f1', 'null_threshold', 'null_threshold_source',
               'best_f1', 'best_f1_thresh', 'full_range_best_f1', 'always_answer_HasAns_f1',
               'null_odds_auc', 'total')
ONNX_EXTRA = 'pip install gluon_attention[onnx]'


def contexts_of(config):
    """The devices of ``--ctx``; ValueError when one names a GPU this MXNet does not see."""
    return parse_devices(config.ctx)


@dataclasses.dataclass(frozen=True)
class EvalSet:
    """The evaluation questions and their features.

    Attributes
    ----------
    examples : list of SquadExample
        The questions, with their gold answers.
    features : list of SquadFeature
        Their chunks (``is_training=False``), in the order the model outputs follow.
    """
    examples: list[squad.SquadExample]
    features: list[squad.SquadFeature]

    @classmethod
    def from_examples(cls, examples, tokenizer, max_seq_length, max_query_length):
        """The features of ``examples`` (:func:`~gluon_attention.pipelines.features.eval_features`
        with these lengths, in tokens), said on stdout."""
        features = eval_features(examples, tokenizer, max_seq_length, max_query_length)
        print('eval: {} questions -> {} features'.format(len(examples), len(features)))
        return cls(examples, features)


def infer(model, features, config, ctx):
    """Run the inference graph of ``model`` on ``features`` (batches of similar lengths).

    Returns the hybridized :class:`~gluon_attention.models.qa.QAInference` block and one 5-tuple
    of NumPy outputs per feature (see ``QAInference``).
    """
    inference = QAInference(model, config.start_top_n, config.end_top_n)
    inference.hybridize(static_alloc=True)
    return inference, run_batches(inference, features, config.eval_batch_size, ctx,
                                  eval_progress(config.progress))


def eval_progress(enabled):
    """The progress bar of inference batches (``tqdm``) for ``run_batches``, or None."""
    return functools.partial(tqdm, desc='eval', unit='batch') if enabled else None


def evaluate(eval_set, outputs, threshold, n_best_size, max_answer_length,
             version_2_with_negative):
    """Decode spans and score them with the official SQuAD 2.0 or 1.1 definitions.

    Parameters
    ----------
    eval_set : EvalSet
    outputs : list of tuple of numpy.ndarray
        One 5-tuple per feature of ``eval_set`` (:func:`run_batches`).
    threshold : NullThreshold
        The null score difference threshold (value ``inf``: '' is never predicted).
    n_best_size, max_answer_length : int
        As :func:`~gluon_attention.data.squad.decode_predictions`.
    version_2_with_negative : bool or int
        Which metrics: the SQuAD 2.0 ones, or the SQuAD 1.1 keys only.

    Returns
    -------
    dict
        ``metrics``, ``final_predictions``, ``null_odds``, ``nbest``. With
        ``version_2_with_negative`` the metrics are the official SQuAD 2.0 keys,
        ``full_range_best_*`` and ``always_answer_HasAns_*`` (from the non-null spans) and
        ``null_odds_auc`` (no ``best_*`` keys, and a warning on stderr, when the null odds are
        constant or NaN: :func:`~gluon_attention.data.squad.degenerate_null_odds`); without,
        the official SQuAD 1.1 scores
        (:func:`~gluon_attention.data.squad.squad_v11_evaluate`) under the keys ``exact`` (the
        v1.1 script's ``exact_match``), ``f1`` and ``total``.
    """
    examples = eval_set.examples
    predictions, final, null_odds, nbest = squad.decode_predictions(
        examples, eval_set.features, outputs, n_best_size, max_answer_length, threshold.value)
    results = {'final_predictions': final, 'null_odds': null_odds, 'nbest': nbest}
    if not version_2_with_negative:
        metrics = squad.squad_v11_evaluate(examples, final)
        return dict(results, metrics={'exact': metrics['exact_match'], 'f1': metrics['f1'],
                                      'total': metrics['total']})
    return dict(results, metrics=v2_metrics(examples, predictions, final, null_odds))


def calibrate_threshold(model, examples, tokenizer, config, ctx):
    """Run ``model`` on the held-out ``examples`` and choose the threshold there.

    The null threshold is chosen without the evaluation answers, on the questions of whole
    training articles held out from training (``--threshold-titles``): the threshold of best F1
    there, placed midway between the score differences of the last question answered and the
    first left unanswered (:func:`~gluon_attention.data.squad.sweep_null_threshold`, rule
    ``'between'``: a threshold that reproduces that F1, unlike the official rule's).

    Returns ``(NullThreshold, dict)``: the threshold with its source, and ``heldout_f1``
    (percent, at that threshold), ``heldout_null_odds_auc``, ``heldout_total``. Without held-out
    questions the threshold is 0.0 (and the dict empty).
    """
    if not examples:
        return NullThreshold(0.0, 'default 0.0 (no --threshold-titles)'), {}
    features = eval_features(examples, tokenizer, config.eval_max_seq_length,
                             config.max_query_length)
    _, outputs = infer(model, features, config, ctx)
    spans, _, null_odds, _ = squad.decode_predictions(
        examples, features, outputs, config.n_best_size, config.max_answer_length, math.inf)
    return choose_threshold(examples, spans, null_odds)


def score_and_write(eval_set, outputs, threshold, output_dir, extra, *, n_best_size,
                    max_answer_length, version_2_with_negative):
    """:func:`evaluate`, then write the prediction files and ``metrics.json`` to ``output_dir``.

    ``threshold`` is a :class:`~gluon_attention.pipelines.NullThreshold` (decoded with
    its value, recorded with its source under SQuAD 2.0); ``extra`` (a dict) is added to the
    metrics. Returns what :func:`evaluate` returns.
    """
    results = evaluate(eval_set, outputs, threshold, n_best_size, max_answer_length,
                       version_2_with_negative)
    metrics = dict(results['metrics'], **extra)
    if version_2_with_negative:
        metrics.update(null_threshold=threshold.value, null_threshold_source=threshold.source)
    else:
        for key in ('null_threshold', 'null_threshold_source'):
            metrics.pop(key, None)
    write_predictions(output_dir, results)
    write_metrics(output_dir, metrics)
    print(format_metrics(metrics))
    return results


def write_predictions(folder, results):
    """``predictions.json``, ``null_odds.json`` and ``nbest_predictions.json`` (atomically; the
    folder is created)."""
    os.makedirs(folder, exist_ok=True)
    atomic_write_json(os.path.join(folder, 'predictions.json'), results['final_predictions'])
    atomic_write_json(os.path.join(folder, 'null_odds.json'), results['null_odds'])
    atomic_write_json(os.path.join(folder, 'nbest_predictions.json'), results['nbest'])


def write_metrics(folder, metrics):
    """``metrics.json`` (atomically)."""
    atomic_write_json(os.path.join(folder, 'metrics.json'), metrics)


def format_metrics(metrics):
    """The main metrics, one per line."""
    return '\n'.join('{:>26s}: {}'.format(k, metrics[k]) for k in METRIC_KEYS if k in metrics)


def check_export(inference, eval_set, outputs, config, final_predictions, threshold, ctx):
    """Export the inference graph to ``<output-dir>/export/qa``, reload it
    (:func:`~gluon_attention.export.block.export_and_check`) on every batch of
    ``eval_set`` and compare the decoded predictions; writes ``export/check.json`` and returns
    its content."""
    features = eval_set.features
    prefix = os.path.join(config.output_dir, 'export', 'qa')
    order = squad.length_sorted_batches(features, config.eval_batch_size)
    batches = [[arrays[k] for k in INPUT_NAMES] for arrays in (
        squad.batchify([features[i] for i in index], round_to=8) for index in order)]
    reloaded, report = export_and_check(inference, prefix, batches, INPUT_NAMES, INPUT_DTYPES,
                                        ctx)
    same = len(final_predictions)
    if report['max_abs_diff'] > 0:     # equal outputs decode to equal predictions
        outputs = run_batches(reloaded, features, config.eval_batch_size, ctx,
                              eval_progress(config.progress))
        _, final, _, _ = squad.decode_predictions(
            eval_set.examples, features, outputs, config.n_best_size, config.max_answer_length,
            threshold.value)
        same = sum(final[k] == final_predictions[k] for k in final_predictions)
    check = dict(report, identical=same, total=len(final_predictions),
                 status='ok' if same == len(final_predictions) else 'MISMATCH')
    atomic_write_json(os.path.join(config.output_dir, 'export', 'check.json'), check)
    return check
