"""ONNX converters (opset 13) for the numpy-interface operators of exported graphs.

MXNet 1.9.1's exporter (``mxnet.onnx``) converts the legacy operators only. This module
registers, with the exporter's own ``MXNetGraph.register``, converters for the ``_np_*``,
``_npi_*`` and ``_npx_*`` operators that this library's graphs are made of, reproducing MXNet's
semantics rather than NumPy's where they differ (measured on MXNet 1.9.1):

- arithmetic between arrays promotes bool < integer < float (``bool * float32`` is float32,
  ``bool * bool`` stays bool); ``true_divide`` of integers gives float32;
- with a Python scalar (attribute ``is_int``), an integer or bool array and a float scalar
  compute in float64 (``int32 * 1.5`` is float64 in a graph, although the same line run
  imperatively gives int32), a bool array and an integer scalar in int64; a comparison of a
  bool array casts the scalar to bool (``flags > 0.5`` is all False in a graph);
- ``nan_to_num`` defaults: NaN -> 0, +inf -> the dtype's largest, -inf -> its lowest finite.

Every converter builds its nodes with :class:`Emitter`, which names intermediate tensors
``<node>__<tag><n>`` and the final output after the MXNet node, as the exporter expects.
"""
import ast

import numpy as onp
from onnx import helper, numpy_helper
from mxnet.onnx.mx2onnx._export_onnx import MXNetGraph

from .._checks import fail

__all__ = ['OPSET', 'Emitter', 'register', 'tensor_type', 'promote']

OPSET = 13


def unsupported(node, what):
    """Refuse an operator option that has no exact ONNX equivalent here (ValueError)."""
    fail('ONNX export converts {} only without {}; export a graph that does not use it'
         .format(node['op'], what), op=node['op'], node=node.get('name'))


def register(*op_names):
    """Decorator: register one converter for several MXNet operators at opset 13."""
    def wrapper(func):
        for op_name in op_names:
            MXNetGraph.register(op_name, OPSET)(func)
        return func
    return wrapper


def tensor_type(dtype):
    return helper.np_dtype_to_tensor_dtype(onp.dtype(dtype))


class Emitter:
    """The ONNX nodes of one MXNet node: ``name``, ``inputs`` (tensor names), ``dtypes``
    (NumPy dtypes of the inputs), ``attrs`` (strings, as in the symbol JSON)."""

    def __init__(self, node, kwargs):
        lookup = kwargs['outputs_lookup']
        self.node, self.name = node, node['name']
        self.attrs = node.get('attrs', {})
        self.inputs = [lookup[i][j].name for i, j, *_ in node['inputs']]
        self.dtypes = [onp.dtype(lookup[i][j].dtype) for i, j, *_ in node['inputs']]
        self._initializer = kwargs['initializer']
        self.nodes = []
        self._count = 0

    def fresh(self, tag):
        self._count += 1
        return '{}__{}{}'.format(self.name, tag, self._count)

    def attr(self, key, default=None):
        """An attribute parsed as a Python literal (None for 'None'); ``default`` if absent."""
        text = self.attrs.get(key)
        if text is None:
            return default
        if text in ('inf', '-inf', 'nan'):
            return float(text)
        try:
            return ast.literal_eval(text)
        except (ValueError, SyntaxError):
            return text

    def const(self, values, dtype=None):
        """A constant tensor (an initializer) in ``dtype`` (default: that of a NumPy array,
        int64 for Python numbers); returns its name."""
        name = self.fresh('c')
        if dtype is None:
            dtype = values.dtype if isinstance(values, onp.ndarray) else 'int64'
        array = onp.asarray(values, dtype=dtype)
        self._initializer.append(numpy_helper.from_array(array, name))
        return name

    def op(self, op_type, inputs, out=None, **attrs):
        """Append one node; returns its output name (``out`` or a fresh one)."""
        out = out or self.fresh(op_type.lower())
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], name=out, **attrs))
        return out

    def cast(self, x, from_dtype, to_dtype):
        if onp.dtype(from_dtype) == onp.dtype(to_dtype):
            return x
        return self.op('Cast', [x], to=tensor_type(to_dtype))

    def final(self, op_type, inputs, **attrs):
        """The node whose output is the MXNet node's output."""
        return self.op(op_type, inputs, out=self.name, **attrs)

    def result(self, *dtypes):
        """What a converter returns: the nodes, and the output dtypes when given."""
        return (self.nodes, tuple(onp.dtype(d) for d in dtypes)) if dtypes else self.nodes

    def shape_dims(self, x, indices):
        """``Shape(x)[indices]`` as an int64 1-D tensor (indices may be negative)."""
        return self.op('Gather', [self.op('Shape', [x]), self.const(list(indices))], axis=0)


