"""ONNX converters (opset 13) for attention: length-masked softmax and the fused kernel.

- ``ga_fused_attention`` (the fused kernel's custom operator, which no exporter knows) is
  registered with MXNet's exporter and exported as its composed equivalent: batch_dot, length
  masking, softmax, batch_dot; padded value rows are zeroed first, so NaN there never reaches
  the context, as in the kernel.
- :data:`OVERRIDES` replace converters MXNet 1.9.1 ships but that do not reproduce its
  operators on our graphs; :func:`gluon_attention.export.onnx.export_onnx` installs them only
  while it converts: ``softmax`` (with ``use_length`` MXNet's converter fills with -65500 and
  gives a uniform row for a length of 0; here the fill is the dtype's lowest finite value and
  the weights are multiplied by the mask, so a fully masked row is zeros), the shape converters
  of :mod:`.onnx_shape_ops`, ``_maximum_scalar``/``_minimum_scalar`` (MXNet's fail on a float
  scalar with an integer array) and ``null`` (weights stored as raw bytes: the shipped converter
  builds a Python list per tensor).
"""
import numpy as onp
from onnx import helper, numpy_helper

from ..core.fused import OP_NAME
from .onnx_ops import (LEGACY_SCALAR, Emitter, convert_scalar_arithmetic, register,
                       tensor_type)
from .onnx_shape_ops import convert_arange_like, convert_embedding, convert_legacy_reshape

__all__ = ['OVERRIDES', 'masked_softmax']


def masked_softmax(e, x, keep, dtype, axis=-1, out=None):
    """Softmax of ``x`` over ``axis`` where the bool ``keep`` (broadcastable) is true, exactly
    zero elsewhere; a row with nothing kept is all zeros. Blocked positions are filled with the
    dtype's lowest finite value before a plain ONNX ``Softmax``."""
    lowest = e.const(onp.array(onp.finfo(dtype).min, dtype), dtype)
    weights = e.op('Softmax', [e.op('Where', [keep, x, lowest])], axis=axis)
    return e.op('Mul', [weights, e.op('Cast', [keep], to=tensor_type(dtype))], out=out)


def _length_keep(e, x, length, axis):
    """bool mask ``position < length`` along ``axis`` of ``x`` (length: x's shape without it)."""
    size = e.op('Squeeze', [e.shape_dims(x, [axis]), e.const([0])])
    steps = e.op('Range', [e.const(0), size, e.const(1)])                       # (L,) int64
    if axis >= 0:                    # steps need rank(x) - 1 - axis trailing unit axes
        rank = e.op('Shape', [e.op('Shape', [x])])
        trailing = e.op('Sub', [rank, e.const([axis + 1])])
        ones = e.op('ConstantOfShape', [trailing],
                    value=numpy_helper.from_array(onp.ones(1, 'int64'), e.fresh('one')))
        steps = e.op('Reshape', [steps, e.op('Concat', [e.const([-1]), ones], axis=0)])
    elif axis < -1:
        steps = e.op('Reshape', [steps, e.const([-1] + [1] * (-axis - 1))])
    length = e.op('Unsqueeze', [e.op('Cast', [length], to=tensor_type('int64')),
                                e.const([axis])])
    return e.op('Less', [steps, length])


def convert_softmax(node, **kwargs):
    """``softmax(x, length, axis, temperature, use_length, dtype)`` as an ONNX ``Softmax``."""
    e = Emitter(node, kwargs)
    x, dtype = e.inputs[0], e.dtypes[0]
    axis = int(e.attr('axis', -1))
    temperature = e.attr('temperature')
    if temperature not in (None, 1, 1.0):
        x = e.op('Div', [x, e.const(onp.array(temperature, dtype), dtype)])
    out_dtype = onp.dtype(e.attr('dtype') or dtype)
    out = None if out_dtype != dtype else e.name
    if e.attr('use_length', False):
        keep = _length_keep(e, x, e.inputs[1], axis)
        out = masked_softmax(e, x, keep, dtype, axis, out)
    else:
        out = e.op('Softmax', [x], out=out, axis=axis)
    if out_dtype != dtype:
        e.final('Cast', [out], to=tensor_type(out_dtype))
    return e.result(out_dtype)


def convert_null(node, **kwargs):
    """Graph inputs and weights; weights become raw-bytes initializers."""
    name = node['name']
    if kwargs['is_input']:
        dtype = helper.tensor_dtype_to_np_dtype(kwargs['in_type'])
        return [helper.make_tensor_value_info(name, kwargs['in_type'], kwargs['in_shape'])], \
            (dtype,)
    array = kwargs['weights'][name]
    kwargs['initializer'].append(numpy_helper.from_array(array, name))
    return [helper.make_tensor_value_info(name, tensor_type(array.dtype), array.shape)], \
        (array.dtype,)


OVERRIDES = {'softmax': convert_softmax, '_contrib_arange_like': convert_arange_like,
             'Reshape': convert_legacy_reshape, 'Embedding': convert_embedding,
             'null': convert_null}
OVERRIDES.update(dict.fromkeys(LEGACY_SCALAR, convert_scalar_arithmetic))

_TO_NKT = {'NKT': None, 'NTK': [0, 2, 1, 3], 'TNK': [1, 2, 0, 3]}
_CONTEXT_PERM = {'NKT': [0, 2, 1, 3], 'NTK': [0, 2, 1, 3], 'TNK': [2, 0, 1, 3]}


@register(OP_NAME)
def convert_fused_attention(node, **kwargs):
    """The fused kernel as composed ONNX operators: per-head tensors to (B, K, T, C), scaled
    scores, length mask (B,) or (B, L_q), masked softmax, weighted sum, heads merged."""
    e = Emitter(node, kwargs)
    layout, dtype = e.attr('layout', 'NKT'), e.dtypes[0]
    query, key, value = (x if _TO_NKT[layout] is None else
                         e.op('Transpose', [x], perm=_TO_NKT[layout]) for x in e.inputs[:3])
    query = e.op('Mul', [query, e.const(float(e.attr('scale', 1.0)), dtype)])
    scores = e.op('MatMul', [query, e.op('Transpose', [key], perm=[0, 1, 3, 2])])
    if int(e.attr('with_length', 0)):
        length = e.op('Reshape', [e.inputs[3], e.const([0, 1, -1, 1])])     # (B, 1, 1|L_q, 1)
        size = e.op('Squeeze', [e.shape_dims(scores, [-1]), e.const([0])])
        steps = e.op('Cast', [e.op('Range', [e.const(0), size, e.const(1)])],
                     to=tensor_type(e.dtypes[3]))
        keep = e.op('Less', [steps, length])                               # (B, 1, 1|L_q, L_m)
        weights = masked_softmax(e, scores, keep, dtype)
        used = e.op('ReduceMax', [e.op('Cast', [keep], to=tensor_type('int32'))], axes=[2],
                    keepdims=1)                                            # (B, 1, 1, L_m)
        used = e.op('Cast', [e.op('Transpose', [used], perm=[0, 1, 3, 2])],
                    to=tensor_type(onp.bool_))                             # (B, 1, L_m, 1)
        value = e.op('Where', [used, value, e.const(onp.zeros((), dtype), dtype)])
    else:
        weights = e.op('Softmax', [scores], axis=-1)
    context = e.op('Transpose', [e.op('MatMul', [weights, value])], perm=_CONTEXT_PERM[layout])
    # A custom operator's output is listed as ``<name>_output0``: the exporter names it <name>0.
    e.op('Reshape', [context, e.const([0, 0, -1])], out=e.name + '0')
    return e.result(dtype)
