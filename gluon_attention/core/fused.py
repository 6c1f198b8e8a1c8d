"""Fused multi-head attention: one C++ kernel (CPU, float32) instead of a chain of operators.

:func:`fused_dot_attn` computes the context of
:func:`~gluon_attention.functional.multi_head_dot_attn` with key-padding lengths, without ever
holding the (B, K, L_q, L_m) scores or weights: for each (batch, head) and block of 96 query
rows the scores stay in a per-thread buffer, the softmax runs over the valid keys only, and the
result is multiplied by the values; the backward pass recomputes each block's weights from the
saved log-sum-exp (the FlashAttention scheme, Dao et al. 2022, arXiv:2205.14135). The matrix
products use packed panels and an AVX2/FMA register tile.

The kernel is an MXNet 1.9.1 *custom operator library* (``mx.library.load``), operator
``ga_fused_attention``, compiled from ``gluon_attention/core/csrc/fused_attention.cc`` against the
headers shipped in the ``mxnet`` wheel by ``make venv`` (``python -m gluon_attention
fused-build``). Importing :mod:`gluon_attention` loads it when it has been built; :func:`available`
says whether it is. Graphs exported with it name that operator: load them after
``import gluon_attention`` (or ``mx.library.load(gluon_attention.fused.library_path())``).

Limits: CPU only, float32 only, no dropout on the weights, key-padding lengths only (no general
mask, no edge scores); weights and raw scores are not returned. Everything else uses the
composed path. Precision: the backward pass rebuilds the weights as exp(score - log-sum-exp),
so with scores of magnitude S the gradients carry a relative error of about S * 6e-8 (float32
rounding of the difference). Measured against the float64 oracle on random inputs: within
1e-5 at ordinary scales, 1.1e-5 with the inputs scaled x30 (scores around 1e3) and 2-4e-4 with
them scaled x1000; the composed path, which stores the weights, stays closer there.

Glossary: B batch, K heads, L_q query length, L_m memory length, C_k / C_v per-head sizes.
"""
import math
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import mxnet as mx

from .. import _checks
from .masking import get_F

__all__ = ['fused_dot_attn', 'available', 'library_path', 'build', 'load', 'load_error',
           'resolve']

OP_NAME = 'ga_fused_attention'
_SOURCE = pathlib.Path(__file__).parent / 'csrc' / 'fused_attention.cc'
_STATE = {'loaded': False, 'error': None}


def library_path():
    """Where the compiled kernel library lives (inside the package, next to its source)."""
    return pathlib.Path(__file__).parent / '_lib' / 'libga_fused_attention.so'


def _mxnet_dirs():
    root = pathlib.Path(mx.__file__).parent
    return root / 'include', root / 'src' / 'lib_api.cc'


def build(compiler=None, force=False, quiet=False):
    """Compile the kernel library (a few tens of seconds); returns its path.

    The build writes to a temporary file and renames it into place, so an interrupted build
    never leaves a broken library behind.

    Raises
    ------
    FileNotFoundError
        No C++ compiler (``$CXX``, ``g++`` or ``c++``) or no MXNet headers.
    RuntimeError
        The compiler failed (its output is in the message).
    """
    target = library_path()
    if target.exists() and not force and target.stat().st_mtime >= _SOURCE.stat().st_mtime:
        return target
    compiler = compiler or os.environ.get('CXX') or shutil.which('g++') or shutil.which('c++')
    if not compiler:
        raise FileNotFoundError('building the fused attention kernel needs a C++ compiler '
                                '(g++ or $CXX); none was found on PATH')
    include, lib_api = _mxnet_dirs()
    if not (include / 'mxnet' / 'lib_api.h').exists() or not lib_api.exists():
        raise FileNotFoundError('the mxnet package has no lib_api.h / lib_api.cc under {}'
                                .format(include.parent))
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix='.so', dir=str(target.parent))
    os.close(fd)
    cmd = [compiler, '-shared', '-fPIC', '-O3', '-mavx2', '-mfma', '-std=c++17', '-pthread',
           '-I', str(include), str(_SOURCE), str(lib_api), '-o', tmp]
    if not quiet:
        print('building', target.name, '...', file=sys.stderr)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except OSError as err:                  # the compiler cannot be run at all
        os.unlink(tmp)
        raise FileNotFoundError('cannot run the C++ compiler {!r}: {}'.format(compiler, err)) \
            from None
    if proc.returncode:
        os.unlink(tmp)
        raise RuntimeError('building the fused attention kernel failed:\n{}\n{}'.format(
            ' '.join(cmd), proc.stderr[-4000:]))
    os.replace(tmp, target)
    return target


def _cpu_has_avx2():
    try:
        flags = pathlib.Path('/proc/cpuinfo').read_text()
    except OSError:
        return True
    return ' avx2' in flags and ' fma' in flags


def load():
    """Load the kernel library into MXNet once; returns True when the operator is usable.

    Never raises: when the library is missing (not built) or cannot be loaded, returns False
    and :func:`load_error` says why.
    """
    if _STATE['loaded']:
        return True
    path = library_path()
    if not path.exists():
        _STATE['error'] = ('the fused attention kernel is not built: run `make venv` or '
                           '`python -m gluon_attention fused-build`')
        return False
    if not _cpu_has_avx2():
        _STATE['error'] = 'the fused attention kernel needs a CPU with AVX2 and FMA'
        return False
    try:
        mx.library.load(str(path), verbose=False)
    except mx.base.MXNetError as err:
        _STATE['error'] = 'loading {} failed: {}'.format(path, str(err).splitlines()[0])
        return False
    _STATE['loaded'], _STATE['error'] = True, None
    return True


