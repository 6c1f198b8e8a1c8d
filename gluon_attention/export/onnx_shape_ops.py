"""ONNX converters (opset 13) for shapes: reductions, squeeze, transpose, joins, reshapes,
``arange_like`` and ``Embedding``.

``npx.reshape`` codes are read as MXNet reads them: -1 infer, -2 copy, -3 drop a size-1 axis, -4
copy the rest, -5 merge two, -6 split one into the next two, and every other code consumes one
input axis; with ``reverse`` the codes are matched from the right. The legacy ``Reshape`` codes
(0 copy, -2 rest, -3 merge, -4 split) map onto the same reader. ``Reshape``,
``_contrib_arange_like`` (MXNet's converter makes one element for a negative ``axis``) and
``Embedding`` (ids must be clipped to [0, input_dim), as MXNet does) replace MXNet's converters
only while a conversion runs (:data:`.onnx_attention.OVERRIDES`).
"""
import numpy as onp

from .onnx_ops import Emitter, register, tensor_type, unsupported

__all__ = ['convert_legacy_reshape', 'convert_arange_like', 'convert_embedding']


def _axes(e, key='axis'):
    axis = e.attr(key)
    return None if axis is None or axis == () else list(axis) if isinstance(
        axis, (tuple, list)) else [int(axis)]


_REDUCE = {'_np_sum': 'ReduceSum', '_np_max': 'ReduceMax', '_np_min': 'ReduceMin',
           '_npi_mean': 'ReduceMean', '_np_prod': 'ReduceProd'}


@register(*_REDUCE)
def convert_reduce(node, **kwargs):
    """Reductions over ``axis`` (all axes when None), with ``keepdims``. Bool sums count in
    int64 and bool max/min stay bool, as in MXNet."""
    e = Emitter(node, kwargs)
    if e.attr('dtype') is not None or e.attr('initial') is not None:
        unsupported(node, 'dtype or initial')
    onnx_op, axes = _REDUCE[node['op']], _axes(e)
    x, dtype = e.inputs[0], e.dtypes[0]
    out_dtype = dtype
    if dtype == onp.bool_:
        out_dtype = onp.dtype('int64') if onnx_op in ('ReduceSum', 'ReduceProd') else dtype
        x = e.cast(x, dtype, 'int64' if out_dtype != onp.bool_ else 'int32')
    keepdims = int(bool(e.attr('keepdims', False)))
    if onnx_op == 'ReduceSum':
        out = e.op(onnx_op, [x] + ([e.const(axes)] if axes else []), keepdims=keepdims)
    else:
        out = e.op(onnx_op, [x], keepdims=keepdims, **({'axes': axes} if axes else {}))
    e.final('Cast' if out_dtype == onp.bool_ else 'Identity', [out],
            **({'to': tensor_type(onp.bool_)} if out_dtype == onp.bool_ else {}))
    return e.result(out_dtype)


@register('_np_squeeze')
def convert_squeeze(node, **kwargs):
    e = Emitter(node, kwargs)
    axes = _axes(e)
    e.final('Squeeze', e.inputs[:1] + ([e.const(axes)] if axes else []))
    return e.result()


@register('_np_transpose')
def convert_transpose(node, **kwargs):
    e = Emitter(node, kwargs)
    axes = _axes(e, 'axes')
    e.final('Transpose', e.inputs, **({'perm': axes} if axes else {}))
    return e.result()


@register('_npi_concatenate', '_npi_stack')
def convert_concatenate(node, **kwargs):
    """``concatenate`` along ``axis``; ``stack`` inserts the new axis first."""
    e = Emitter(node, kwargs)
    axis = e.attr('axis', 0)
    if axis is None:
        unsupported(node, 'axis=None')
    parts = e.inputs
    if node['op'] == '_npi_stack':
        parts = [e.op('Unsqueeze', [x, e.const([int(axis)])]) for x in parts]
    e.final('Concat', parts, axis=int(axis))
    return e.result()


_INT64_MAX = 2 ** 63 - 1
_LEGACY_RESHAPE = {0: -2, -2: -4, -3: -5, -4: -6}     # legacy code -> npx.reshape code


