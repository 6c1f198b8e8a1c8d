"""The ``bert_models_train`` rows of ``scripts/benchmark.py``: the SQuAD fine-tuning step at
BERT-base (12 x 768, 12 heads), B = 16, T = 128, against GluonNLP 0.10 and PyTorch.

One random 0.10 ``BERTModel`` at BERT-base, saved and converted
(:func:`jobs.bench.gluonnlp010.gluonnlp_bert`, in a process of its own), is the encoder of
every row: ``scripts/squad_step_speed.py --shape base --model-dir FOLDER`` with

* ``ours`` and ``ours_bfloat16``: ``--impl ours`` (``BertEncoder`` + the conditional head,
  ``qa_loss``, AdamW; the SQuAD job's step), float32 and ``--matmul-dtype bfloat16``;
* ``gluonnlp_0.10`` (the reference of the ratios): ``--impl gluonnlp``, 0.10's ``BERTModel`` +
  span classifier hybridized, BERTAdam (:mod:`jobs.bench.step_010`); 0.10's oneDNN fusion is
  for inference graphs and is not used in training;
* ``torch_transformers`` and ``torch_transformers_bfloat16``: ``--impl torch`` in the peer
  interpreter (``BertForQuestionAnswering``, AdamW), float32 and under bfloat16 autocast (left
  out without the peer interpreter).

Each run is a process (one warm-up step, then ``steps`` timed ones, its median), the runs
alternate (ours, ours_bfloat16, 0.10, torch, ...) for ``rounds`` rounds, time = the median over
rounds. Rows as :func:`jobs.bench.bert_models.rows_of` (mode 'train', features/s).
Glossary: B batch, T sequence length.
"""
import subprocess
import sys
import tempfile

from gluon_attention.core.matmul import bfloat16_problem

from .bert_models import MODELS, PLAIN, ROOT, rows_of
from .models import TORCH, step_medians

__all__ = ['CONFIG', 'IMPLS', 'write_model', 'train_runs', 'bert_train_rows']

CONFIG = 'bert_models_train'
IMPLS = ('ours', 'ours_bfloat16', PLAIN, TORCH, TORCH + '_bfloat16')


def write_model(folder, model_name=MODELS[0]):
    """The converted random 0.10 model of ``model_name`` (zoo size), written under ``folder``
    by ``python -m jobs.bench.gluonnlp010`` in a process of its own; returns its path.
    RuntimeError when that process fails."""
    done = subprocess.run([sys.executable, '-m', 'jobs.bench.gluonnlp010', folder, model_name],
                          cwd=ROOT, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError('writing the {} model failed: {}'.format(model_name,
                                                                    done.stderr[-800:]))
    return done.stdout.strip().splitlines()[-1]


def train_runs(step_script, model_dir, threads, torch_python=None, batch_size=16,
               seq_length=128, steps=3, warmup=1):
    """{impl: command line} of the rows that can run here (:data:`IMPLS` order) and the lines
    saying which are left out."""
    common = ['--shape', 'base', '--model-dir', model_dir, '--threads', str(threads),
              '--batch-size', str(batch_size), '--seq-length', str(seq_length), '--steps',
              str(steps), '--warmup', str(warmup)]
    bfloat16 = ['--matmul-dtype', 'bfloat16']
    ours = [sys.executable, step_script, '--impl', 'ours'] + common
    runs = {'ours': ours, 'ours_bfloat16': ours + bfloat16,
            PLAIN: [sys.executable, step_script, '--impl', 'gluonnlp'] + common}
    skipped = []
    if bfloat16_problem() is not None:
        del runs['ours_bfloat16']
        skipped.append('{}: no ours_bfloat16 row: {}'.format(CONFIG, bfloat16_problem()))
    if torch_python:
        runs[TORCH] = [torch_python, step_script, '--impl', 'torch'] + common
        runs[TORCH + '_bfloat16'] = runs[TORCH] + bfloat16
    else:
        skipped.append('{}: no {} rows: no interpreter with torch and transformers (make bench '
                       'installs .venv-peer; benchmark.py --torch-python)'.format(
                           CONFIG, ', '.join(IMPLS[3:])))
    return runs, skipped


def bert_train_rows(step_script, threads, torch_python=None, rounds=1, batch_size=16,
                    seq_length=128, steps=3, warmup=1, model_dir=None):
    """Rows of the ``bert_models_train`` configuration (see the module docstring).

    ``step_script``: the path of ``scripts/squad_step_speed.py``; ``torch_python``: an
    interpreter with torch and transformers, or None; ``model_dir``: the encoder folder (None:
    a random BERT-base is written in a temporary folder). Prints a line per row left out.
    RuntimeError when a run fails.
    """
    with tempfile.TemporaryDirectory(prefix='ga-bert-train') as folder:
        model_dir = model_dir or write_model(folder)
        runs, skipped = train_runs(step_script, model_dir, threads, torch_python, batch_size,
                                   seq_length, steps, warmup)
        for line in skipped:
            print(line, flush=True)
        medians = step_medians(runs, rounds, threads, batch_size, label=CONFIG)
    return rows_of(CONFIG, MODELS[0], (batch_size, seq_length), 'train', medians, batch_size,
                   'features/s')
