"""The whole-model rows of ``scripts/benchmark.py``: ``squad_step`` here, ``qa_inference`` in
:mod:`~jobs.bench.qa`; the row keys and the table they share.

``squad_step``: one SQuAD fine-tuning step (forward + backward + AdamW update, B=16, T=128) of
``scripts/squad_step_speed.py``: ``ours`` (float32), ``ours_bfloat16`` (``--matmul-dtype
bfloat16``: the encoder's dense products in bfloat16, on AMX where this process's import
granted it), ``torch_transformers`` (float32) and ``torch_transformers_bfloat16`` (forward and
loss under ``torch.autocast('cpu', dtype=torch.bfloat16)``), each run in its own process, in
turn, the order rotating by one row each round; time = the median over runs of each run's
median step (8 timed steps after 2 of warm-up).

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
not measured (``squad_step``; the torch rows; ``f1`` under random heads). Ratios are given
against the peers of :data:`PEERS` only (our float32 row among them, the reference of the
bfloat16 rows); a peer that is absent (no torch interpreter, no onnxruntime) has no row and no
ratio. :func:`goal_lines` says, under the table, which ratio goals of the bfloat16 work
(:data:`GOALS`) the rows meet.
"""
import json
import os
import statistics
import subprocess
import sys

from gluon_attention.core.matmul import bfloat16_problem
from gluon_attention.resources import default_model_dir

__all__ = ['MODEL_CONFIGS', 'TORCH', 'TORCH_BFLOAT16', 'OURS_FLOAT32', 'PEERS', 'COLUMNS',
           'PEER_TITLES', 'GOALS', 'has_transformers', 'imports', 'rows_from_medians',
           'squad_step_commands', 'squad_step_rows', 'step_medians', 'model_table', 'goal_lines',
           'torch_amx_sentence']

MODEL_CONFIGS = ('squad_step', 'qa_inference')
TORCH = 'torch_transformers'
TORCH_BFLOAT16 = TORCH + '_bfloat16'
# our float32 row of each configuration, the reference of the bfloat16 rows
OURS_FLOAT32 = {'squad_step': 'ours', 'qa_inference': 'ours_exported'}
# The peers every whole-model row is compared with (ours in float32: one column for both
# configurations), and their table headings.
PEERS = ('ours', 'ours_exported', TORCH, TORCH_BFLOAT16, 'onnxruntime',
         'onnxruntime_hf_optimized', 'onnxruntime_hf_int8')
COLUMNS = (('ours', 'ours_exported'), (TORCH,), (TORCH_BFLOAT16,), ('onnxruntime',),
           ('onnxruntime_hf_optimized',), ('onnxruntime_hf_int8',))
PEER_TITLES = ('vs ours float32', 'vs torch + transformers', 'vs torch bfloat16 autocast',
               'vs ONNX Runtime', 'vs HF fused (ONNX Runtime)', 'vs HF INT8 (ONNX Runtime)')
# The ratios the bfloat16 work aims at (issue goals): (config, row, peer, at least).
GOALS = (('qa_inference', 'ours_exported_bfloat16', 'ours_exported', 2.0),
         ('qa_inference', 'ours_exported_bfloat16', TORCH_BFLOAT16, 1.0),
         ('qa_inference', 'ours_exported_bfloat16', 'onnxruntime_hf_int8', 1.5),
         ('squad_step', 'ours_bfloat16', 'ours', 2.0),
         ('squad_step', 'ours_bfloat16', TORCH_BFLOAT16, 1.0))


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


def squad_step_commands(step_script, threads, torch_python=None, batch_size=16,
                        seq_length=128, steps=8, warmup=2, model_dir=None):
    """{row: command line} of the ``squad_step`` rows that can run here: ``ours`` and
    ``ours_bfloat16`` (``--matmul-dtype bfloat16``) in this interpreter, ``torch_transformers``
    and ``torch_transformers_bfloat16`` (bfloat16 autocast) in ``torch_python`` (None: no torch
    rows); and the lines saying which rows are left out and why."""
    # the model folder is named: the peer interpreter does not have the model package
    common = ['--threads', str(threads), '--batch-size', str(batch_size), '--seq-length',
              str(seq_length), '--steps', str(steps), '--warmup', str(warmup),
              '--model-dir', str(model_dir or default_model_dir())]
    sides = [('ours', sys.executable, 'ours')] + (
        [(TORCH, torch_python, 'torch')] if torch_python else [])
    runs, skipped, problem = {}, [], bfloat16_problem()
    for name, python, impl in sides:
        for dtype, suffix in (('float32', ''), ('bfloat16', '_bfloat16')):
            if impl == 'ours' and dtype == 'bfloat16' and problem is not None:
                skipped.append('squad_step: no ours_bfloat16 row: ' + problem)
                continue
            runs[name + suffix] = [python, step_script, '--impl', impl, '--matmul-dtype',
                                   dtype] + common
    if not torch_python:
        skipped.append('squad_step: no {}, {} rows: no interpreter with torch and transformers '
                       '(make bench installs .venv-peer; benchmark.py --torch-python)'.format(
                           TORCH, TORCH_BFLOAT16))
    return runs, skipped


