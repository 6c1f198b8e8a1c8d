"""The ``qa_inference`` benchmark rows: the exported QA model answering the evaluation questions.

The work is that of the SQuAD job's evaluation (``run_squad.py``'s defaults): the questions of
``haystack-small`` in features of at most 384 tokens (query cut to 32, stride 128), sorted by
length and cut into batches of 32 features, each padded to its own longest feature rounded up
to 8 tokens (:func:`eval_batches`). Every implementation gets the same batches:

* ``ours_exported``: the graph written by
  :func:`~gluon_attention.export.block.export_block`, loaded with ``SymbolBlock.imports``
  (:func:`~gluon_attention.export.block.import_block`), as a user of the export runs it
  (:func:`ours_runner`); its answers are the reference of ``answers_kept``;
* ``ours_exported_bfloat16``: the same graph with its dense products in bfloat16
  (:class:`~gluon_attention.core.matmul_graph.Bfloat16Graph`, weights cast once when loaded),
  as ``QAPredictor`` and the server run it with ``Kernels(matmul_dtype='bfloat16')``; it runs
  with or without AMX (``scripts/benchmark.py`` says which in the table's header) and is left
  out, with a line saying why, where MXNet cannot run bfloat16 products;
* ``onnxruntime``: ``qa.onnx`` from :func:`~jobs.squad.onnx_check.export_qa_onnx`
  (the fusable form, as written) in ONNX Runtime (:func:`onnx_runner`, as every ONNX row);
* ``onnxruntime_ours_optimized``: that file after ONNX Runtime's transformer optimizer
  (``qa-optimized.onnx`` of
  :func:`~gluon_attention.export.onnx_optimize.optimize_and_quantize`);
* ``ours_int8``: our INT8 route, ``qa-int8.onnx`` as ``run_squad.py quantize`` writes it (the
  optimized file's weights quantized per output channel by ``quantize_dynamic``, the head too);
* ``torch_transformers``: PyTorch + transformers ``BertModel`` in eval mode under
  ``torch.inference_mode`` with the same encoder weights and the same conditional head
  (``scripts/bench_qa_torch_peer.py``, in the peer interpreter; it reads :func:`save_batches`);
* ``torch_transformers_bfloat16``: the same model in the same peer process under
  ``torch.autocast('cpu', dtype=torch.bfloat16)`` (its products in bfloat16 on PyTorch's own
  oneDNN, which uses AMX where the CPU has it, whatever this process decided);
* ``onnxruntime_hf_optimized`` and ``onnxruntime_hf_int8``: the Hugging Face ``BertModel``
  export of the same weights with the same head, written by ``scripts/export_hf_qa_onnx.py`` in
  the peer interpreter (which needs onnx too), then optimized and quantized here as ours is.

The ONNX rows need onnxruntime, onnx and sympy (the ``[onnx]`` extra); the last three rows need
the peer interpreter. Rows whose requirement is missing are left out, with one printed line
saying which and why.

The model is ``model_dir``: a pretrained encoder folder (default: the embedded one) under
randomly initialised heads (:func:`export_random_qa`; weights do not change the speed), or a
fine-tuned model folder as ``run_squad.py train`` saves it (``qa_config.json`` present, e.g.
``runs/squad/model`` after ``make demo``), answered with its own heads, sequence lengths and
null threshold. Each row gives, besides the throughput, ``answers_kept`` (the fraction of the
questions whose decoded answer text is that of ``ours_exported``) and, for a fine-tuned folder
only, ``f1`` (the official SQuAD F1 on the questions). Under random heads F1 would mean nothing
and is not given, and the answers are decoded without null answers, so that what is compared
is each question's best span. The torch rows give neither (their outputs stay in the peer).
:func:`qa_inference_rows` times them (rows as in :mod:`~jobs.bench.models`).
Glossary: B batch, T padded sequence length.
"""
import importlib.util
import json
import math
import os
import statistics
import subprocess
import tempfile
import time

import mxnet as mx
import numpy as onp

from gluon_attention.core.matmul import bfloat16_problem
from gluon_attention.core.matmul_graph import Bfloat16Graph
from gluon_attention.data import squad
from gluon_attention.export.block import export_block, import_block
from gluon_attention.models.encoder import BertEncoder
from gluon_attention.models.qa import ModelForQAConditional, QAInference
from gluon_attention.pipelines import NullThreshold, load_qa_folder, load_qa_model
from gluon_attention.pipelines.features import INPUT_DTYPES, INPUT_NAMES, eval_features
from gluon_attention.pipelines.folder import HEAD_FILE, QA_CONFIG
from gluon_attention.resources import default_model_dir

