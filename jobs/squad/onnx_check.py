"""The SQuAD job's ONNX check: the exported QA model in ONNX Runtime, predictions against MXNet's.

:func:`check_onnx_squad` runs the ``.onnx`` file written by
:func:`gluon_attention.export.onnx.export_onnx` (inputs ``input_ids``, ``token_types``,
``valid_length``, ``p_mask``, outputs in :class:`~gluon_attention.QAInference` order) on the
evaluation features, decodes its answers exactly as the job decodes MXNet's, and lists every
question whose final answer differs. A difference is accepted only at a near-tie: the two
answers' scores (or the null score difference and its threshold) within ``tie_gap`` in both
models' scores, where float32 rounding between two runtimes may legitimately flip the choice.
:func:`check_onnx_export` is the job's step: the run's export converted, checked and reported in
``<output-dir>/export/onnx_check.json``.
"""
import math
import os
import time

import numpy as onp

from gluon_attention import checks
from gluon_attention.data import squad
from gluon_attention.export.onnx import max_abs_diff
from gluon_attention.pipelines.onnx import export_qa_onnx, run_onnx_squad

from ..engine.common import atomic_write_json

__all__ = ['check_onnx_squad', 'check_onnx_export']

def _logit_diff(mxnet_outputs, onnx_outputs):
    """Largest |difference| over the logit outputs (equal infinities counting 0) and the number
    of features whose top indices differ at an unmasked (finite) logit.

    Masked positions all hold -inf, and the two runtimes' top-k may order such ties differently:
    those indices are not counted, and end logits are compared only under equal start indices
    (under different starts they are different numbers)."""
    worst, index_mismatches = 0.0, 0
    for want, got in zip(mxnet_outputs, onnx_outputs):
        same = want[1] == got[1]                                     # (Ns,) start slots
        worst = max(worst, max_abs_diff(want[0], got[0]), max_abs_diff(want[4], got[4]),
                    max_abs_diff(want[2][same], got[2][same]))
        index_mismatches += _differ_unmasked(want[0], want[1], got[1]) or _differ_unmasked(
            want[2][same], want[3][same], got[3][same])
    return worst, index_mismatches


def _differ_unmasked(logits, want_index, got_index):
    """Whether two top-k index arrays differ where ``logits`` is finite."""
    return bool(((want_index != got_index) & onp.isfinite(logits)).any())


def _score(nbest, text):
    """The n-best score of ``text`` (-inf when it is not among the n best)."""
    return next((entry['score'] for entry in nbest if entry['text'] == text), -math.inf)


def _difference(qid, mxnet, onnx_run, threshold):
    """How the two final answers of ``qid`` differ and by how much (the larger gap of the two
    models' own scores)."""
    (m_pred, m_final, m_odds, m_nbest), (o_pred, o_final, o_odds, o_nbest) = (
        [d[qid] for d in mxnet], [d[qid] for d in onnx_run])
    entry = {'qas_id': qid, 'mxnet': m_final, 'onnx': o_final, 'kind': [], 'gap': 0.0}
    if (m_final == '') != (o_final == '') and (m_odds > threshold) != (o_odds > threshold):
        entry['kind'].append('null')
        entry['gap'] = max(abs(m_odds - threshold), abs(o_odds - threshold))
    if m_pred != o_pred and (m_final != '' or o_final != ''):
        entry['kind'].append('span')
        gap = max(_score(m_nbest, m_pred) - _score(m_nbest, o_pred),
                  _score(o_nbest, o_pred) - _score(o_nbest, m_pred))
        entry['gap'] = max(entry['gap'], gap)
    return entry