def load_error():
    """Why :func:`load` returned False (None when the kernel is loaded)."""
    return _STATE['error']


def available():
    """Whether :func:`fused_dot_attn` can run here (library built and loadable)."""
    return load()


def resolve(option, attention_dropout=0.0, ctx=None):
    """A ``fused_attention`` option (True, False or 'auto') -> bool.

    'auto' is True when the kernel is available, ``attention_dropout`` is 0 and ``ctx`` (a
    Context or a list of them; default the current context) is a CPU.
    """
    if isinstance(option, str) and option == 'auto':
        if ctx is None:
            ctx = mx.context.current_context()
        contexts = ctx if isinstance(ctx, (list, tuple)) else [ctx]
        return (not attention_dropout and all(c.device_type == 'cpu' for c in contexts)
                and available())
    return _checks.check_bool('fused_attention', option)


def fused_dot_attn(query, key, value, valid_length=None, scaled=True, query_head_units=None,
                   layout='NKT'):
    """Multi-head scaled dot-product attention in one fused kernel; returns the context only.

    The same numbers as ``multi_head_dot_attn(query, key, value, valid_length=valid_length,
    scaled=scaled, query_head_units=query_head_units, layout=layout)[0]`` (forward and
    gradients of query, key and value, within float32 rounding), without materialising the
    (B, K, L_q, L_m) scores or weights: memory O(B*K*L*C) plus a per-thread block buffer.

    Parameters
    ----------
    query : float32 (B, K, L_q, C_k) ``NKT`` | (B, L_q, K, C_k) ``NTK`` | (L_q, B, K, C_k) ``TNK``
    key : float32 (B, K, L_m, C_k) | (B, L_m, K, C_k) | (L_m, B, K, C_k)
    value : float32 (B, K, L_m, C_v) | (B, L_m, K, C_v) | (L_m, B, K, C_v)
    valid_length : integer (or integral float) array (B,) or (B, L_q), or None
        Query row i of sequence b attends memory positions j < valid_length[b] (or
        valid_length[b, i]); keys past it are never read. A length of 0 gives a zero context
        row with zero gradients. None: every key.
    scaled : bool
        Multiply the scores by 1/sqrt(``query_head_units``) (default: the query's C_k).
    query_head_units : int or None
        C_k for the scale; needed inside a graph only if C_k is not the query's last dimension.
    layout : {'NKT', 'NTK', 'TNK'}

    Returns
    -------
    context : float32 (B, L_q, K*C_v) for NKT/NTK, (L_q, B, K*C_v) for TNK; merged head-major.

    Raises
    ------
    RuntimeError
        The kernel library is not built or not loadable (:func:`available` is False).
    TypeError
        An input that is not an ``mx.np`` float32 array, a non-bool ``scaled``.
    ValueError
        Bad layout, mismatched shapes, a ``valid_length`` of the wrong shape or outside
        [0, L_m], a non-positive ``query_head_units`` or C_k, or a non-CPU context
        (imperatively, before the kernel runs).
    """
    from .functional import _check_multi_head  # pylint: disable=import-outside-toplevel
    if not load():
        raise RuntimeError(load_error())
    _check_multi_head(query, key, value, None, None, layout, valid_length)
    _checks.check_bool('scaled', scaled)
    _checks.check_positive_int('query_head_units', query_head_units, allow_none=True)
    if not _checks.is_symbol(query):
        for name, x in (('query', query), ('key', key), ('value', value)):
            if not isinstance(x, mx.np.ndarray):
                _checks.fail_type('{} must be an mx.np array (use .as_np_ndarray() on a legacy '
                                  'mx.nd array)'.format(name), **{name: type(x).__name__})
            if x.dtype != 'float32':
                _checks.fail_type('{} must be float32 for the fused kernel (use '
                                  'multi_head_dot_attn for other dtypes)'.format(name),
                                  **{name + '.dtype': str(x.dtype.__name__ if isinstance(
                                      x.dtype, type) else x.dtype)})
            if x.ctx.device_type != 'cpu':
                _checks.fail('the fused kernel runs on CPU only (use multi_head_dot_attn on '
                             'GPU)', **{name + '.ctx': x.ctx})
        if query_head_units is None:
            query_head_units = query.shape[-1]
    if scaled and query_head_units is None:
        _checks.fail('inside a graph, fused_dot_attn needs query_head_units for the scale',
                     query_head_units=None)
    if scaled and not query_head_units > 0:
        _checks.fail('the scale 1/sqrt(C_k) needs C_k > 0 (the query\'s last dimension or '
                     'query_head_units)', query_head_units=query_head_units)
    scale = 1.0 / math.sqrt(query_head_units) if scaled else 1.0
    F = get_F(query)
    inputs = [query.as_nd_ndarray(), key.as_nd_ndarray(), value.as_nd_ndarray()]
    if valid_length is not None:          # (B,) or (B, L_q), read by the kernel as float32
        inputs.append(valid_length.astype('float32').as_nd_ndarray())
    out = getattr(F, OP_NAME)(*inputs, layout=layout, scale=repr(float(scale)),
                              with_length=int(valid_length is not None))
    return out[0].as_np_ndarray()

