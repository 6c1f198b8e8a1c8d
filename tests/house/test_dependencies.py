"""The package metadata of setup.py: NumPy is the one unconditional requirement (MXNet is not one:
the CPU wheel and the CUDA wheels are different distributions, so requiring ``mxnet`` would install
the CPU wheel over a CUDA one); Hugging Face files, plotting, ONNX, serving and the jobs are
extras; requirements are ranges, and constraints.txt pins a version inside every range."""
import ast
import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
CONSTRAINTS = ROOT / 'constraints.txt'


@pytest.fixture(scope='module')
def requirements():
    """The requirements setup.py declares, extras marked as pip's metadata marks them."""
    call = next(node for node in ast.walk(ast.parse((ROOT / 'setup.py').read_text()))
                if isinstance(node, ast.Call) and getattr(node.func, 'id', '') == 'setup')
    keywords = {k.arg: ast.literal_eval(k.value) for k in call.keywords
                if k.arg in ('install_requires', 'extras_require')}
    return [Requirement(r) for r in keywords['install_requires']] + [
        Requirement('{}; extra == "{}"'.format(r, extra))
        for extra, names in keywords['extras_require'].items() for r in names]


def _names(requirements, extra=None):
    """Canonical names required unconditionally (``extra=None``) or by ``extra``."""
    env = {'extra': extra or ''}
    return {canonicalize_name(r.name) for r in requirements
            if (r.marker is None) == (extra is None) and (r.marker is None or r.marker.evaluate(env))}


def _pins():
    pins = {}
    for line in CONSTRAINTS.read_text().splitlines():
        match = re.fullmatch(r'([A-Za-z0-9_.\-]+)==(\S+)', line.split('#')[0].strip())
        if match:
            pins[canonicalize_name(match.group(1))] = match.group(2)
    return pins


def test_mxnet_only_through_the_cpu_extra(requirements):
    assert not {n for n in _names(requirements) if n.startswith('mxnet')}
    assert _names(requirements, 'cpu') == {'mxnet'}


def test_numpy_is_the_one_requirement_and_the_rest_are_extras(requirements):
    assert _names(requirements) == {'numpy'}
    assert _names(requirements, 'hf') == {'tokenizers', 'safetensors'}
    assert _names(requirements, 'plots') == {'matplotlib'}
    assert _names(requirements, 'onnx') == {'onnx', 'onnxruntime', 'protobuf', 'sympy',
                                            'ml-dtypes'}
    assert _names(requirements, 'serve') == {'multi-model-server', 'model-archiver'}
    assert {'tqdm', 'tokenizers', 'safetensors', 'matplotlib'} <= _names(requirements, 'jobs')


def test_make_venv_installs_the_extras_of_the_jobs_and_tests():
    line = next(x for x in (ROOT / 'Makefile').read_text().splitlines() if "-e '.[" in x)
    extras = set(re.search(r"-e '\.\[([^\]]+)\]'", line).group(1).split(','))
    assert {'test', 'jobs', 'hf', 'plots', 'onnx', 'serve'} <= extras


def test_unconditional_requirements_are_ranges(requirements):
    pinned = [str(r) for r in requirements if r.marker is None
              and any(s.operator in ('==', '===') for s in r.specifier)]
    assert not pinned, 'exact pins belong in constraints.txt: {}'.format(pinned)


def test_constraints_pin_every_requirement_inside_its_range(requirements):
    pins = _pins()
    for tool in ('pip', 'setuptools', 'wheel', 'cython'):
        assert tool in pins, tool
    for r in requirements:
        name = canonicalize_name(r.name)
        assert name in pins, '{} is not pinned in constraints.txt'.format(r.name)
        assert r.specifier.contains(pins[name], prereleases=True), (str(r), pins[name])


def _extras():
    call = next(node for node in ast.walk(ast.parse((ROOT / 'setup.py').read_text()))
                if isinstance(node, ast.Call) and getattr(node.func, 'id', '') == 'setup')
    return set(next(ast.literal_eval(k.value) for k in call.keywords
                    if k.arg == 'extras_require'))


def test_readme_and_usage_list_the_extras_setup_py_has():
    readme = (ROOT / 'README.md').read_text()
    paragraph = readme.split('<!-- EXTRAS')[1].split('\n\n')[0]
    assert set(re.findall(r'`\[(\w+)\]`', paragraph)) == _extras()
    assert '`pip install -e .` alone brings numpy only' in paragraph
    usage = (ROOT / 'docs' / 'usage.md').read_text()
    assert set(re.findall(r'`\[(\w+)\]`', usage)) == _extras()
    assert '-e .  # the package and numpy only' in usage