def check_onnx_squad(onnx_path, examples, features, mxnet_outputs, n_best_size=20,
                     max_answer_length=30, null_score_diff_threshold=0.0, batch_size=32,
                     tie_gap=1e-4, threads=None):
    """Run the ONNX QA model on evaluation features and report where its answers differ.

    Parameters
    ----------
    onnx_path : str
        The QA model's ``.onnx`` file (:func:`~gluon_attention.export.onnx.export_onnx` of the
        exported ``QAInference``).
    examples, features : list
        The evaluation examples and their features (``is_training=False``).
    mxnet_outputs : list of 5-tuples
        MXNet's outputs per feature, as the job's prediction step returns them.
    n_best_size, max_answer_length, null_score_diff_threshold
        The decoding options the job used for its own predictions.
    batch_size : int
        Features per ONNX Runtime call.
    tie_gap : float
        Largest score gap at which a differing answer is accepted as a near-tie.
    threads : int, optional
        ONNX Runtime intra-op threads (default: ``OMP_NUM_THREADS``, else 1).

    Returns
    -------
    dict
        ``status`` ('ok' when every difference is a near-tie, else 'MISMATCH'), ``total`` and
        ``identical`` (questions), ``differences`` (``qas_id``, the ``mxnet`` and ``onnx``
        answers, ``kind`` ['null' and/or 'span'], ``gap``), ``near_ties`` (how many differences
        are within ``tie_gap``), ``max_abs_diff`` (logit outputs; end logits under equal start
        indices), ``index_mismatches`` (features whose top-k indices differ at an unmasked
        position; masked positions tie at -inf), ``seconds`` (ONNX Runtime time),
        ``onnx_path``.
    """
    if len(mxnet_outputs) != len(features):
        checks.fail('expected one MXNet output per feature', num_features=len(features),
                     num_outputs=len(mxnet_outputs))
    started = time.time()
    onnx_outputs = run_onnx_squad(onnx_path, features, batch_size, threads)
    seconds = time.time() - started
    options = (n_best_size, max_answer_length, null_score_diff_threshold)
    mxnet = squad.decode_predictions(examples, features, mxnet_outputs, *options)
    onnx_run = squad.decode_predictions(examples, features, onnx_outputs, *options)
    differences = [_difference(qid, mxnet, onnx_run, null_score_diff_threshold)
                   for qid in mxnet[1] if mxnet[1][qid] != onnx_run[1][qid]]
    near = sum(d['gap'] < tie_gap for d in differences)
    worst, index_mismatches = _logit_diff(mxnet_outputs, onnx_outputs)
    return {'status': 'ok' if near == len(differences) else 'MISMATCH',
            'total': len(mxnet[1]), 'identical': len(mxnet[1]) - len(differences),
            'differences': differences, 'near_ties': near, 'max_abs_diff': worst,
            'index_mismatches': index_mismatches, 'seconds': round(seconds, 2),
            'onnx_path': str(onnx_path)}


def check_onnx_export(examples, features, outputs, config, threshold):
    """Convert ``<output-dir>/export/qa`` to ``export/qa.onnx``, answer the evaluation questions
    in ONNX Runtime (batches of ``--eval-batch-size`` features of similar lengths) and list the
    answers that differ from MXNet's ``outputs`` (:func:`check_onnx_squad`: accepted only at
    near-ties).

    ``config`` is a config of :mod:`~jobs.squad.config` (reads ``output_dir``,
    ``n_best_size``, ``max_answer_length``, ``eval_batch_size``, ``threads``); ``threshold`` the
    :class:`~gluon_attention.pipelines.NullThreshold` of the predictions. Writes
    ``export/onnx_check.json``,
    prints a one-line summary and returns the report.
    """
    started = time.time()
    path = export_qa_onnx(os.path.join(config.output_dir, 'export', 'qa'))
    report = check_onnx_squad(
        path, examples, features, outputs, n_best_size=config.n_best_size,
        max_answer_length=config.max_answer_length, null_score_diff_threshold=threshold.value,
        batch_size=config.eval_batch_size, threads=config.threads or None)
    report['total_seconds'] = round(time.time() - started, 1)
    atomic_write_json(os.path.join(config.output_dir, 'export', 'onnx_check.json'), report)
    print('ONNX check: {identical}/{total} predictions identical in ONNX Runtime ({near_ties} of '
          'the {0} others at near-ties); max |logit difference| {max_abs_diff:.2e}; '
          '{total_seconds} s -> {status}'.format(len(report['differences']), **report))
    return report