def promote(a, b):
    """MXNet 1.9.1's result dtype of an arithmetic operator on arrays of dtypes ``a`` and ``b``."""
    a, b = onp.dtype(a), onp.dtype(b)
    if a == b or b == onp.bool_:
        return a
    if a == onp.bool_:
        return b
    if (a.kind == 'f') != (b.kind == 'f'):
        return a if a.kind == 'f' else b
    return onp.promote_types(a, b)


_ARITHMETIC = {'_npi_add': 'Add', '_npi_subtract': 'Sub', '_npi_multiply': 'Mul',
               '_npi_true_divide': 'Div', '_npi_maximum': 'Max', '_npi_minimum': 'Min',
               '_npi_power': 'Pow', 'broadcast_maximum': 'Max'}
_BOOL_ARITHMETIC = {'Add': 'Or', 'Mul': 'And', 'Max': 'Or', 'Min': 'And'}


@register(*_ARITHMETIC)
def convert_arithmetic(node, **kwargs):
    """Broadcasting arithmetic with MXNet's type promotion."""
    e = Emitter(node, kwargs)
    onnx_op = _ARITHMETIC[node['op']]
    dtype = promote(*e.dtypes)
    if onnx_op == 'Div' and dtype.kind != 'f':
        dtype = onp.dtype('float32')
    if dtype == onp.bool_:
        if onnx_op not in _BOOL_ARITHMETIC:
            unsupported(node, 'two bool arrays')
        e.final(_BOOL_ARITHMETIC[onnx_op], e.inputs)
        return e.result(dtype)
    args = [e.cast(x, d, dtype) for x, d in zip(e.inputs, e.dtypes)]
    e.final(onnx_op, args)
    return e.result(dtype)


_SCALAR = {'_npi_add_scalar': ('Add', False), '_npi_subtract_scalar': ('Sub', False),
           '_npi_rsubtract_scalar': ('Sub', True), '_npi_multiply_scalar': ('Mul', False),
           '_npi_true_divide_scalar': ('Div', False), '_npi_rtrue_divide_scalar': ('Div', True),
           '_npi_maximum_scalar': ('Max', False), '_npi_minimum_scalar': ('Min', False),
           '_npi_power_scalar': ('Pow', False), '_npi_rpower_scalar': ('Pow', True)}
# Legacy operators that numpy-mode calls reach (np.maximum(x, 1.5)); MXNet's own converters
# fail on a float scalar with an integer array. Installed only while converting.
LEGACY_SCALAR = {'_maximum_scalar': ('Max', False), '_minimum_scalar': ('Min', False)}


def _scalar_dtype(e, true_divide=False):
    """The dtype an array-scalar operator computes in, as MXNet infers it in a graph: float
    arrays keep theirs, true division of others gives float32, an integer or bool array with a
    float scalar gives float64, a bool array with an integer scalar int64."""
    dtype, is_int = e.dtypes[0], bool(e.attr('is_int', True))
    if dtype.kind == 'f':
        return dtype
    if true_divide:
        return onp.dtype('float32')
    if not is_int:
        return onp.dtype('float64')
    return onp.dtype('int64') if dtype == onp.bool_ else dtype


@register(*_SCALAR)
def convert_scalar_arithmetic(node, **kwargs):
    """Array-scalar arithmetic in the dtype of :func:`_scalar_dtype`."""
    e = Emitter(node, kwargs)
    onnx_op, reverse = _SCALAR.get(node['op']) or LEGACY_SCALAR[node['op']]
    dtype = _scalar_dtype(e, true_divide=onnx_op == 'Div')
    x = e.cast(e.inputs[0], e.dtypes[0], dtype)
    scalar = e.const(onp.array(float(e.attr('scalar', 1.0))).astype(dtype))
    e.final(onnx_op, [scalar, x] if reverse else [x, scalar])
    return e.result(dtype)


_COMPARE = {'less': 'Less', 'greater': 'Greater', 'less_equal': 'LessOrEqual',
            'greater_equal': 'GreaterOrEqual', 'equal': 'Equal', 'not_equal': 'Equal'}


def _compare(e, op_name, left, right):
    onnx_op = _COMPARE[op_name]
    if op_name == 'not_equal':
        e.final('Not', [e.op(onnx_op, [left, right])])
    else:
        e.final(onnx_op, [left, right])
    return e.result(onp.bool_)


@register(*('_npi_' + k for k in _COMPARE))
def convert_compare(node, **kwargs):
    """Array comparisons (MXNet requires equal dtypes); bool output."""
    e = Emitter(node, kwargs)
    dtype = promote(*e.dtypes)
    dtype = onp.dtype('int32') if dtype == onp.bool_ else dtype
    left, right = (e.cast(x, d, dtype) for x, d in zip(e.inputs, e.dtypes))
    return _compare(e, node['op'][len('_npi_'):], left, right)


