"""Shared test configuration: tolerances, seeds, hybridize modes, markers, the data folder.

Every tolerance and seed used by the suite lives here, so a change of numerical
policy is one edit. ``GA_FULL_TESTS=1`` enlarges the shape sweeps.

Tests read the data folder the jobs read (``GA_DATA_DIR``, else ``../shared/data`` from the
repository root; see docs/data.md) through :func:`data_dir`, :func:`squad_file` and
:func:`data_file`: a test that needs a file fails, naming the path, when it is missing.
"""
import os
import sys

os.environ.setdefault('OMP_NUM_THREADS', '1')
# The jobs (jobs/ at the repository root, not part of the installed package) import from the root,
# here and in the processes the tests start (tests/tasks/dist_job.py, the scripts, ...).
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
os.environ['PYTHONPATH'] = os.pathsep.join(
    [ROOT] + [p for p in os.environ.get('PYTHONPATH', '').split(os.pathsep) if p and p != ROOT])

import mxnet as mx  # noqa: E402
import numpy as onp  # noqa: E402
import pytest  # noqa: E402
from mxnet import npx  # noqa: E402

npx.set_np()

# Tolerances: float32 against the float64 oracle, float16 against float32 / the oracle,
# hybridized against imperative (same float32 kernels, so tighter).
RTOL = {'float32': 1e-5, 'float16': 1e-2, 'float64': 1e-10}
ATOL = {'float32': 1e-5, 'float16': 1e-2, 'float64': 1e-10}
HYBRID_TOL = 1e-6
PEER_TOL = 1e-5
SEED = 1234
FULL = os.environ.get('GA_FULL_TESTS', '0') == '1'
HYBRID_MODES = ('imperative', 'hybridize', 'static')


def data_dir():
    """The data folder of the tests: the jobs' default (``GA_DATA_DIR``, else ``../shared/data``
    from the repository root)."""
    from gluon_attention._resources import data_folder
    return data_folder()[0]


def squad_file(name):
    """Path of a named SQuAD file of the data folder (``squad.SQUAD_FILES``); a missing file
    raises the jobs' one-line ValueError, which fails the test."""
    from gluon_attention.data import squad
    return squad.default_data_path(name, data_dir())


def data_file(relative):
    """Path of ``relative`` inside the data folder; the test fails when it is missing."""
    path = data_dir() / relative
    if not path.exists():
        pytest.fail('data file not found: {} (set GA_DATA_DIR to the data folder; see '
                    'docs/data.md)'.format(path), pytrace=False)
    return path


def pytest_configure(config):
    config.addinivalue_line('markers', 'slow: long-running test (run with GA_FULL_TESTS=1)')
    config.addinivalue_line('markers', 'gpu: needs a GPU context')


def pytest_collection_modifyitems(config, items):
    if FULL:
        return
    skip = pytest.mark.skip(reason='slow: set GA_FULL_TESTS=1')
    for item in items:
        if 'slow' in item.keywords:
            item.add_marker(skip)


def num_gpus():
    try:
        return mx.context.num_gpus()
    except Exception:  # pragma: no cover - CPU wheel without CUDA
        return 0


requires_gpu = pytest.mark.skipif(num_gpus() == 0, reason='no GPU available')


@pytest.fixture(autouse=True)
def _seed():
    """Deterministic NumPy and MXNet random streams for every test."""
    onp.random.seed(SEED)
    mx.random.seed(SEED)
    yield


@pytest.fixture
def rng():
    return onp.random.RandomState(SEED)


def hybridize_mode(block, mode):
    """Put ``block`` in one of HYBRID_MODES and return it."""
    if mode == 'hybridize':
        block.hybridize()
    elif mode == 'static':
        block.hybridize(static_alloc=True, static_shape=True)
    elif mode != 'imperative':
        raise ValueError(mode)
    return block


@pytest.fixture(params=HYBRID_MODES)
def hybrid_mode(request):
    """Each block test runs imperative, hybridize() and hybridize(static_alloc, static_shape)."""
    return request.param


def tol(dtype='float32'):
    """keyword tolerances for numpy.testing.assert_allclose."""
    return dict(rtol=RTOL[str(dtype)], atol=ATOL[str(dtype)])


def sweep(small, full):
    """The list of cases for a shape sweep: ``full`` under GA_FULL_TESTS=1."""
    return list(full) if FULL else list(small)