def squad_step_rows(step_script, threads, torch_python=None, rounds=3, batch_size=16,
                    seq_length=128, steps=8, warmup=2, model_dir=None):
    """Rows of the ``squad_step`` configuration (see the module docstring).

    ``step_script`` is the path of ``scripts/squad_step_speed.py``; ``torch_python`` an
    interpreter with torch and transformers (None: no torch rows). Each round runs every row's
    process once, the order rotating by one row each round. Prints one line per row left out.
    RuntimeError when a run fails.
    """
    runs, skipped = squad_step_commands(step_script, threads, torch_python, batch_size,
                                        seq_length, steps, warmup, model_dir)
    for line in skipped:
        print(line, flush=True)
    medians = step_medians(runs, rounds, threads, batch_size)
    return rows_from_medians('squad_step', (batch_size, seq_length), 'train', medians,
                             batch_size, 'features/s')


def step_medians(runs, rounds, threads, batch_size, label='squad_step'):
    """{name: median seconds of a step} of ``runs`` ({name: command line of
    ``scripts/squad_step_speed.py``}), every run once per round with ``threads`` OpenMP
    threads, the order rotating by one run each round; the median over rounds of each run's
    median step. RuntimeError (starting with ``label``) when a run fails."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    names = list(runs)
    times = {name: [] for name in names}
    for round_ in range(rounds):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            done = subprocess.run(runs[name], capture_output=True, text=True, env=env)
            if done.returncode:
                raise RuntimeError('{} {} failed: {}'.format(label, name, done.stderr[-500:]))
            speed = json.loads(done.stdout.strip().splitlines()[-1])['features_per_second']
            times[name].append(batch_size / speed)
    return {name: statistics.median(times[name]) for name in names}


def model_table(rows):
    """Markdown lines of the whole-model rows (empty when there are none)."""
    rows = [r for r in rows if r['config'] in MODEL_CONFIGS]
    if not rows:
        return []
    lines = ['', '| config | mode | implementation | median s | throughput | '
             + ' | '.join(PEER_TITLES) + ' | answers kept | F1 |',
             '|---|---|---|---:|---:|' + '---:|' * (len(COLUMNS) + 2)]
    for row in rows:
        cells = [row['config'], row['mode'], row['impl'], '%.3f' % row['median_s'],
                 '%.2f %s' % (row['throughput'], row['unit'])]
        for peers in COLUMNS:
            found = [row['ratio'][p] for p in peers if p in row['ratio']]
            cells.append('%.2fx' % found[0] if found else '-')
        kept, f1 = row.get('answers_kept'), row.get('f1')
        cells += ['-' if kept is None else '%.1f%%' % (100 * kept),
                  '-' if f1 is None else '%.2f' % f1]
        lines.append('| ' + ' | '.join(cells) + ' |')
    return lines


def _quality_goal(rows, row):
    """The qa_inference bfloat16 row's F1 and answers-kept goals, as a line (None: no F1)."""
    reference = next((r for r in rows if r['config'] == 'qa_inference'
                      and r['impl'] == OURS_FLOAT32['qa_inference']), None)
    if reference is None or row['f1'] is None or reference['f1'] is None:
        return None
    delta, kept = row['f1'] - reference['f1'], row['answers_kept']
    return ('goal: qa_inference {} F1 {:+.2f} from float32 (within 0.2), {:.1f}% of answers '
            'kept (>= 99%): {}'.format(row['impl'], delta, 100 * kept,
                                       'met' if abs(delta) <= 0.2 and kept >= 0.99
                                       else 'not met'))


def goal_lines(rows):
    """One line per goal of :data:`GOALS` whose two rows are in ``rows``: the ratio, the target
    and whether it is met; and the F1 / answers-kept goal of the qa_inference bfloat16 row
    where F1 was measured (a fine-tuned model). Empty when no goal's rows ran."""
    lines = []
    for config, impl, peer, target in GOALS:
        row = next((r for r in rows if r['config'] == config and r['impl'] == impl), None)
        if row is None or peer not in row['ratio']:
            continue
        ratio = row['ratio'][peer]
        lines.append('goal: {} {} vs {}: {:.2f}x (>= {}x): {}'.format(
            config, impl, peer, ratio, target, 'met' if ratio >= target else 'not met'))
        if peer == OURS_FLOAT32['qa_inference']:
            lines += [line for line in [_quality_goal(rows, row)] if line]
    return [''] + lines if lines else []


def torch_amx_sentence(info):
    """The benchmark header's sentence on the torch peer's AMX (its ready line's ``amx``, in
    ``info['torch_amx']``) for its bfloat16 autocast rows; '' when no torch ran
    (``info['torch']`` None)."""
    if not info.get('torch'):
        return ''
    said = {True: 'may use AMX tiles (granted)', False: 'runs without AMX tiles (not granted)',
            None: 'did not say whether it uses AMX'}[info.get('torch_amx')]
    return ' PyTorch {} {} for its bfloat16 autocast rows.'.format(info['torch'], said)