from ..squad.data import check_not_trained_on
from .models import TORCH, TORCH_BFLOAT16, imports, rows_from_medians
from .peer import PeerProcess

__all__ = ['EVAL_FILE', 'IMPLS', 'eval_set', 'eval_batches', 'fine_tuned_folder', 'export_qa',
           'export_random_qa', 'head_weights', 'save_batches', 'ours_runner', 'onnx_runner',
           'torch_qa_peer', 'decoded_answers', 'answer_quality', 'fine_tuned_threshold',
           'qa_inference_rows']

EVAL_FILE = 'haystack-small'
TOP_N = 5          # start_top_n = end_top_n = 5, the job's defaults
N_BEST, MAX_ANSWER_LENGTH = 20, 30      # the job's decoding defaults
# The rows, in the order each batch starts its turn at (see _interleaved).
ORT_ROWS = ('onnxruntime', 'onnxruntime_ours_optimized', 'ours_int8')
HF_ROWS = ('onnxruntime_hf_optimized', 'onnxruntime_hf_int8')
BFLOAT16_ROW = 'ours_exported_bfloat16'
TORCH_ROWS = (TORCH, TORCH_BFLOAT16)
IMPLS = ('ours_exported', BFLOAT16_ROW) + ORT_ROWS + TORCH_ROWS + HF_ROWS
ONNX_MODULES = ('onnxruntime', 'onnx', 'sympy')      # the [onnx] extra


def eval_set(max_questions=0, batch_size=32, max_seq_length=384, max_query_length=32,
             model_dir=None, data_dir=None):
    """:func:`eval_batches` with what decoding needs: a dict of ``examples`` (the questions),
    ``features``, ``batches`` and ``index`` (per batch, the positions in ``features`` of its
    rows, in row order). Same parameters."""
    examples = squad.read_squad(squad.default_data_path(EVAL_FILE, data_dir))
    examples = examples[:max_questions] if max_questions else examples
    tokenizer = squad.load_tokenizer(model_dir or default_model_dir())
    features = eval_features(examples, tokenizer, max_seq_length, max_query_length)
    index = squad.length_sorted_batches(features, batch_size)
    batches = []
    for rows in index:
        arrays = squad.batchify([features[i] for i in rows], round_to=8)
        batches.append({k: arrays[k] for k in INPUT_NAMES})
    return {'examples': examples, 'features': features, 'batches': batches, 'index': index}


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
    found = eval_set(max_questions, batch_size, max_seq_length, max_query_length, model_dir,
                     data_dir)
    return len(found['examples']), found['batches']


def fine_tuned_folder(model_dir):
    """``model_dir`` loaded (:func:`~gluon_attention.pipelines.load_qa_folder`) when it is a
    fine-tuned model folder (it holds ``qa_config.json`` and ``qa_head.safetensors``), else None
    (a pretrained encoder)."""
    if all(os.path.isfile(os.path.join(model_dir, name)) for name in (QA_CONFIG, HEAD_FILE)):
        return load_qa_folder(model_dir)
    return None


def _random_qa_model(model_dir, seed):
    """The pretrained encoder (no dropout) and the conditional head, initialised N(0, 0.02)."""
    mx.random.seed(seed)
    encoder = BertEncoder.from_pretrained(model_dir, dropout=0.0, attention_dropout=0.0)
    model = ModelForQAConditional(encoder, units=encoder.config['units'], dropout=0.0)
    for head in (model.start_scores, model.end_scores, model.answerable_scores):
        head.initialize(mx.init.Normal(0.02))
    return model


def export_qa(model, prefix, batch, onnx=True):
    """Export the QA inference graph of ``model`` (a ``ModelForQAConditional``).

    Parameters
    ----------
    prefix : str
        Written: ``<prefix>-symbol.json``, ``<prefix>-0000.params``, ``<prefix>-inputs.json``
        and, with ``onnx`` and the ``[onnx]`` extra, ``<prefix>.onnx``.
    batch : dict of NumPy arrays
        One batch of :func:`eval_batches` (builds the graph).

    Returns
    -------
    (QAInference, dict)
        The hybridized unexported block and the written paths (``onnx`` None when skipped).
    """
    inference = QAInference(model, TOP_N, TOP_N)
    inference.hybridize(static_alloc=True)
    inference(*_mx_inputs(batch))
    paths = export_block(inference, prefix, INPUT_NAMES, INPUT_DTYPES)
    paths['onnx'] = None
    if onnx:
        try:
            # pylint: disable-next=import-outside-toplevel
            from gluon_attention.pipelines.onnx import export_qa_onnx
        except ImportError:
            return inference, paths
        paths['onnx'] = export_qa_onnx(prefix)
    return inference, paths