@register(*('_npi_{}_scalar'.format(k) for k in _COMPARE))
def convert_compare_scalar(node, **kwargs):
    """Array-scalar comparisons as a graph computes them: an integer array with a float scalar
    in float64, a bool array against the scalar cast to bool (``flags > 0.5`` is all False);
    bool output."""
    e = Emitter(node, kwargs)
    dtype, scalar = e.dtypes[0], float(e.attr('scalar', 0.0))
    if dtype == onp.bool_:
        dtype, scalar = onp.dtype('int32'), float(bool(scalar))
    elif dtype.kind != 'f' and not e.attr('is_int', True):
        dtype = onp.dtype('float64')
    x = e.cast(e.inputs[0], e.dtypes[0], dtype)
    scalar = e.const(onp.array(scalar).astype(dtype))
    return _compare(e, node['op'][len('_npi_'):-len('_scalar')], x, scalar)


@register('_npi_logical_not')
def convert_logical_not(node, **kwargs):
    e = Emitter(node, kwargs)
    e.final('Not', [e.cast(e.inputs[0], e.dtypes[0], onp.bool_)])
    return e.result(onp.bool_)


_FLOAT_UNARY = {'_npi_sqrt': 'Sqrt', '_npi_tanh': 'Tanh', '_npi_exp': 'Exp', '_npi_log': 'Log',
                '_npi_sin': 'Sin', '_npi_cos': 'Cos', '_npi_reciprocal': 'Reciprocal',
                '_npi_erf': 'Erf', '_npi_ceil': 'Ceil', '_npi_floor': 'Floor', '_npx_relu': 'Relu'}


@register(*_FLOAT_UNARY)
def convert_float_unary(node, **kwargs):
    """Elementwise math on float arrays (MXNet keeps an integer dtype here: not converted)."""
    e = Emitter(node, kwargs)
    if e.dtypes[0].kind != 'f':
        unsupported(node, 'a {} array (MXNet 1.9.1 returns integers there)'.format(
            e.dtypes[0].name))
    e.final(_FLOAT_UNARY[node['op']], e.inputs)
    return e.result()


@register('_np_copy')
def convert_copy(node, **kwargs):
    e = Emitter(node, kwargs)
    e.final('Identity', e.inputs)
    return e.result()


@register('_npi_negative', '_npi_absolute', '_npi_sign')
def convert_signed_unary(node, **kwargs):
    e = Emitter(node, kwargs)
    e.final({'_npi_negative': 'Neg', '_npi_absolute': 'Abs', '_npi_sign': 'Sign'}[node['op']],
            e.inputs)
    return e.result()


@register('_npi_where')
def convert_where(node, **kwargs):
    """``where(condition, x, y)`` with broadcasting; the condition is read as nonzero."""
    e = Emitter(node, kwargs)
    dtype = promote(e.dtypes[1], e.dtypes[2])
    x, y = (e.cast(v, d, dtype) for v, d in zip(e.inputs[1:], e.dtypes[1:]))
    e.final('Where', [e.cast(e.inputs[0], e.dtypes[0], onp.bool_), x, y])
    return e.result(dtype)


@register('_npi_full_like', '_npi_zeros_like', '_npi_ones_like')
def convert_full_like(node, **kwargs):
    """An array of ``x``'s shape filled with one value, in ``dtype`` or ``x``'s dtype."""
    e = Emitter(node, kwargs)
    fill = {'_npi_zeros_like': 0.0, '_npi_ones_like': 1.0}.get(node['op'])
    fill = float(e.attr('fill_value', 0.0)) if fill is None else fill
    dtype = onp.dtype(e.attr('dtype') or e.dtypes[0])
    value = numpy_helper.from_array(onp.array([fill]).astype(dtype), e.fresh('fill'))
    e.final('ConstantOfShape', [e.op('Shape', [e.inputs[0]])], value=value)
    return e.result(dtype)


@register('_npi_nan_to_num')
def convert_nan_to_num(node, **kwargs):
    """NaN -> ``nan``, +inf -> ``posinf``, -inf -> ``neginf`` (defaults: 0 and the dtype's
    largest and lowest finite values); integer arrays pass through."""
    e = Emitter(node, kwargs)
    x, dtype = e.inputs[0], e.dtypes[0]
    if dtype.kind != 'f':
        e.final('Identity', [x])
        return e.result()
    info = onp.finfo(dtype)
    posinf, neginf = e.attr('posinf'), e.attr('neginf')
    values = [float(e.attr('nan', 0.0)), info.max if posinf is None else posinf,
              info.min if neginf is None else neginf]
    nan, pos, neg = (e.const(onp.array(v).astype(dtype), dtype) for v in values)
    x = e.op('Where', [e.op('IsNaN', [x]), nan, x])
    x = e.op('Where', [e.op('IsInf', [x], detect_negative=0), pos, x])
    e.final('Where', [e.op('IsInf', [x], detect_positive=0), neg, x])
    return e.result()
