"""The documented reload path (gluon_attention.export.load) in fresh processes: the README's
quickstart runs as written without a warning, and a graph with the fused kernel reloads in a
process that imported nothing of the library but the export module."""
import os
import re
import subprocess
import sys
from pathlib import Path

import mxnet as mx
import numpy as onp
import pytest

from gluon_attention.core import fused
from gluon_attention.export import export_block
from gluon_attention.models.encoder import BertEncoder

ROOT = Path(__file__).resolve().parents[2]


def readme_block(heading):
    """The first ```python block after the README line ``heading``."""
    text = (ROOT / 'README.md').read_text(encoding='utf-8')
    after = text[text.index('\n' + heading + '\n'):]
    return re.search(r'```python\n(.*?)```', after, re.S).group(1)


def run_fresh(code, cwd):
    """Run ``code`` in a fresh interpreter with Python's default warning filters."""
    env = {k: v for k, v in os.environ.items() if k != 'PYTHONWARNINGS'}
    env.update(OMP_NUM_THREADS='1', PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=120)


def test_readme_quickstart_runs_and_reloads_without_a_warning(tmp_path):
    code = readme_block('## Quickstart')
    assert 'export.load(' in code and 'SymbolBlock.imports' not in code
    proc = run_fresh(code, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ''
    assert proc.stdout.splitlines()[-1] == '0.0'      # the reloaded context equals the original
    # the control: the bare SymbolBlock.imports of the same files does warn
    bare = run_fresh("import mxnet as mx\nmx.npx.set_np()\nmx.gluon.SymbolBlock.imports("
                     "'mha-symbol.json', ['data0', 'data1', 'data2', 'data3'], "
                     "'mha-0000.params')", tmp_path)
    assert 'Cannot decide type for the following arguments' in bare.stderr


#: Packages the README quickstart must run without (it claims mxnet, numpy and the package only).
#: (MXNet imports onnx when it is installed and goes on without it.)
OPTIONAL_PACKAGES = ('tokenizers', 'safetensors', 'tqdm', 'matplotlib', 'onnx', 'onnxruntime',
                     'gluonnlp', 'mms', 'model_archiver', 'torch', 'transformers')

BLOCKER = """import sys
class _Blocked:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in {blocked!r}:
            raise ImportError('blocked optional package: ' + name)
sys.meta_path.insert(0, _Blocked())
"""


def test_readme_quickstart_needs_no_optional_package(tmp_path):
    code = BLOCKER.format(blocked=set(OPTIONAL_PACKAGES)) + readme_block('## Quickstart')
    proc = run_fresh(code, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == '0.0'
    # the control: the blocker does block
    proc = run_fresh(BLOCKER.format(blocked={'tokenizers'}) + 'import tokenizers', tmp_path)
    assert 'blocked optional package: tokenizers' in proc.stderr


@pytest.mark.skipif(not fused.available(), reason='the fused kernel library is not built')
def test_fused_graph_loads_in_a_fresh_process_with_its_operators_and_no_warning(tmp_path):
    encoder = BertEncoder(50, units=16, hidden_size=24, num_layers=1, num_heads=2, max_length=32,
                          dropout=0.0, attention_dropout=0.0)
    encoder.initialize(mx.init.Normal(0.3))
    encoder.hybridize()
    ids = onp.array([[1, 5, 7, 9, 2, 0, 0], [3, 4, 8, 2, 11, 13, 6]], 'int32')
    inputs = [ids, onp.zeros_like(ids), onp.array([5, 7], 'int32')]
    want = encoder(*[mx.np.array(x, dtype='int32') for x in inputs])[0].asnumpy()
    prefix = str(tmp_path / 'enc')
    export_block(encoder, prefix, ['input_ids', 'token_types', 'valid_length'], ['int32'] * 3)
    assert '"ga_fused_attention"' in Path(prefix + '-symbol.json').read_text()
    onp.savez(tmp_path / 'inputs.npz', *inputs, want=want)
    proc = run_fresh(
        "import mxnet as mx, numpy as onp\n"
        "from gluon_attention.export import load\n"
        "block = load({!r})\n"
        "z = onp.load('inputs.npz')\n"
        "out = block(*[mx.np.array(z['arr_%d' % i], dtype='int32') for i in range(3)])[0]\n"
        "print(float(onp.abs(out.asnumpy() - z['want']).max()))".format(prefix), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == '' and float(proc.stdout) == 0.0
