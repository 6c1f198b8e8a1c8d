"""The ``qa_inference`` benchmark row: the exported QA model answering the evaluation questions.

The work is that of the SQuAD job's evaluation (``run_squad.py``'s defaults): the questions of
``haystack-small`` in features of at most 384 tokens (query cut to 32, stride 128), sorted by
length and cut into batches of 32 features, each padded to its own longest feature rounded up
to 8 tokens (:func:`eval_batches`). Every implementation gets the same batches:

* ``ours_exported``: the graph written by
  :func:`~gluon_attention.tasks.export.block.export_block`, loaded with ``SymbolBlock.imports``
  (:func:`~gluon_attention.tasks.export.block.import_block`), as a user of the export runs it
  (:func:`ours_runner`);
* ``onnxruntime``: ``qa.onnx`` from :func:`~gluon_attention.tasks.squad.onnx_check.export_qa_onnx`
  (:func:`onnx_runner`);
* ``torch_transformers``: PyTorch + transformers ``BertModel`` in eval mode under
  ``torch.inference_mode`` with the same encoder weights and the same conditional head
  (``scripts/bench_qa_torch_peer.py``, in the peer interpreter; it reads :func:`save_batches`).

The model is the pretrained encoder with randomly initialised heads (weights do not change the
speed; :func:`export_random_qa`). :func:`qa_inference_rows` times them (rows as in
:mod:`~gluon_attention.tasks.bench.models`). Glossary: B batch, T padded sequence length.
"""
import json
import os
import statistics
import subprocess
import tempfile
import time

import mxnet as mx
import numpy as onp

from ..._resources import default_model_dir
from ...data import squad
from ...models.encoder import BertEncoder
from ...models.qa import ModelForQAConditional, QAInference
from ..export.block import export_block, import_block
from ..squad.data import INPUT_DTYPES, INPUT_NAMES, eval_features
from .models import TORCH, rows_from_medians

__all__ = ['EVAL_FILE', 'eval_batches', 'export_random_qa', 'head_weights', 'save_batches',
           'ours_runner', 'onnx_runner', 'qa_inference_rows']

EVAL_FILE = 'haystack-small'
TOP_N = 5          # start_top_n = end_top_n = 5, the job's defaults


def eval_batches(max_questions=0, batch_size=32, max_seq_length=384, max_query_length=32,
                 model_dir=None, data_dir=None):
    """The evaluation batches of the SQuAD job's default evaluation.

    Parameters
    ----------
    max_questions : int
        Keep the first N questions of the file (0: all 626).
    batch_size, max_seq_length, max_query_length : int
        The job's ``--eval-batch-size``, ``--eval-max-seq-length``, ``--max-query-length``.
    model_dir : str, optional
        Folder holding the tokenizer (default: the embedded pretrained encoder).
    data_dir : str, optional
        The data folder holding ``haystack-small`` (default: ``GA_DATA_DIR``, else
        ``../shared/data`` from the repository root).

    Returns
    -------
    (int, list of dict)
        The number of questions, and the batches in increasing length: dicts of NumPy arrays
        ``input_ids``, ``token_types`` int32 (B, T), ``valid_length`` int32 (B,), ``p_mask``
        float32 (B, T) (the other keys of ``squad.batchify`` dropped).
    """
    examples = squad.read_squad(squad.default_data_path(EVAL_FILE, data_dir))
    examples = examples[:max_questions] if max_questions else examples
    tokenizer = squad.load_tokenizer(model_dir or default_model_dir())
    features = eval_features(examples, tokenizer, max_seq_length, max_query_length)
    batches = []
    for index in squad.length_sorted_batches(features, batch_size):
        arrays = squad.batchify([features[i] for i in index], round_to=8)
        batches.append({k: arrays[k] for k in INPUT_NAMES})
    return len(examples), batches


def _random_qa_model(model_dir, seed):
    """The pretrained encoder (no dropout) and the conditional head, initialised N(0, 0.02)."""
    mx.random.seed(seed)
    encoder = BertEncoder.from_pretrained(model_dir, dropout=0.0, attention_dropout=0.0)
    model = ModelForQAConditional(encoder, units=encoder.config['units'], dropout=0.0)
    for head in (model.start_scores, model.end_scores, model.answerable_scores):
        head.initialize(mx.init.Normal(0.02))
    return model


