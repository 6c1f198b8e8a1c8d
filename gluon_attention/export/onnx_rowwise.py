"""ONNX converters (opset 13) for the fused row-wise operators of
:mod:`gluon_attention.core.fused_rowwise`, exported as their composed equivalents:

- ``ga_add_layer_norm``: ``Add`` of the residual, then LayerNorm over the last axis from
  ``ReduceMean``, ``Sub``, ``Mul``, ``Sqrt``, ``Div`` (opset 13 has no LayerNormalization);
- ``ga_bias_gelu``: ``Add`` of the bias, then ``0.5 z (1 + Erf(z / sqrt(2)))``.
"""
import math

import numpy as onp

from ..core.fused import LIBRARY_OPS
from .onnx_ops import Emitter, register

__all__ = ['LAYER_NORM_OP', 'BIAS_GELU_OP', 'convert_add_layer_norm', 'convert_bias_gelu']

# the operators of core.fused_rowwise (named here from the library's list: a shorter import chain)
LAYER_NORM_OP, BIAS_GELU_OP = LIBRARY_OPS[1:]


@register(LAYER_NORM_OP)
def convert_add_layer_norm(node, square_by_pow=False, **kwargs):
    """data (+ residual), normalised over the last axis, times gamma, plus beta; the deviation
    squared as ``Mul(dev, dev)``, or ``Pow(dev, 2)`` with ``square_by_pow``."""
    e = Emitter(node, kwargs)
    dtype = e.dtypes[0]
    data, gamma, beta = e.inputs[:3]
    if int(e.attr('residual', 1)):
        data = e.op('Add', [data, e.inputs[3]])
    mean = e.op('ReduceMean', [data], axes=[-1], keepdims=1)
    dev = e.op('Sub', [data, mean])
    square = e.op('Pow', [dev, e.const(onp.array(2.0, dtype), dtype)]) if square_by_pow else \
        e.op('Mul', [dev, dev])
    var = e.op('ReduceMean', [square], axes=[-1], keepdims=1)
    eps = e.const(onp.array(float(e.attr('eps', 1e-5)), dtype), dtype)
    norm = e.op('Div', [dev, e.op('Sqrt', [e.op('Add', [var, eps])])])
    e.final('Add', [e.op('Mul', [norm, gamma]), beta])
    return e.result(dtype)


@register(BIAS_GELU_OP)
def convert_bias_gelu(node, **kwargs):
    """gelu(data + bias), the erf form."""
    e = Emitter(node, kwargs)
    dtype = e.dtypes[0]
    z = e.op('Add', e.inputs[:2])
    cdf = e.op('Add', [e.op('Erf', [e.op('Mul', [z, e.const(
        onp.array(1.0 / math.sqrt(2.0), dtype), dtype)])]), e.const(onp.array(1.0, dtype), dtype)])
    half = e.op('Mul', [z, e.const(onp.array(0.5, dtype), dtype)])
    e.final('Mul', [half, cdf])
    return e.result(dtype)
