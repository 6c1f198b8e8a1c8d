"""``import gluon_attention`` imports no optional dependency, and the library's modules import no
command-line, progress-bar, plotting or serving package.

The extras (setup.py) are imported where they are used: ``tokenizers`` when a tokenizer is
loaded, ``safetensors`` when a checkpoint is read or written, ``onnx``/``onnxruntime`` by the
ONNX modules of :mod:`gluon_attention.export` and :mod:`gluon_attention.pipelines.onnx`. The test
runs a fresh interpreter whose import system refuses them, imports the library and runs an
attention block (against a float64 NumPy oracle) and an encoder.
"""
import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OPTIONAL = ('tokenizers', 'safetensors', 'tqdm', 'onnx', 'onnxruntime', 'matplotlib', 'mms',
            'model_archiver')
#: Never imported by the library (its ``python -m`` entry points aside): the command lines,
#: progress bars, plots and the server belong to the jobs and scripts.
JOB_ONLY = ('argparse', 'tqdm', 'matplotlib', 'mms', 'model_archiver')

PROGRAM = '''
import importlib.abc, sys
BLOCKED = {blocked!r}

class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split('.')[0] in BLOCKED:
            raise ImportError('optional dependency imported: ' + name)

sys.meta_path.insert(0, Refuse())
import mxnet as mx
import numpy as onp
import gluon_attention as ga
import gluon_attention.export, gluon_attention.pipelines  # noqa: E401
mx.npx.set_np()
rng = onp.random.RandomState(0)
q, k, v = rng.randn(2, 3, 4), rng.randn(2, 5, 4), rng.randn(2, 5, 6)
lengths = onp.array([5, 2])
context, _ = ga.DotProductAttention()(*(mx.np.array(x, dtype='float32') for x in (q, k, v)),
                                      mx.np.array(lengths, dtype='int32'))
scores = q @ k.transpose(0, 2, 1) / 2.0
scores = onp.where(onp.arange(5)[None, None, :] < lengths[:, None, None], scores, -onp.inf)
weights = onp.exp(scores - scores.max(-1, keepdims=True))
weights /= weights.sum(-1, keepdims=True)
assert onp.allclose(context.asnumpy(), weights @ v, rtol=1e-5, atol=1e-5)
encoder = ga.TransformerEncoder(2, 8, 16, 2, dropout=0.0, attention_dropout=0.0)
encoder.initialize()
out = encoder(mx.np.array(rng.randn(2, 7, 8), dtype='float32'),
              mx.np.array([7, 3], dtype='int32')).asnumpy()
assert out.shape == (2, 7, 8) and onp.isfinite(out).all()
print(sorted(m for m in sys.modules if m.split('.')[0] in BLOCKED))
'''


def test_import_and_forward_without_the_optional_dependencies():
    done = subprocess.run([sys.executable, '-c', PROGRAM.format(blocked=OPTIONAL)],
                          capture_output=True, text=True, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == '[]'


def imported_packages(source):
    """Top-level names of every package ``source`` imports (late imports included)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name.split('.')[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split('.')[0])
    return found


def test_the_library_imports_no_command_line_progress_bar_plot_or_server_package():
    assert imported_packages('import argparse.x\ndef f():\n    from tqdm import tqdm\n'
                             'from . import mms\n') == {'argparse', 'tqdm'}
    bad = {str(path.relative_to(ROOT)): sorted(imported_packages(path.read_text()) & set(JOB_ONLY))
           for path in (ROOT / 'gluon_attention').rglob('*.py') if path.name != '__main__.py'}
    assert not {k: v for k, v in bad.items() if v}