def export_random_qa(prefix, batch, model_dir=None, seed=0, onnx=True):
    """Export the QA inference graph of the pretrained encoder with random heads.

    Parameters
    ----------
    prefix : str
        Written: ``<prefix>-symbol.json``, ``<prefix>-0000.params``, ``<prefix>-inputs.json``
        and, with ``onnx`` and the ``[onnx]`` extra, ``<prefix>.onnx``.
    batch : dict of NumPy arrays
        One batch of :func:`eval_batches` (builds the graph).
    model_dir : str, optional
        The encoder's folder (default: the embedded pretrained encoder).

    Returns
    -------
    (QAInference, dict)
        The hybridized unexported block and the written paths (``onnx`` None when skipped).
    """
    model = _random_qa_model(model_dir or default_model_dir(), seed)
    inference = QAInference(model, TOP_N, TOP_N)
    inference.hybridize(static_alloc=True)
    inference(*_mx_inputs(batch))
    paths = export_block(inference, prefix, INPUT_NAMES, INPUT_DTYPES)
    paths['onnx'] = None
    if onnx:
        try:
            from ..squad.onnx_check import export_qa_onnx  # pylint: disable=import-outside-toplevel
        except ImportError:
            return inference, paths
        paths['onnx'] = export_qa_onnx(prefix)
    return inference, paths


def head_weights(inference):
    """The head's parameters as NumPy arrays, for the torch peer: ``start.weight`` (1, C),
    ``end.0.weight`` (U, 2C), ``end.2.gamma`` (U,), ``end.3.weight`` (1, U),
    ``answerable.0.weight`` (U, 2C), ``answerable.3.weight`` (2, U) and their biases / beta
    (index = position in the ``nn.HybridSequential``; C hidden size, U head units)."""
    model = inference.model
    blocks = {'start': model.start_scores, 'end.0': model.end_scores[0],
              'end.2': model.end_scores[2], 'end.3': model.end_scores[3],
              'answerable.0': model.answerable_scores[0],
              'answerable.3': model.answerable_scores[3]}
    return {'{}.{}'.format(label, name): getattr(block, name).data().asnumpy()
            for label, block in blocks.items()
            for name in (('gamma', 'beta') if label == 'end.2' else ('weight', 'bias'))}


def save_batches(path, batches, extra=None):
    """``batch<i>/<input name>`` arrays (and ``extra`` arrays by name) in one ``.npz``."""
    arrays = {'batch%d/%s' % (i, k): v for i, b in enumerate(batches) for k, v in b.items()}
    arrays.update(extra or {})
    with open(path, 'wb') as handle:
        onp.savez(handle, **arrays)
    return path


def _mx_inputs(batch, ctx=None):
    return [mx.np.array(batch[k], dtype=batch[k].dtype, ctx=ctx or mx.cpu())
            for k in INPUT_NAMES]


def ours_runner(prefix, static_alloc=True, static_shape=False, backend=None):
    """A callable ``run(batch) -> (seconds, outputs)`` of the exported graph at ``prefix``.

    ``SymbolBlock.imports`` (:func:`import_block`), then ``hybridize(static_alloc,
    static_shape)``; ``backend`` (e.g. ``'ONEDNN'``) partitions the graph with
    ``optimize_for`` on the first batch. The seconds include building the inputs and waiting
    for every output, as a caller reading the answers would.
    """
    block, _ = import_block(prefix)
    block.hybridize(static_alloc=static_alloc, static_shape=static_shape)
    state = {'optimized': backend is None}

    def run(batch):
        start = time.perf_counter()
        inputs = _mx_inputs(batch)
        if not state['optimized']:
            block.optimize_for(*inputs, backend=backend, static_alloc=static_alloc,
                               static_shape=static_shape)
            state['optimized'] = True
        outputs = [o.asnumpy() for o in block(*inputs)]
        return time.perf_counter() - start, outputs
    return run


