"""The whole-model rows of ``scripts/benchmark.py``: ``squad_step`` here, ``qa_inference`` in
:mod:`~jobs.bench.qa`; the row keys and the table they share.

``squad_step``: one SQuAD fine-tuning step (forward + backward + AdamW update, B=16, T=128) of
``scripts/squad_step_speed.py``, ours and PyTorch + transformers, each run in its own process,
alternating (ours, torch, ours, torch ...); time = the median over runs of each run's median
step (8 timed steps after 2 of warm-up).

``qa_inference``: the exported QA model answering the evaluation questions
(:mod:`~jobs.bench.qa`): per round, every batch is run by every implementation
in turn (ours, ONNX Runtime, torch), so a load change on the machine hits all alike; time = the
median over rounds of the summed batch times (one round = all the questions).

Rows keep the attention rows' keys: ``config``, ``shape`` ([B, T]: batch and (longest) sequence
length), ``mode`` ('train' or 'infer'), ``impl``, ``median_s``, ``gflops`` (None: not counted
for whole models), ``ratio`` (peer time / this row's time, by peer implementation name) and
``peak_mb`` (None: not measured); they add ``throughput`` and ``unit`` (features/s or
questions/s), ``answers_kept`` (the fraction of the questions whose answer is that of our
float32 exported graph) and ``f1`` (official SQuAD F1 of the answers, percent), both None where
not measured (``squad_step``; the torch row; ``f1`` under random heads). Ratios are given
against the peers of :data:`PEERS` only; a peer that is absent (no torch interpreter, no
onnxruntime) has no row and no ratio.
"""
import json
import os
import statistics
import subprocess
import sys

from gluon_attention.resources import default_model_dir

__all__ = ['MODEL_CONFIGS', 'TORCH', 'PEERS', 'PEER_TITLES', 'has_transformers', 'imports',
           'rows_from_medians', 'squad_step_rows', 'step_medians', 'model_table']

MODEL_CONFIGS = ('squad_step', 'qa_inference')
TORCH = 'torch_transformers'
# The peers every whole-model row is compared with, and their table headings.
PEERS = (TORCH, 'onnxruntime', 'onnxruntime_hf_optimized', 'onnxruntime_hf_int8')
PEER_TITLES = ('vs torch + transformers', 'vs ONNX Runtime', 'vs HF fused (ONNX Runtime)',
               'vs HF INT8 (ONNX Runtime)')


def imports(python, modules):
    """Whether the interpreter ``python`` imports every module of ``modules``."""
    return subprocess.run([python, '-c', 'import ' + ', '.join(modules)],
                          capture_output=True).returncode == 0


def has_transformers(python):
    """Whether the interpreter ``python`` imports torch and transformers."""
    return imports(python, ('torch', 'transformers'))


def rows_from_medians(config, shape, mode, medians, amount, unit, quality=None):
    """The rows of one whole-model configuration from {impl: median seconds}; ``amount``
    features or questions per timed unit; ``quality``: {impl: (answers_kept, f1)} where
    measured (see the module docstring for the keys)."""
    quality = quality or {}
    return [dict(config=config, shape=list(shape), mode=mode, impl=impl, median_s=seconds,
                 gflops=None, peak_mb=None, throughput=amount / seconds, unit=unit,
                 ratio={peer: medians[peer] / seconds for peer in PEERS
                        if peer in medians and peer != impl},
                 answers_kept=quality.get(impl, (None, None))[0],
                 f1=quality.get(impl, (None, None))[1])
            for impl, seconds in medians.items()]


def squad_step_rows(step_script, threads, torch_python=None, rounds=3, batch_size=16,
                    seq_length=128, steps=8, warmup=2, model_dir=None):
    """Rows of the ``squad_step`` configuration (see the module docstring).

    ``step_script`` is the path of ``scripts/squad_step_speed.py``; ``torch_python`` an
    interpreter with torch and transformers (None: no torch row). RuntimeError when a run fails.
    """
    # the model folder is named: the peer interpreter does not have the model package
    common = ['--threads', str(threads), '--batch-size', str(batch_size), '--seq-length',
              str(seq_length), '--steps', str(steps), '--warmup', str(warmup),
              '--model-dir', str(model_dir or default_model_dir())]
    runs = {'ours': [sys.executable, step_script, '--impl', 'ours'] + common}
    if torch_python:
        runs[TORCH] = [torch_python, step_script, '--impl', 'torch'] + common
    medians = step_medians(runs, rounds, threads, batch_size)
    return rows_from_medians('squad_step', (batch_size, seq_length), 'train', medians, batch_size,
                 'features/s')


def step_medians(runs, rounds, threads, batch_size, label='squad_step'):
    """{name: median seconds of a step} of ``runs`` ({name: command line of
    ``scripts/squad_step_speed.py``}), each run ``rounds`` times in turn (ours, torch, ours,
    torch ...) with ``threads`` OpenMP threads; the median over runs of each run's median step.
    RuntimeError (starting with ``label``) when a run fails."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    times = {name: [] for name in runs}
    for _ in range(rounds):
        for name, cmd in runs.items():
            done = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if done.returncode:
                raise RuntimeError('{} {} failed: {}'.format(label, name, done.stderr[-500:]))
            speed = json.loads(done.stdout.strip().splitlines()[-1])['features_per_second']
            times[name].append(batch_size / speed)
    return {name: statistics.median(t) for name, t in times.items()}


def model_table(rows):
    """Markdown lines of the whole-model rows (empty when there are none)."""
    rows = [r for r in rows if r['config'] in MODEL_CONFIGS]
    if not rows:
        return []
    lines = ['', '| config | mode | implementation | median s | throughput | '
             + ' | '.join(PEER_TITLES) + ' | answers kept | F1 |',
             '|---|---|---|---:|---:|' + '---:|' * (len(PEERS) + 2)]
    for row in rows:
        cells = [row['config'], row['mode'], row['impl'], '%.3f' % row['median_s'],
                 '%.2f %s' % (row['throughput'], row['unit'])]
        cells += ['%.2fx' % row['ratio'][p] if p in row['ratio'] else '-' for p in PEERS]
        kept, f1 = row.get('answers_kept'), row.get('f1')
        cells += ['-' if kept is None else '%.1f%%' % (100 * kept),
                  '-' if f1 is None else '%.2f' % f1]
        lines.append('| ' + ' | '.join(cells) + ' |')
    return lines