def _shape_pieces(e, x, codes, reverse):
    """The int64 pieces of an ``npx.reshape`` target shape, read as MXNet does."""
    codes = list(codes)[::-1] if reverse else list(codes)
    pieces, axis, k = [], 0, 0

    def dim(i):                      # the i-th input axis, from the right when reversed
        return e.shape_dims(x, [-(i + 1) if reverse else i])
    while k < len(codes):
        code = codes[k]
        if code == -2:
            pieces.append(dim(axis))
        elif code == -4:
            start, end = (0, -axis if axis else _INT64_MAX) if reverse else (axis, _INT64_MAX)
            pieces.append(e.op('Slice', [e.op('Shape', [x]), e.const([start]), e.const([end])]))
        elif code == -5:
            pieces.append(e.op('Mul', [dim(axis), dim(axis + 1)]))
            axis += 1
        elif code == -6:
            first, second = codes[k + 1], codes[k + 2]
            whole = dim(axis)
            split = [e.const([first]), e.const([second])]
            if -1 in (first, second):
                known = int(first == -1)          # the index of the given size
                split[1 - known] = e.op('Div', [whole, split[known]])
            pieces.extend(split)
            k += 2
        elif code == -1 or code > 0:
            pieces.append(e.const([code]))     # consumes an input axis, as in MXNet
        elif code != -3:               # -3 drops a size-1 axis
            unsupported(e.node, 'npx.reshape code {}'.format(code))
        axis, k = axis + 1, k + 1
    return pieces[::-1] if reverse else pieces


def _reshape(e, codes, reverse):
    codes = [codes] if isinstance(codes, int) else list(codes)
    if all(c == -1 or c > 0 for c in codes):
        shape = e.const(codes)
    else:
        shape = e.op('Concat', _shape_pieces(e, e.inputs[0], codes, reverse), axis=0)
    e.final('Reshape', [e.inputs[0], shape])
    return e.result()


@register('_npx_reshape')
def convert_npx_reshape(node, **kwargs):
    """``npx.reshape(x, newshape, reverse)`` with the special codes -1 .. -6."""
    e = Emitter(node, kwargs)
    return _reshape(e, e.attr('newshape'), bool(e.attr('reverse', False)))


def convert_legacy_reshape(node, **kwargs):
    """The legacy ``Reshape(shape, reverse)``: codes 0, -1, -2, -3, -4 as MXNet documents."""
    e = Emitter(node, kwargs)
    codes = e.attr('shape')
    codes = [codes] if isinstance(codes, int) else codes
    return _reshape(e, [_LEGACY_RESHAPE.get(c, c) for c in codes],
                    bool(e.attr('reverse', False)))


def convert_arange_like(node, **kwargs):
    """``arange_like(x, start, step, axis)``: ``start + i * step`` in x's dtype."""
    e = Emitter(node, kwargs)
    x, dtype = e.inputs[0], e.dtypes[0]
    if int(e.attr('repeat', 1)) != 1:
        unsupported(node, 'repeat != 1')
    axis = e.attr('axis')
    shape = e.op('Shape', [x])
    size = e.op('ReduceProd', [shape if axis is None else e.shape_dims(x, [int(axis)])],
                keepdims=0)
    steps = e.op('Cast', [e.op('Range', [e.const(0), size, e.const(1)])],
                 to=tensor_type('float64'))
    steps = e.op('Add', [e.op('Mul', [steps, e.const(float(e.attr('step', 1.0)), 'float64')]),
                         e.const(float(e.attr('start', 0.0)), 'float64')])
    steps = e.op('Cast', [steps], to=tensor_type(dtype))
    e.final('Reshape' if axis is None else 'Identity', [steps] + ([shape] if axis is None else []))
    return e.result(dtype)


def convert_embedding(node, **kwargs):
    """``Embedding``: ids truncated to integers and clipped to [0, input_dim), then gathered."""
    e = Emitter(node, kwargs)
    ids = e.op('Cast', [e.inputs[0]], to=tensor_type('int64'))
    ids = e.op('Clip', [ids, e.const(0), e.const(int(e.attr('input_dim')) - 1)])
    e.final('Gather', [e.inputs[1], ids], axis=0)
    return e.result(e.dtypes[1])
