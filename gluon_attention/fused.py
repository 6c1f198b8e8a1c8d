"""Documented path of the fused attention kernel: :mod:`gluon_attention.core.fused`.

Exported ``-inputs.json`` files name ``gluon_attention.fused.library_path()``; this module keeps
that path (and ``available()``) working.
"""
from ._deprecated import module_getattr
from .core import fused as _fused
from .core.fused import (OP_NAME, available, build, library_path, load, load_error, isa,
                         cpu_features, amx_problem)

__all__ = ['OP_NAME', 'available', 'build', 'library_path', 'load', 'load_error', 'isa',
           'cpu_features', 'amx_problem']

__getattr__ = module_getattr(__name__, {
    'fused_dot_attn': ("gluon_attention.attention(..., backend='fused')",
                       lambda: _fused._fused_dot_attn),  # pylint: disable=protected-access
    'resolve': ("Kernels(attention=...).resolve(ctx, attention_dropout).attention == 'fused'",
                lambda: _fused._resolve)})  # pylint: disable=protected-access
