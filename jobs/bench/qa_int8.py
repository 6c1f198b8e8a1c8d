"""The ``bert_models_qa_int8`` rows of ``scripts/benchmark.py``: our INT8 against GluonNLP 0.10's
INT8 on the same fine-tuned model, answering the evaluation questions (speed, answers kept, F1).

The model is a fine-tuned folder as ``run_squad.py train`` saves it (``make demo``:
``runs/squad/model``): its encoder, written as a 0.10 ``BERTModel`` ``.params`` file by
:func:`gluon_attention.convert.to_gluonnlp` (:func:`jobs.bench.gluonnlp010.folder_to_010`), and
its conditional QA head. The work is that of the ``qa_inference`` rows
(:func:`jobs.bench.qa.eval_set`: the 626 questions of ``haystack-small``, batches of 32
features, each padded to its own longest feature), every batch run by every row in turn
(:func:`jobs.bench.qa._interleaved`). Rows:

* ``ours_exported``: our exported float32 graph (:func:`jobs.bench.qa.ours_runner`), the
  reference of ``answers_kept``;
* ``ours_int8``: its ONNX file optimized and quantized as ``run_squad.py quantize`` does (per
  output channel, the head too), in ONNX Runtime;
* ``gluonnlp_0.10_int8``: the 0.10 ``BERTModel`` quantized by ``quantize_net_v2`` with
  oneDNN's ``MKLDNN_QUANTIZE`` pass as 0.10's own SQuAD script does
  (:func:`jobs.bench.gluonnlp010.quantize_010`: every layer it can, weights per output
  channel, 0.10's calibration collector with its clipping), calibrated on
  ``calibration_features`` features of the training file (0.10's default: 10 batches of 24)
  padded to one length, in batches of :data:`CALIBRATION_BATCH`; its sequence output then
  read by the folder's head in float32 (0.10 has no conditional head: the span classifier of
  its SQuAD model is a plain start/end head);
* ``gluonnlp_0.10_onednn`` (``with_float32_010``): the 0.10 model fused by oneDNN, under the
  same float32 head (a check of the conversion: its answers are ours).

When 0.10's quantization fails, its row is left out with a line quoting the error. Rows as
:func:`jobs.bench.bert_models.rows_of` (``questions/s``, ``answers_kept`` against
``ours_exported``, ``f1`` the official SQuAD F1). Glossary: B batch, T sequence length,
D hidden size.
"""
import os
import statistics
import tempfile
import time

import mxnet as mx

from gluon_attention.data import squad
from gluon_attention.pipelines import load_qa_model
from gluon_attention.pipelines.features import eval_features
from gluon_attention.models.qa import decode_heads

from . import qa
from .bert_models import INT8, REFERENCE, rows_of
from .gluonnlp010 import (CLIP_010, folder_to_010, fuse_010, legacy, load_010, nd_inputs,
                          quantize_010, quantized_counts, threshold_coverage,
                          threshold_names)

__all__ = ['CONFIG', 'CALIBRATION_FILE', 'CALIBRATION_BATCH', 'calibration_inputs', 'runner_010',
           'qa_int8_rows']

CONFIG = 'bert_models_qa_int8'
CALIBRATION_FILE = 'cs224n-16articles'      # the SQuAD job's default training file
CALIBRATION_BATCH = 24                      # 0.10's finetune_squad.py: --test_batch_size
_NAMES = ('input_ids', 'token_types', 'valid_length')


def calibration_inputs(tokenizer, count, max_seq_length, max_query_length, data_dir=None,
                       train_file=CALIBRATION_FILE):
    """(ids, token types, valid lengths) NumPy arrays (N, T), (N, T), (N,) of the first
    ``count`` features of ``train_file``'s first questions, padded to their longest
    (``tokenizer``: the folder's; the lengths as the evaluation's)."""
    examples = squad.read_squad(squad.default_data_path(train_file, data_dir))[:count]
    features = eval_features(examples, tokenizer, max_seq_length, max_query_length)[:count]
    arrays = squad.batchify(features, round_to=8)
    return tuple(arrays[name] for name in _NAMES)


def runner_010(net, model, top_n=qa.TOP_N):
    """A callable ``run(batch) -> (seconds, outputs)`` of the 0.10 block ``net`` (ids, token
    types, valid lengths -> (B, T, D)) under the QA head of ``model`` (float32, imperative),
    giving the five outputs of :class:`~gluon_attention.models.qa.QAInference`."""
    def run(batch):
        start = time.perf_counter()
        with legacy():
            hidden = net(*nd_inputs([batch[name] for name in _NAMES]))
        outputs = decode_heads(model, hidden.as_np_ndarray(), mx.np.array(batch['p_mask']),
                               top_n, top_n)
        return time.perf_counter() - start, [o.asnumpy() for o in outputs]
    return run


