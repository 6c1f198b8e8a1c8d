"""Small inputs for SQuAD job tests: a tiny random BERT folder and a small training file.

The tiny encoder (1 layer, D=16, 2 heads) uses the real tokenizer files of the embedded
all-MiniLM-L6-v2, so features are the real ones, and trains in a fraction of a second per step.
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import mxnet as mx

from conftest import squad_file
from gluon_attention._resources import default_model_dir
from gluon_attention.models.checkpoint import write_checkpoint
from gluon_attention.models.encoder import BertEncoder
from gluon_attention.models.qa import ModelForQAConditional, QAInference
from jobs.squad.folder import save_model_folder

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / 'scripts' / 'run_squad.py'
TIMING_KEYS = ('train_seconds', 'train_features_per_second', 'eval_seconds')
#: The model folder and exported graph written at commit da7f4ab (see its README.md).
LEGACY = ROOT / 'tests' / 'fixtures' / 'legacy_da7f4ab'


def make_tiny_bert(folder, seed=0, num_layers=1):
    """Write a random ``num_layers``-layer BERT (vocabulary of the embedded tokenizer) with its
    tokenizer."""
    pretrained = default_model_dir()
    vocab = json.loads((pretrained / 'config.json').read_text())['vocab_size']
    mx.random.seed(seed)
    block = BertEncoder(vocab, units=16, hidden_size=32, num_layers=num_layers, num_heads=2,
                        max_length=256, dropout=0.0, attention_dropout=0.0)
    block.initialize(mx.init.Normal(0.5))
    write_checkpoint(block, folder)
    for name in ('vocab.txt', 'tokenizer.json'):
        shutil.copyfile(pretrained / name, Path(folder) / name)
    return str(folder)


def make_train_file(path, paragraphs=3):
    """A SQuAD 2.0 file with the first ``paragraphs`` paragraphs of two training articles of
    the CS224N file of the data folder: Steam_engine (training) and Huguenot (held out)."""
    raw = json.loads(squad_file('cs224n-16articles').read_text(encoding='utf-8'))
    keep = [dict(a, paragraphs=a['paragraphs'][:paragraphs]) for a in raw['data']
            if a['title'] in ('Steam_engine', 'Huguenot')]
    Path(path).write_text(json.dumps({'version': 'v2.0', 'data': keep}), encoding='utf-8')
    return str(path)


def tiny_args(model_dir, train_file):
    """train options for a run of a few seconds on the tiny encoder."""
    return ['--model-dir', str(model_dir), '--train-file', str(train_file),
            '--extra-train-file', '', '--exclude-titles', '', '--threshold-titles', 'Huguenot',
            '--max-steps', '3',
            '--checkpoint-every', '2', '--batch-size', '4', '--max-eval-examples', '12',
            '--max-seq-length', '64', '--eval-max-seq-length', '96', '--doc-stride', '24',
            '--max-query-length', '16', '--threads', '1', '--no-progress', '--seed', '5']


def script_module(name='run_squad'):
    """scripts/<name>.py loaded as a module, to call its functions in this process."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(name + '_script',
                                                  str(ROOT / 'scripts' / (name + '.py')))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_script(*args, timeout=300):
    """Run scripts/run_squad.py with ``args``; returns the CompletedProcess."""
    env = dict(os.environ, OMP_NUM_THREADS='1', PYTHONWARNINGS='ignore')
    return subprocess.run([sys.executable, str(SCRIPT)] + [str(a) for a in args],
                          capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT)


def copy_legacy(root):
    """Copy the legacy fixture's ``model/`` (with the pretrained package's tokenizer files, which
    it was trained with) and ``export/`` into ``root``; returns (model folder, graph prefix)."""
    shutil.copytree(LEGACY / 'model', root / 'model')
    for name in ('vocab.txt', 'tokenizer.json'):
        shutil.copyfile(default_model_dir() / name, root / 'model' / name)
    shutil.copytree(LEGACY / 'export', root / 'export')
    return root / 'model', root / 'export' / 'qa'


def read_json(path):
    return json.loads(Path(path).read_text(encoding='utf-8'))


def make_tiny_qa_folder(folder, encoder_dir, trained_titles=()):
    """A fine-tuned model folder of the tiny encoder: random heads, threshold 0.5, evaluation
    lengths 64 / 16."""
    mx.random.seed(1)
    model = ModelForQAConditional(BertEncoder.from_pretrained(encoder_dir), units=16)
    for head in (model.start_scores, model.end_scores, model.answerable_scores):
        head.initialize(mx.init.Normal(0.5))
    ids = mx.np.ones((1, 8), dtype='int32')            # a forward pass sizes the heads
    QAInference(model, 5, 5)(ids, mx.np.zeros_like(ids), mx.np.array([8], dtype='int32'),
                             mx.np.ones((1, 8)))
    return save_model_folder(model, str(folder), encoder_dir, dict(
        null_threshold=0.5, null_threshold_source='test', trained_titles=list(trained_titles),
        head_units=16, head_dropout=0.0, eval_max_seq_length=64, max_query_length=16,
        version_2_with_negative=True))
