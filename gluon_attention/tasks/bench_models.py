"""The whole-model rows of ``scripts/benchmark.py``: ``squad_step`` and ``qa_inference``.

``squad_step``: one SQuAD fine-tuning step (forward + backward + AdamW update, B=16, T=128) of
``scripts/squad_step_speed.py``, ours and PyTorch + transformers, each run in its own process,
alternating (ours, torch, ours, torch ...); time = the median over runs of each run's median
step (8 timed steps after 2 of warm-up).

``qa_inference``: the exported QA model answering the evaluation questions
(:mod:`~gluon_attention.tasks.bench_qa`): per round, every batch is run by every implementation
in turn (ours, ONNX Runtime, torch), so a load change on the machine hits all alike; time = the
median over rounds of the summed batch times (one round = all the questions).

Rows keep the attention rows' keys: ``config``, ``shape`` ([B, T]: batch and (longest) sequence
length), ``mode`` ('train' or 'infer'), ``impl``, ``median_s``, ``gflops`` (None: not counted
for whole models), ``ratio`` (peer time / this row's time, by peer implementation name) and
``peak_mb`` (None: not measured); they add ``throughput`` and ``unit`` (features/s or
questions/s). Ratios are given against the peers ``torch_transformers`` and ``onnxruntime``
only; a peer that is absent (no torch interpreter, no onnxruntime) has no row and no ratio.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

from .._resources import default_model_dir

__all__ = ['MODEL_CONFIGS', 'has_transformers', 'model_rows', 'squad_step_rows',
           'qa_inference_rows', 'model_table']

MODEL_CONFIGS = ('squad_step', 'qa_inference')
TORCH = 'torch_transformers'
PEERS = (TORCH, 'onnxruntime')


def has_transformers(python):
    """Whether the interpreter ``python`` imports torch and transformers."""
    return subprocess.run([python, '-c', 'import torch, transformers'],
                          capture_output=True).returncode == 0


def model_rows(config, scripts_dir, threads, torch_python, rounds):
    """The rows of ``config`` ('squad_step' or 'qa_inference') at their full sizes.

    ``scripts_dir`` holds ``squad_step_speed.py`` and ``bench_qa_torch_peer.py``;
    ``torch_python`` is the peer interpreter (None, or one without transformers: no torch row).
    """
    if torch_python and not has_transformers(torch_python):
        torch_python = None
    if config == 'squad_step':
        return squad_step_rows(os.path.join(scripts_dir, 'squad_step_speed.py'), threads,
                               torch_python, rounds=rounds)
    return qa_inference_rows(os.path.join(scripts_dir, 'bench_qa_torch_peer.py'), threads,
                             torch_python, rounds=rounds)


def _rows(config, shape, mode, medians, amount, unit):
    """Rows from {impl: median seconds}; ``amount`` features or questions per timed unit."""
    return [dict(config=config, shape=list(shape), mode=mode, impl=impl, median_s=seconds,
                 gflops=None, peak_mb=None, throughput=amount / seconds, unit=unit,
                 ratio={peer: medians[peer] / seconds for peer in PEERS
                        if peer in medians and peer != impl})
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
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    times = {name: [] for name in runs}
    for _ in range(rounds):
        for name, cmd in runs.items():
            done = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if done.returncode:
                raise RuntimeError('squad_step {} failed: {}'.format(name, done.stderr[-500:]))
            speed = json.loads(done.stdout.strip().splitlines()[-1])['features_per_second']
            times[name].append(batch_size / speed)
    medians = {name: statistics.median(t) for name, t in times.items()}
    return _rows('squad_step', (batch_size, seq_length), 'train', medians, batch_size,
                 'features/s')


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
    # imported here: bench_qa sits at the end of the model's longest import chain
    from .bench_qa import (  # pylint: disable=import-outside-toplevel
        export_random_qa, head_weights, onnx_runner, ours_runner, save_batches)
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
                      max_questions=0, max_seq_length=384, batch_size=32, model_dir=None):
    """Rows of the ``qa_inference`` configuration (see the module docstring).

    ``peer_script`` is the path of ``scripts/bench_qa_torch_peer.py``; ``torch_python`` an
    interpreter with torch and transformers (None: no torch row); without onnxruntime (the
    ``[onnx]`` extra) there is no ONNX Runtime row. ``max_questions`` 0 takes all the questions.
    """
    from .bench_qa import eval_batches  # pylint: disable=import-outside-toplevel
    model_dir = str(model_dir or default_model_dir())
    questions, batches = eval_batches(max_questions, batch_size, max_seq_length,
                                      model_dir=model_dir)
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
    return _rows('qa_inference', (batch_size, longest), 'infer', medians, questions,
                 'questions/s')


def model_table(rows):
    """Markdown lines of the whole-model rows (empty when there are none)."""
    rows = [r for r in rows if r['config'] in MODEL_CONFIGS]
    if not rows:
        return []
    lines = ['', '| config | mode | implementation | median s | throughput | vs torch + '
             'transformers | vs ONNX Runtime |', '|---|---|---|---:|---:|---:|---:|']
    for row in rows:
        cells = [row['config'], row['mode'], row['impl'], '%.3f' % row['median_s'],
                 '%.2f %s' % (row['throughput'], row['unit'])]
        cells += ['%.2fx' % row['ratio'][p] if p in row['ratio'] else '-' for p in PEERS]
        lines.append('| ' + ' | '.join(cells) + ' |')
    return lines