def _runners_010(folder, model_dir, model, calibration, batches, with_float32):
    """{row: run(batch)} of the 0.10 rows and the lines saying which are left out."""
    loaded = folder_to_010(model_dir, os.path.join(folder, 'net.params'))
    made = {}
    if with_float32:
        net = fuse_010(load_010(*loaded), nd_inputs([batches[0][n] for n in _NAMES]),
                       static_shape=False)
        made[REFERENCE] = runner_010(net, model)
    try:
        quantized, thresholds = quantize_010(load_010(*loaded), calibration,
                                             min(CALIBRATION_BATCH, len(calibration[0])),
                                             static_shape=False)
    except mx.base.MXNetError as err:
        lines = [line for line in str(err).splitlines() if line.strip()]
        return made, ['{}: no {} row: quantize_net_v2 failed: {}'.format(
            CONFIG, INT8, lines[-1] if lines else err)]
    made[INT8] = runner_010(quantized, model)
    return made, [_quantized_line(quantized, thresholds)]


def _quantized_line(quantized, thresholds):
    """The printed line saying what 0.10's INT8 graph ``quantized`` runs in INT8 and which of
    its nodes had a calibration threshold in ``thresholds`` (how many of them clipped)."""
    counts = quantized_counts(quantized)
    covered, total, missing = threshold_coverage(quantized, thresholds)
    used = [thresholds[name] for name in threshold_names(quantized) if name in thresholds]
    clipped = sum(low == CLIP_010[0] or high == CLIP_010[1] for low, high in used)
    return ('{}: {} runs {} of {} dense layers and {} of {} self-attention products in INT8; '
            'calibration thresholds for {} of its {} INT8 nodes ({} clipped){}'.format(
                CONFIG, INT8, *counts['dense'], *counts['attention'], covered, total, clipped,
                ', none for ' + ', '.join(missing) if missing else ''))


def _ours(folder, model_dir, model, batches, threads):
    """{row: run(batch)} of our rows and the lines saying which are left out."""
    prefix = os.path.join(folder, 'qa')
    _, paths = qa.export_qa(model, prefix, batches[-1])
    made = {'ours_exported': qa.ours_runner(prefix)}
    # pylint: disable-next=protected-access
    files, skipped = qa._onnx_files(folder, paths['onnx'], None, None, model_dir, None)
    if 'ours_int8' in files:
        made['ours_int8'] = qa.onnx_runner(files['ours_int8'], threads)
    return made, [line.replace('qa_inference:', CONFIG + ':') for line in skipped]


def qa_int8_rows(model_dir, threads, rounds=1, warmup=1, max_questions=0, batch_size=32,
                 data_dir=None, calibration_features=240, with_float32_010=False):
    """Rows of the ``bert_models_qa_int8`` configuration (see the module docstring).

    ``model_dir``: a fine-tuned model folder ('' or None, or a folder without a QA head: no
    rows, a line saying why); ``threads``: ONNX Runtime's intra-op threads; ``max_questions``
    0 takes all the questions; ``data_dir`` as :func:`jobs.bench.qa.eval_set`. Prints a line
    naming the model, and one per row left out. ValueError for a folder trained on the
    questions' articles.
    """
    tuned = qa.fine_tuned_folder(model_dir) if model_dir else None
    if tuned is None:
        print('{}: no rows: they need a fine-tuned model folder (make demo writes '
              'runs/squad/model; benchmark.py --qa-model-dir). Received: {!r}'.format(
                  CONFIG, model_dir), flush=True)
        return []
    config = tuned.qa_config
    lengths = config['eval_max_seq_length'], config['max_query_length']
    found = qa.eval_set(max_questions, batch_size, *lengths, model_dir, data_dir)
    threshold = qa.fine_tuned_threshold(tuned, found['examples'])
    calibration = calibration_inputs(squad.load_tokenizer(model_dir), calibration_features,
                                     *lengths, data_dir)
    model = load_qa_model(tuned, [mx.cpu()])
    print('{}: the fine-tuned model {}: F1 on {} questions, 0.10 INT8 calibrated on {} '
          'features of {}'.format(CONFIG, model_dir, len(found['examples']),
                                  len(calibration[0]), CALIBRATION_FILE), flush=True)
    with tempfile.TemporaryDirectory(prefix='ga-bench-qa-int8') as folder:
        made, skipped = _ours(folder, model_dir, model, found['batches'], threads)
        theirs, more = _runners_010(folder, model_dir, model, calibration, found['batches'],
                                    with_float32_010)
        made.update(theirs)
        for line in skipped + more:
            print(line, flush=True)
        runners = {name: (lambda i, run=run: run(found['batches'][i]))
                   for name, run in made.items()}
        # pylint: disable-next=protected-access
        totals, outputs = qa._interleaved(runners, len(found['batches']), rounds, warmup)
    medians = {name: statistics.median(t) for name, t in totals.items()}
    longest = max(b['input_ids'].shape[1] for b in found['batches'])
    # pylint: disable-next=protected-access
    quality = qa._quality(found, outputs, threshold, True)
    return rows_of(CONFIG, model_dir, (batch_size, longest), 'infer', medians,
                   len(found['examples']), 'questions/s', quality)