def export_random_qa(prefix, batch, model_dir=None, seed=0, onnx=True):
    """:func:`export_qa` of the pretrained encoder at ``model_dir`` (default: the embedded one)
    under heads initialised N(0, 0.02) from ``seed``."""
    return export_qa(_random_qa_model(model_dir or default_model_dir(), seed), prefix, batch,
                     onnx)


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


def ours_runner(prefix, static_alloc=True, static_shape=False, backend=None,
                matmul_dtype='float32'):
    """A callable ``run(batch) -> (seconds, outputs)`` of the exported graph at ``prefix``.

    ``SymbolBlock.imports`` (:func:`import_block`), then ``hybridize(static_alloc,
    static_shape)``; ``backend`` (e.g. ``'ONEDNN'``) partitions the graph with
    ``optimize_for`` on the first batch. ``matmul_dtype='bfloat16'``: the graph through
    :meth:`Bfloat16Graph.from_exported` instead (``static_alloc``; the other options unused).
    The seconds include building the inputs and waiting for every output, as a caller reading
    the answers would.
    """
    if matmul_dtype == 'bfloat16':
        block, backend = Bfloat16Graph.from_exported(prefix), None
    else:
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
    from gluon_attention.export.onnx import onnx_session  # pylint: disable=import-outside-toplevel
    session = onnx_session(onnx_path, threads or int(os.environ.get('OMP_NUM_THREADS', 1)))

    def run(batch):
        start = time.perf_counter()
        outputs = session.run(None, dict(batch))
        return time.perf_counter() - start, outputs
    return run


def torch_qa_peer(python, script, threads, model_dir, batches_path):
    """scripts/bench_qa_torch_peer.py in the torch interpreter ``python``
    (:class:`~jobs.bench.peer.PeerProcess`; its standard error in a file beside the batches):
    ``ask({'batch': i, 'autocast': 'bfloat16'})`` answers ``{'seconds': t}`` for one pass over
    batch i (``autocast`` None or absent: float32)."""
    return PeerProcess([python, script, '--threads', str(threads), '--model-dir', str(model_dir),
                        '--batches', batches_path], batches_path + '.stderr')


def _torch_runner(peer, autocast):
    return lambda i: (peer.ask({'batch': i, 'autocast': autocast})['seconds'], None)


def decoded_answers(examples, features, outputs, threshold):
    """{question id: answer text} decoded from one 5-tuple of outputs per feature as the job
    decodes them (20 best, at most 30 tokens; '' where the null score difference exceeds
    ``threshold``, a :class:`~gluon_attention.pipelines.NullThreshold`)."""
    return squad.decode_predictions(examples, features, outputs, N_BEST, MAX_ANSWER_LENGTH,
                                    threshold.value)[1]


def answer_quality(examples, reference, answers, f1=True):
    """(answers kept, F1): the fraction of the questions of ``reference`` ({question id: answer
    text}) that ``answers`` answers with the same text, and the official F1 of ``answers`` on
    ``examples`` (None unless ``f1``)."""
    kept = sum(answers[qid] == text for qid, text in reference.items()) / len(reference)
    return kept, squad.squad_evaluate(examples, answers)['f1'] if f1 else None


def fine_tuned_threshold(tuned, examples):
    """The saved null threshold (a :class:`~gluon_attention.pipelines.NullThreshold`) of the
    loaded fine-tuned folder ``tuned``; ValueError when it was trained on the articles of
    ``examples`` (the evaluation questions)."""
    check_not_trained_on(tuned.qa_config, examples, EVAL_FILE)
    return NullThreshold.saved(tuned.qa_config).resolve(
        tuned.qa_config, tuned.qa_config['version_2_with_negative'])


def _skip_line(rows, why):
    return 'qa_inference: no {} row{}: {}'.format(', '.join(rows), 's' * (len(rows) > 1), why)