def onnx_runner(onnx_path, threads=None):
    """A callable ``run(batch) -> (seconds, outputs)`` of ``qa.onnx`` in ONNX Runtime."""
    from ..export.onnx import onnx_session  # pylint: disable=import-outside-toplevel
    session = onnx_session(onnx_path, threads or int(os.environ.get('OMP_NUM_THREADS', 1)))

    def run(batch):
        start = time.perf_counter()
        outputs = session.run(None, dict(batch))
        return time.perf_counter() - start, outputs
    return run


class _TorchQAPeer:
    """scripts/bench_qa_torch_peer.py in the torch interpreter: one batch per request (its
    stderr goes to a file beside the batches, quoted when it stops answering)."""

    def __init__(self, python, script, threads, model_dir, batches_path):
        self.log = batches_path + '.stderr'
        with open(self.log, 'w') as log:
            self.proc = subprocess.Popen(
                [python, script, '--threads', str(threads), '--model-dir', str(model_dir),
                 '--batches', batches_path], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=log, text=True)
        self._reply()

    def _reply(self):
        line = self.proc.stdout.readline()
        if not line:
            with open(self.log) as log:
                raise RuntimeError('the torch QA peer stopped: ' + log.read()[-500:])
        return json.loads(line)

    def run(self, index):
        self.proc.stdin.write(json.dumps({'batch': index}) + '\n')
        self.proc.stdin.flush()
        return self._reply()['seconds']

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()


def _qa_timers(folder, batches, threads, torch_python, peer_script, model_dir):
    """{impl: run(index) -> seconds} and the torch peer (or None) to close."""
    inference, paths = export_random_qa(os.path.join(folder, 'qa'), batches[-1], model_dir)
    ours = ours_runner(os.path.join(folder, 'qa'))
    timers = {'ours_exported': lambda i: ours(batches[i])[0]}
    if paths['onnx']:
        onnx = onnx_runner(paths['onnx'], threads)
        timers['onnxruntime'] = lambda i: onnx(batches[i])[0]
    peer = None
    if torch_python:
        weights = {'head/' + k: v for k, v in head_weights(inference).items()}
        batches_path = save_batches(os.path.join(folder, 'batches.npz'), batches, weights)
        peer = _TorchQAPeer(torch_python, peer_script, threads, model_dir, batches_path)
        timers[TORCH] = peer.run
    return timers, peer


def qa_inference_rows(peer_script, threads, torch_python=None, rounds=2, warmup=1,
                      max_questions=0, max_seq_length=384, batch_size=32, model_dir=None,
                      data_dir=None):
    """Rows of the ``qa_inference`` configuration (see the module docstring).

    ``peer_script`` is the path of ``scripts/bench_qa_torch_peer.py``; ``torch_python`` an
    interpreter with torch and transformers (None: no torch row); without onnxruntime (the
    ``[onnx]`` extra) there is no ONNX Runtime row. ``max_questions`` 0 takes all the questions;
    ``data_dir`` is the data folder (as :func:`eval_batches`).
    """
    model_dir = str(model_dir or default_model_dir())
    questions, batches = eval_batches(max_questions, batch_size, max_seq_length,
                                      model_dir=model_dir, data_dir=data_dir)
    with tempfile.TemporaryDirectory(prefix='ga-bench-qa') as folder:
        timers, peer = _qa_timers(folder, batches, threads, torch_python, peer_script,
                                  model_dir)
        try:
            totals = {name: [] for name in timers}
            for round_ in range(warmup + rounds):
                seconds = dict.fromkeys(timers, 0.0)
                for index in range(len(batches)):
                    for name, timer in timers.items():
                        seconds[name] += timer(index)
                if round_ >= warmup:
                    for name, value in seconds.items():
                        totals[name].append(value)
        finally:
            if peer:
                peer.close()
    medians = {name: statistics.median(t) for name, t in totals.items()}
    longest = max(b['input_ids'].shape[1] for b in batches)
    return rows_from_medians('qa_inference', (batch_size, longest), 'infer', medians, questions,
                 'questions/s')
