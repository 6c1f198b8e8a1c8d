"""The installed package metadata: MXNet is never an unconditional requirement (the CPU wheel and
the CUDA wheels are different distributions, so requiring ``mxnet`` would install the CPU wheel over
a CUDA one); plotting and ONNX are extras; requirements are ranges, and constraints.txt pins a
version inside every range."""
import importlib.metadata
import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

CONSTRAINTS = Path(__file__).resolve().parents[2] / 'constraints.txt'


@pytest.fixture(scope='module')
def requirements():
    try:
        return [Requirement(r) for r in importlib.metadata.requires('gluon_attention') or []]
    except importlib.metadata.PackageNotFoundError:
        pytest.skip('gluon_attention is not installed (pip install -e .)')


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


def test_plots_and_onnx_are_extras(requirements):
    unconditional = _names(requirements)
    assert _names(requirements, 'plots') == {'matplotlib'}
    assert _names(requirements, 'onnx') == {'onnx', 'onnxruntime', 'protobuf', 'sympy',
                                            'ml-dtypes'}
    assert not unconditional & {'matplotlib', 'onnx', 'onnxruntime', 'protobuf'}
    assert {'numpy', 'tokenizers', 'safetensors', 'tqdm'} <= unconditional


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