def _encoder_sizes(model_dir):
    """(heads, units) of the encoder's ``config.json`` (the optimizer checks them)."""
    with open(os.path.join(model_dir, 'config.json'), encoding='utf-8') as handle:
        config = json.load(handle)
    return config['num_attention_heads'], config['hidden_size']


def _export_hf(python, peer_script, model_dir, weights_path, out):
    """scripts/export_hf_qa_onnx.py (beside ``peer_script``) in the peer interpreter."""
    script = os.path.join(os.path.dirname(os.path.abspath(peer_script)), 'export_hf_qa_onnx.py')
    done = subprocess.run([python, script, '--model-dir', model_dir, '--weights', weights_path,
                           '--out', out], capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError('export_hf_qa_onnx.py failed: ' + done.stderr[-800:])
    return json.loads(done.stdout.strip().splitlines()[-1])['onnx']


def _onnx_files(folder, onnx_path, torch_python, peer_script, model_dir, weights_path):
    """{row: .onnx path} of the ONNX rows that can run here (``onnx_path``: our ``qa.onnx``;
    ``weights_path``: the head's weights for the HF export) and the lines saying which rows are
    left out."""
    missing = [m for m in ONNX_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        return {}, [_skip_line(ORT_ROWS + HF_ROWS, 'this interpreter lacks {} (pip install '
                               '"gluon_attention[onnx]")'.format(', '.join(missing)))]
    from gluon_attention.export.onnx_optimize import (  # pylint: disable=import-outside-toplevel
        optimize_and_quantize)
    sizes = _encoder_sizes(model_dir)
    ours = optimize_and_quantize(onnx_path, os.path.join(folder, 'qa'), *sizes)
    files = dict(zip(ORT_ROWS, (onnx_path, ours['optimized'], ours['int8'])))
    if not torch_python:
        return files, []
    if not imports(torch_python, ('onnx',)):
        return files, [_skip_line(HF_ROWS, 'the peer interpreter {} does not import onnx (make '
                                  'bench installs it in .venv-peer)'.format(torch_python))]
    hf = _export_hf(torch_python, peer_script, model_dir, weights_path,
                    os.path.join(folder, 'hf.onnx'))
    theirs = optimize_and_quantize(hf, os.path.join(folder, 'hf'), *sizes)
    files.update(zip(HF_ROWS, (theirs['optimized'], theirs['int8'])))
    return files, []


def _qa_runners(folder, found, threads, torch_python, peer_script, model_dir, tuned):
    """{impl: run(batch index) -> (seconds, outputs or None)} in :data:`IMPLS` order, the
    torch peer (or None) to close, and the lines saying which rows are left out."""
    batches = found['batches']
    model = _random_qa_model(model_dir, 0) if tuned is None else load_qa_model(tuned, [mx.cpu()])
    inference, paths = export_qa(model, os.path.join(folder, 'qa'), batches[-1])
    runners = {'ours_exported': _on_batches(ours_runner(os.path.join(folder, 'qa')), batches)}
    skipped = []
    if bfloat16_problem() is None:
        runners[BFLOAT16_ROW] = _on_batches(ours_runner(os.path.join(folder, 'qa'),
                                                        matmul_dtype='bfloat16'), batches)
    else:
        skipped.append(_skip_line((BFLOAT16_ROW,), bfloat16_problem()))
    batches_path = None
    if torch_python:
        weights = {'head/' + k: v for k, v in head_weights(inference).items()}
        batches_path = save_batches(os.path.join(folder, 'batches.npz'), batches, weights)
    files, onnx_skipped = _onnx_files(folder, paths['onnx'], torch_python, peer_script,
                                      model_dir, batches_path)
    skipped += onnx_skipped
    if not torch_python:       # one line for the peer's rows (the HF ones: if ONNX can run)
        skipped.append(_skip_line(TORCH_ROWS + (HF_ROWS if files else ()),
                                  'no interpreter with torch and transformers (make bench '
                                  'installs .venv-peer; benchmark.py --torch-python)'))
    for name, path in files.items():
        runners[name] = _on_batches(onnx_runner(path, threads), batches)
    peer = None
    if torch_python:
        peer = torch_qa_peer(torch_python, peer_script, threads, model_dir, batches_path)
        runners[TORCH], runners[TORCH_BFLOAT16] = (_torch_runner(peer, None),
                                                   _torch_runner(peer, 'bfloat16'))
    return {name: runners[name] for name in IMPLS if name in runners}, peer, skipped


def _on_batches(runner, batches):
    return lambda i: runner(batches[i])


def _interleaved(runners, count, rounds, warmup):
    """Every batch run by every runner in turn, the order rotating by one runner each batch
    (a change of load hits all alike). Returns {impl: [seconds of each timed round]} and
    {impl: [outputs of each batch in the last round]}."""
    names = list(runners)
    totals = {name: [] for name in names}
    outputs = {name: [None] * count for name in names}
    turn = 0
    for round_ in range(warmup + rounds):
        seconds = dict.fromkeys(names, 0.0)
        for index in range(count):
            shift = turn % len(names)
            for name in names[shift:] + names[:shift]:
                spent, outputs[name][index] = runners[name](index)
                seconds[name] += spent
            turn += 1
        if round_ >= warmup:
            for name, value in seconds.items():
                totals[name].append(value)
    return totals, outputs


def _quality(found, outputs, threshold, scored):
    """{impl: (answers kept, F1 or None)} of the runners that return their outputs."""
    per_feature = {}
    for name, batch_outputs in outputs.items():
        if batch_outputs[0] is None:
            continue
        per_feature[name] = [None] * len(found['features'])
        for rows, result in zip(found['index'], batch_outputs):
            for row, k in enumerate(rows):
                per_feature[name][k] = tuple(r[row] for r in result)
    answers = {name: decoded_answers(found['examples'], found['features'], o, threshold)
               for name, o in per_feature.items()}
    return {name: answer_quality(found['examples'], answers['ours_exported'], a, scored)
            for name, a in answers.items()}


def qa_inference_rows(peer_script, threads, torch_python=None, rounds=2, warmup=1,
                      max_questions=0, max_seq_length=None, batch_size=32, model_dir=None,
                      data_dir=None, max_query_length=None):
    """Rows of the ``qa_inference`` configuration (see the module docstring).

    ``peer_script`` is the path of ``scripts/bench_qa_torch_peer.py`` (``export_hf_qa_onnx.py``
    is read beside it); ``torch_python`` an interpreter with torch and transformers (None: no
    torch and HF rows); ``model_dir`` a pretrained encoder (random heads; default: the
    embedded one) or a fine-tuned model folder (its heads; F1 given). ``max_questions`` 0 takes
    all the questions; ``max_seq_length`` and ``max_query_length`` default to the fine-tuned
    folder's evaluation lengths, else 384 and 32; ``data_dir`` is the data folder (as
    :func:`eval_batches`). Prints a line naming the model, and one line per reason a row is
    left out. ValueError for a fine-tuned folder trained on the questions' articles.
    """
    model_dir = str(model_dir or default_model_dir())
    tuned = fine_tuned_folder(model_dir)
    saved = tuned.qa_config if tuned else {'eval_max_seq_length': 384, 'max_query_length': 32}
    found = eval_set(max_questions, batch_size, max_seq_length or saved['eval_max_seq_length'],
                     max_query_length or saved['max_query_length'], model_dir, data_dir)
    if tuned is None:
        threshold = NullThreshold(math.inf, 'random heads: never the null answer')
        print('qa_inference: the encoder {} under random heads: answers kept only, no F1 (a '
              'fine-tuned model folder, e.g. runs/squad/model, gives F1)'.format(model_dir))
    else:
        threshold = fine_tuned_threshold(tuned, found['examples'])
        print('qa_inference: the fine-tuned model {} (null threshold {:.4g}): answers kept and '
              'F1 on {} questions'.format(model_dir, threshold.value, len(found['examples'])))
    with tempfile.TemporaryDirectory(prefix='ga-bench-qa') as folder:
        runners, peer, skipped = _qa_runners(folder, found, threads, torch_python, peer_script,
                                             model_dir, tuned)
        for line in skipped:
            print(line, flush=True)
        try:
            totals, outputs = _interleaved(runners, len(found['batches']), rounds, warmup)
        finally:
            if peer:
                peer.close()
    medians = {name: statistics.median(t) for name, t in totals.items()}
    longest = max(b['input_ids'].shape[1] for b in found['batches'])
    return rows_from_medians('qa_inference', (batch_size, longest), 'infer', medians,
                             len(found['examples']), 'questions/s',
                             _quality(found, outputs, threshold, tuned is not None))
