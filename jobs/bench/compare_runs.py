"""The training runs of the comparison with PyTorch + transformers (``compare_transformers.py ours``
and ``theirs``): both sides on the feature file's batches, then its dev features.

Ours: :func:`~jobs.squad.model.build_model` (the pretrained encoder the file
names under new conditional QA heads, initialised after ``mx.random.seed(seed)``), trained by the
SQuAD job's loop (:func:`~jobs.squad.loop.train`) with the recipe's options
and our SQuAD 1.1 loss (span + answerable terms); the file's batches are checked equal to those
the loop draws; a killed run resumes from its checkpoint in ``<output-dir>/checkpoints``.
Theirs: ``scripts/compare_transformers_peer.py`` in the interpreter that has torch and
transformers, on the same ``batches.npz`` (``BertForQuestionAnswering``; see that script).

A run folder, the same files on both sides: ``batches.npz`` (``index`` and ``offsets`` of the
steps trained: step s is ``index[offsets[s]:offsets[s + 1]]``), ``dev_outputs.npz`` (ours: the
five outputs of :class:`~gluon_attention.models.qa.QAInference` per dev feature; theirs:
``start_logits`` and ``end_logits`` (F, T)) and ``run.json``: side, framework, recipe and its
options, seed, steps, batch, features trained, threads, training seconds and features per
second, dev seconds, load averages at start and end, the feature file's id, and
``batch_digest``: the sha256 of every step's padded arrays as the side fed them to its model
(``input_ids``, ``token_types``, ``valid_length``, ``start_position``, ``end_position``, int32).
"""
import dataclasses
import hashlib
import json
import os
import subprocess
import time

import mxnet as mx
import numpy as onp

from gluon_attention.checks import fail
from gluon_attention.core import fused
from gluon_attention.core.matmul import require_matmul_dtype, set_matmul_dtype
from gluon_attention.data import squad

from ..engine.checkpoints import sha256_file
from ..engine.common import atomic_write_json
from ..squad.config import TrainConfig, check_config
from ..squad.evaluation import infer
from ..squad.loop import check_resumable, schedule, train
from ..squad.model import build_model
from .compare import OUR_OUTPUTS, read_feature_file

__all__ = ['RunConfig', 'DIGEST_KEYS', 'run_ours', 'run_theirs',
           'stored_batches', 'write_batches', 'batch_digest', 'load_average']

#: The arrays of a step that ``batch_digest`` hashes, in this order, as int32.
DIGEST_KEYS = ('input_ids', 'token_types', 'valid_length', 'start_position', 'end_position')


@dataclasses.dataclass
class RunConfig:
    """One training run of either side (the options of ``ours`` and ``theirs``)."""
    features: str
    output_dir: str
    seed: int = 1
    steps: int = 100
    batch: int = 16
    recipe: str = 'ours'
    threads: int = 1
    checkpoint_every: int = 0
    progress: bool = False
    matmul_dtype: str = 'float32'
    peer_python: str = '.venv-peer/bin/python'
    peer_script: str = 'scripts/compare_transformers_peer.py'


def stored_batches(data, run):
    """The file's feature indices of the first ``run.steps`` steps for ``run.seed``.

    Raises
    ------
    ValueError
        For a seed, batch or number of steps the file holds no batch order for.
    """
    options = data['meta']['options']
    if run.seed not in data['schedules'] or run.batch != options['batch']:
        fail('expected a seed and batch whose order the feature file holds (write it with '
             'features --seeds ... --batch ...)', seed=run.seed, batch=run.batch,
             stored_seeds=sorted(data['schedules']), stored_batch=options['batch'])
    steps = data['schedules'][run.seed]
    if not 0 < run.steps <= len(steps):
        fail('--steps must lie in [1, {}], the steps the feature file holds (features '
             '--schedule-steps)'.format(len(steps)), steps=run.steps)
    return steps[:run.steps]


def write_batches(folder, batches):
    """``<folder>/batches.npz`` (see the module docstring)."""
    os.makedirs(folder, exist_ok=True)
    onp.savez(os.path.join(folder, 'batches.npz'),
              index=onp.concatenate(batches).astype(onp.int32),
              offsets=onp.cumsum([0] + [len(b) for b in batches]).astype(onp.int64))


def batch_digest(rows, batches):
    """The sha256 (hex) of the steps our loop feeds: each step's
    :func:`~gluon_attention.data.squad.batchify` arrays (padded to a multiple of 8) of
    :data:`DIGEST_KEYS`, as int32 bytes, step after step."""
    digest = hashlib.sha256()
    for ids in batches:
        arrays = squad.batchify([rows[i] for i in ids], round_to=8)
        for key in DIGEST_KEYS:
            digest.update(onp.ascontiguousarray(arrays[key], onp.int32).tobytes())
    return digest.hexdigest()


