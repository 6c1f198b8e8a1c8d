"""Loading the fused kernel library (:mod:`gluon_attention.core.fused`) into MXNet, once per
process, and what the loaded library says about this CPU: whether the fused kernels can run
(:func:`available`, :func:`runs_on`), on which instruction set (:func:`isa`), and the refusal
of arrays off the CPU (:func:`refuse_off_cpu`). Imports nothing of the package but the checks.
"""
import ctypes
import os

import mxnet as mx

from .. import _checks
from .fused_build import library_path

__all__ = ['OP_NAME', 'LIBRARY_OPS', 'ISA_ENV', 'load', 'isa', 'cpu_features', 'load_error',
           'available', 'runs_on', 'refuse_off_cpu', 'amx_problem', 'bf16_convert_isa']

OP_NAME = 'ga_fused_attention'
# Every operator of the library a graph may name (the row-wise ones: fused_rowwise; not the
# AdamW update of fused_adamw, which runs outside graphs); a graph
# naming any of them needs the library loaded before it is read.
LIBRARY_OPS = (OP_NAME, 'ga_add_layer_norm', 'ga_bias_gelu')
ISA_ENV = 'GA_FUSED_ISA'
_ISA_CHOICES = ('auto', 'avx512', 'avx2')
_STATE = {'loaded': False, 'error': None}


def _query(path):
    """(kernels chosen, CPU instruction sets) from the library, through ctypes."""
    lib = ctypes.CDLL(str(path))
    for name in ('ga_fused_isa', 'ga_fused_cpu_features'):
        getattr(lib, name).restype = ctypes.c_char_p
    return lib.ga_fused_isa().decode(), lib.ga_fused_cpu_features().decode()


def _isa_problem(chosen, features):
    """Why the kernels cannot run here (None when they can)."""
    wanted = os.environ.get(ISA_ENV, '') or 'auto'
    if wanted not in _ISA_CHOICES:
        return '{} must be one of {}. Received: {}={!r}'.format(
            ISA_ENV, ', '.join(_ISA_CHOICES), ISA_ENV, wanted)
    if not chosen:
        return ('the fused attention kernel needs a CPU with AVX2 and FMA{} (this one has: {}). '
                'Received: {}={}'.format(', and AVX-512 F/BW/DQ/VL for avx512'
                                         if wanted == 'avx512' else '',
                                         features or 'none of them', ISA_ENV, wanted))
    return None


def load():
    """Load the kernel library into MXNet once; returns True when the operator is usable.

    The instruction set is chosen here, once per process: AVX-512 where the CPU has it, else
    AVX2/FMA; ``GA_FUSED_ISA=avx2`` (or ``avx512``) forces one. Never raises: when the library
    is missing (not built) or cannot be loaded, returns False and :func:`load_error` says why.
    """
    if _STATE['loaded']:
        return True
    path = library_path()
    if not path.exists():
        _STATE['error'] = ('the fused attention kernel is not built: run `make venv` or '
                           '`python -m gluon_attention fused-build`')
        return False
    try:
        chosen, features = _query(path)
    except (OSError, AttributeError) as err:
        _STATE['error'] = 'loading {} failed: {}'.format(path, err)
        return False
    problem = _isa_problem(chosen, features)
    if problem:
        _STATE['error'] = problem
        return False
    try:
        mx.library.load(str(path), verbose=False)
    except mx.base.MXNetError as err:
        _STATE['error'] = 'loading {} failed: {}'.format(path, str(err).splitlines()[0])
        return False
    _STATE.update(loaded=True, error=None, isa=chosen, features=features)
    return True


def isa():
    """The instruction set the kernel runs on: ``'avx512'`` or ``'avx2'`` (None when it is not
    loadable, see :func:`load_error`). Chosen once per process, when the library is loaded."""
    return _STATE['isa'] if load() else None


def cpu_features():
    """The instruction sets relevant to the kernel that this CPU has (avx2, fma, avx512f, ...,
    amx-tile), as the loaded library found them; None when it is not loadable."""
    return _STATE['features'] if load() else None


def amx_problem():
    """Why the fused kernel's bfloat16 forward pass (``matmul_dtype='bfloat16'``) cannot run on
    AMX tiles in this process, one sentence; None when it can. It needs the AVX-512 kernels
    (not ``GA_FUSED_ISA=avx2``), a CPU with AMX-TILE, AMX-BF16 and AVX512-BF16, ``GA_AMX`` not
    0 and Linux's tile permission for this process (asked for by
    :func:`gluon_attention.hardware.setup` at import). Asked of the loaded library at every
    call (the permission may come later); where it is not None the operator runs its float32
    forward pass instead."""
    if not load():
        return load_error()
    lib = ctypes.CDLL(str(library_path()))
    lib.ga_fused_amx_problem.restype = ctypes.c_char_p
    return lib.ga_fused_amx_problem().decode() or None


def bf16_convert_isa():
    """The instruction set of the fused operators' bfloat16 conversions: ``'avx512bf16'`` (its
    rounding instruction, where the AVX-512 kernels run on a CPU with AVX512-BF16),
    ``'avx512'`` or ``'avx2'`` (a vectorised integer rounding, to nearest even alike); None when
    the library is not loadable."""
    if not load():
        return None
    lib = ctypes.CDLL(str(library_path()))
    lib.ga_bf16_convert_isa.restype = ctypes.c_char_p
    return lib.ga_bf16_convert_isa().decode() or None


def load_error():
    """Why :func:`load` returned False (None when the kernel is loaded)."""
    return _STATE['error']


def available():
    """Whether the fused kernel can run here (library built and loadable)."""
    return load()


def runs_on(ctx=None):
    """Whether the fused kernels can run for ``ctx`` (a Context or a list of them; default the
    current context): the library is loadable and every context is a CPU."""
    if ctx is None:
        ctx = mx.context.current_context()
    contexts = ctx if isinstance(ctx, (list, tuple)) else [ctx]
    return all(c.device_type == 'cpu' for c in contexts) and available()


def refuse_off_cpu(what, alternative, **arrays):
    """ValueError '<what> runs on CPU only: <alternative>' when one of the named ``arrays`` is
    an array on another device (symbols and None pass)."""
    for name, x in arrays.items():
        if isinstance(x, mx.nd.NDArray) and x.ctx.device_type != 'cpu':
            _checks.fail('{} runs on CPU only: {}'.format(what, alternative),
                         **{name + '.ctx': x.ctx})
