"""Documented path of the fused attention kernel: :mod:`gluon_attention.core.fused`.

Exported ``-inputs.json`` files name ``gluon_attention.fused.library_path()``; this module keeps
that path (and ``available()``) working.
"""
from .core.fused import (OP_NAME, available, build, fused_dot_attn, library_path,  # noqa: F401
                         load, load_error, resolve, isa, cpu_features)