def load_average():
    """``os.getloadavg()`` rounded (1, 5, 15 minutes), or None where it is missing."""
    try:
        return [round(value, 2) for value in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def _prepare(run, train_rows):
    """Read the file, check the recipe and the weights, write ``batches.npz``."""
    data = read_feature_file(run.features, train=train_rows)
    meta = data['meta']
    if run.recipe not in meta['recipes']:
        fail('--recipe must be one of {}'.format(', '.join(meta['recipes'])), recipe=run.recipe)
    if sha256_file(os.path.join(meta['model_dir'], 'model.safetensors')) != meta['model_sha256']:
        fail('expected the weights the feature file names (sha256 differs)',
             model_dir=meta['model_dir'])
    batches = stored_batches(data, run)
    write_batches(run.output_dir, batches)
    return data, batches


def _record(run, meta, batches, fields):
    """Write ``run.json`` (the common fields and ``fields``) and print its main values."""
    trained = sum(len(b) for b in batches)
    record = dict(recipe=run.recipe, recipe_options=meta['recipes'][run.recipe],
                  seed=run.seed, steps=run.steps, batch=run.batch, features_trained=trained,
                  threads=run.threads, file_id=meta['file_id'], **fields)
    record['train_features_per_second'] = round(trained / max(record['train_seconds'], 1e-9), 3)
    atomic_write_json(os.path.join(run.output_dir, 'run.json'), record)
    print(json.dumps({k: record[k] for k in ('side', 'recipe', 'seed', 'steps', 'train_seconds',
                                             'train_features_per_second', 'dev_seconds')}))
    return record


def _train_config(meta, run):
    options = meta['options']
    config = TrainConfig(
        output_dir=run.output_dir, model_dir=meta['model_dir'], version_2_with_negative=0,
        train_file=options['train_file'], extra_train_file='',
        exclude_titles=options['exclude_titles'], threshold_titles='',
        max_seq_length=options['max_seq_length'], doc_stride=options['doc_stride'],
        max_query_length=options['max_query_length'],
        eval_max_seq_length=options['eval_max_seq_length'], seed=run.seed,
        max_steps=run.steps, batch_size=run.batch, checkpoint_every=run.checkpoint_every
        or run.steps, keep_checkpoints=1, progress=run.progress, data_dir=options['data_dir'],
        threads=run.threads, matmul_dtype=run.matmul_dtype, **meta['recipes'][run.recipe])
    check_config(config)
    return config


def run_ours(run):
    """Train and predict our side (module docstring); returns the ``run.json`` dict.

    Raises
    ------
    ValueError
        An unknown recipe, weights that are not the file's (sha256), batches the file does not
        hold or that our loop would not draw, or a run folder holding another run's checkpoints.
    """
    data, batches = _prepare(run, train_rows=True)
    meta, rows = data['meta'], data['train']
    config = _train_config(meta, run)
    drawn = schedule(rows, config)
    if len(drawn) != len(batches) or any(not onp.array_equal(a, b)
                                         for a, b in zip(drawn, batches)):
        fail("expected the file's batch order to be the one our loop draws", seed=run.seed)
    check_resumable(config)
    mx.random.seed(run.seed)
    contexts = [mx.cpu()]
    print(require_matmul_dtype(config.matmul_dtype, contexts, fused.cpu_features()))
    model = build_model(config.model_dir, config, contexts, config.matmul_dtype)
    load_before = load_average()
    result = train(model, rows, config, contexts)
    set_matmul_dtype(model, 'float32')      # the dev features are predicted in float32
    started = time.time()
    _, outputs = infer(model, data['dev'], config, contexts[0])
    dev_seconds = time.time() - started
    onp.savez(os.path.join(run.output_dir, 'dev_outputs.npz'),
              **{key: onp.stack([o[i] for o in outputs]) for i, key in enumerate(OUR_OUTPUTS)})
    return _record(run, meta, batches, dict(
        side='ours', framework='mxnet {}'.format(mx.__version__), matmul_dtype=run.matmul_dtype,
        train_seconds=round(result.seconds, 1), dev_seconds=round(dev_seconds, 1),
        dev_features=len(outputs), batch_digest=batch_digest(rows, batches),
        load_average_start=load_before, load_average_end=load_average()))


def run_theirs(run):
    """Run the PyTorch side in ``run.peer_python`` on the batches written here; returns the
    ``run.json`` dict.

    Raises
    ------
    ValueError
        As :func:`run_ours` (no loop to compare with), or a peer interpreter that is missing.
    RuntimeError
        The peer exits with a non-zero status.
    """
    if not os.path.exists(run.peer_python):
        fail('--peer-python must name the interpreter with torch and transformers (make bench '
             'builds .venv-peer)', peer_python=run.peer_python)
    data, batches = _prepare(run, train_rows=False)
    load_before = load_average()
    command = [run.peer_python, run.peer_script, '--features', run.features, '--run-dir',
               run.output_dir, '--recipe', run.recipe, '--seed', str(run.seed), '--threads',
               str(run.threads)]
    status = subprocess.run(command, env=dict(os.environ, OMP_NUM_THREADS=str(run.threads)),
                            check=False).returncode
    if status:
        raise RuntimeError('the PyTorch side exited with status {}: {}'.format(
            status, ' '.join(command)))
    with open(os.path.join(run.output_dir, 'peer.json'), encoding='utf-8') as handle:
        peer = json.load(handle)
    return _record(run, data['meta'], batches, dict(
        peer, side='theirs', load_average_start=load_before, load_average_end=load_average()))
