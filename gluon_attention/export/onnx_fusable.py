"""The fusable ONNX form: a transformer written in the subgraphs ONNX Runtime's transformer
optimizer (``onnxruntime.transformers.optimizer``, ``model_type='bert'``) recognises.

:func:`gluon_attention.export.onnx.export_onnx` with ``fusable=True`` installs
:data:`FUSABLE_OVERRIDES` on top of the exact converters while it converts (each called with
``exact=``, the converter it replaces, for the cases it leaves to it), then applies
:func:`literal_head_split`. Every node stays a standard ONNX operator (opset 13), so the file
runs in any runtime at any batch and length; the optimizer turns it into one ``Attention`` per
layer, two ``SkipLayerNormalization`` per layer and one ``BiasGelu`` per layer
(:mod:`.onnx_optimize`). What each converter writes (the forms the optimizer's fusions match,
read from onnxruntime 1.26's ``fusion_attention.py``, ``fusion_layernorm.py``,
``fusion_skiplayernorm.py``, ``fusion_gelu.py`` and ``fusion_biasgelu.py``):

- ``FullyConnected`` (``flatten=False``): ``MatMul`` by the transposed weight, stored as its own
  initializer, then ``Add`` of the bias (the projections' form; MXNet's converter writes
  ``Flatten`` + ``Gemm``, which no fusion matches);
- ``npx.reshape`` with leading copies and fixed sizes (the head split ``(-2, -2, K, -1)``): one
  ``Reshape`` by a constant shape (``[0, 0, K, C]`` after :func:`literal_head_split`);
- ``ga_add_layer_norm``: ``Add`` of the residual, then ``ReduceMean``, ``Sub``, ``Pow(2)``,
  ``ReduceMean``, ``Add(eps)``, ``Sqrt``, ``Div``, ``Mul(gamma)``, ``Add(beta)``;
- ``ga_bias_gelu``: ``Add`` of the bias, then ``0.5 z (1 + Erf(z / 1.41421...))`` with ``Div``;
- ``ga_fused_attention`` (layout NTK, ``with_length``): per-head ``Transpose``, ``MatMul``,
  ``Div`` by 1 / scale, ``Add`` of the additive key mask ``(1 - mask) * -10000`` built from a
  2-D (B, L_m) key mask through ``Unsqueeze``, ``Unsqueeze``, ``Cast``, ``Sub``, ``Mul``, then
  ``Softmax`` over the last axis, ``MatMul`` by the values, ``Transpose`` and ``Reshape``.

What the fusable form changes: the key mask of a query is ``position < max_i length[b, i]``, the
sequence's valid length in a :class:`~gluon_attention.TransformerEncoder`, whose per-query
lengths are the valid length or 0 (a padded query). Padded queries therefore attend to the
valid keys (as in BERT implementations) where MXNet gives them a zero context: outputs at
positions at or past ``valid_length`` differ from MXNet's, every valid position is the same
(within float32 rounding; masked keys get ``exp(-10000)``, which is 0 in float32). Attention
with other per-query lengths (causal masks) must use the exact form.
"""
import json
import math

import mxnet as mx
import numpy as onp
from onnx import numpy_helper

from .._checks import fail
from ..core.fused import LIBRARY_OPS, OP_NAME
from .onnx_ops import Emitter, tensor_type

__all__ = ['FUSABLE_OVERRIDES', 'MASK_FILL', 'check_fusable', 'literal_head_split',
           'unshare_initializers']

MASK_FILL = -10000.0      # the additive mask value the optimizer's BERT patterns expect
LAYER_NORM_OP, BIAS_GELU_OP = LIBRARY_OPS[1:]

def convert_fully_connected(node, exact, **kwargs):
    """``FullyConnected(flatten=False)`` as ``MatMul`` by W^T (a fresh initializer when W is a
    weight, else a ``Transpose``) and ``Add`` of the bias."""
    e = Emitter(node, kwargs)
    if e.attr('flatten', True) not in (False, 'False'):
        return exact(node, **kwargs)      # MXNet's own: Flatten + Gemm
    weight = kwargs['weights'].get(e.inputs[1])
    if weight is None:
        weight_t = e.op('Transpose', [e.inputs[1]], perm=[1, 0])
    else:
        weight_t = e.const(onp.ascontiguousarray(onp.asarray(weight).T))
    if e.attr('no_bias', False) in (True, 'True'):
        e.final('MatMul', [e.inputs[0], weight_t])
    else:
        e.final('Add', [e.op('MatMul', [e.inputs[0], weight_t]), e.inputs[2]])
    return e.result(e.dtypes[0])


def convert_reshape_constant(node, exact, **kwargs):
    """``npx.reshape`` whose codes are leading copies (-2) then sizes (and at most one -1) as a
    ``Reshape`` by a constant shape (ONNX 0 copies the axis at the same index, exactly what a
    leading -2 does); any other code goes to the exact converter."""
    e = Emitter(node, kwargs)
    codes = e.attr('newshape')
    codes = [codes] if isinstance(codes, int) else list(codes)
    copies = next((i for i, c in enumerate(codes) if c != -2), len(codes))
    rest = codes[copies:]
    if e.attr('reverse', False) or not all(c > 0 or c == -1 for c in rest) or (
            rest.count(-1) > 1):
        return exact(node, **kwargs)
    e.final('Reshape', [e.inputs[0], e.const([0] * copies + rest)])
    return e.result()


def convert_layer_norm_pattern(node, exact, **kwargs):
    """data (+ residual), normalised over the last axis (variance through ``Pow``), times gamma,
    plus beta: the exact converter with ``square_by_pow``."""
    return exact(node, square_by_pow=True, **kwargs)


def convert_bias_gelu_pattern(node, exact=None, **kwargs):  # pylint: disable=unused-argument
    """gelu(data + bias), the erf form divided by sqrt(2)."""
    e = Emitter(node, kwargs)
    dtype = e.dtypes[0]
    z = e.op('Add', e.inputs[:2])
    erf = e.op('Erf', [e.op('Div', [z, e.const(onp.array(math.sqrt(2.0), dtype), dtype)])])
    cdf = e.op('Add', [erf, e.const(onp.array(1.0, dtype), dtype)])
    half = e.op('Mul', [z, e.const(onp.array(0.5, dtype), dtype)])
    e.final('Mul', [half, cdf])
    return e.result(dtype)


def _key_mask(e, length, dtype):
    """bool (B, L_m): key position < the longest per-query length of each sequence, from the
    per-query lengths ``length`` (B, L_q) in ``dtype`` of a self-attention (L_m = L_q)."""
    longest = e.op('ReduceMax', [length], axes=[-1], keepdims=1)                  # (B, 1)
    size = e.op('Squeeze', [e.shape_dims(length, [-1]), e.const([0])])
    steps = e.op('Cast', [e.op('Range', [e.const(0), size, e.const(1)])], to=tensor_type(dtype))
    return e.op('Less', [steps, longest])


def convert_attention_pattern(node, exact, **kwargs):
    """The fused kernel in the optimizer's BERT attention form: self-attention in layout NTK
    with per-query lengths (B, L_q); any other call takes the exact converter."""
    e = Emitter(node, kwargs)
    if e.attr('layout', 'NKT') != 'NTK' or not int(e.attr('with_length', 0)):
        return exact(node, **kwargs)
    dtype = e.dtypes[0]
    query = e.op('Transpose', [e.inputs[0]], perm=[0, 2, 1, 3])           # (B, K, L_q, C)
    key = e.op('Transpose', [e.inputs[1]], perm=[0, 2, 3, 1])             # (B, K, C, L_m)
    value = e.op('Transpose', [e.inputs[2]], perm=[0, 2, 1, 3])           # (B, K, L_m, C)
    # divided by 1 / scale: the optimizer's pattern, whose fused Attention scales by
    # 1 / sqrt(C) (check_fusable holds scale to that)
    scores = e.op('Div', [e.op('MatMul', [query, key]), e.const(
        onp.array(1.0 / float(e.attr('scale', 1.0)), dtype), dtype)])
    keep = _key_mask(e, e.cast(e.inputs[3], e.dtypes[3], dtype), dtype)   # (B, L_m) bool
    keep = e.op('Unsqueeze', [e.op('Unsqueeze', [keep, e.const([1])]), e.const([2])])
    blocked = e.op('Sub', [e.const(onp.array(1.0, dtype), dtype),
                           e.op('Cast', [keep], to=tensor_type(dtype))])
    additive = e.op('Mul', [blocked, e.const(onp.array(MASK_FILL, dtype), dtype)])
    weights = e.op('Softmax', [e.op('Add', [scores, additive])], axis=-1)
    context = e.op('Transpose', [e.op('MatMul', [weights, value])], perm=[0, 2, 1, 3])
    e.op('Reshape', [context, e.const([0, 0, -1])], out=e.name + '0')
    return e.result(dtype)


FUSABLE_OVERRIDES = {'FullyConnected': convert_fully_connected,
                     '_npx_reshape': convert_reshape_constant,
                     LAYER_NORM_OP: convert_layer_norm_pattern,
                     BIAS_GELU_OP: convert_bias_gelu_pattern,
                     OP_NAME: convert_attention_pattern}


def check_fusable(sym, known_shapes):
    """Refuse (ValueError) a graph whose fused attention is not a self-attention in layout NTK
    with per-query lengths (B, L_q), L_q = L_m: the only form :func:`convert_attention_pattern`
    writes exactly. ``known_shapes``: the shapes of the graph inputs and weights at one probe."""
    nodes = json.loads(sym.tojson())['nodes']
    internals = sym.get_internals()
    with mx.util.np_shape(True):
        shapes = dict(zip(internals.list_outputs(), internals.infer_shape(**known_shapes)[1]))

    def shape_of(entry):                       # a weight or input, else an op's output
        name = nodes[entry[0]]['name']
        return next(shapes[key] for key in (name, '{}_output{}'.format(name, entry[1]),
                                            name + '_output') if key in shapes)
    for node in nodes:
        if node['op'] != OP_NAME:
            continue
        attrs = node.get('attrs', {})
        if attrs.get('layout', 'NKT') != 'NTK' or not int(attrs.get('with_length', '0')):
            continue
        query, key, length = (shape_of(node['inputs'][i]) for i in (0, 1, 3))
        scale = float(attrs.get('scale', 1.0))
        if len(length) != 2 or query[1] != key[1] or length[1] != query[1] or not math.isclose(
                scale, 1.0 / math.sqrt(query[-1]), rel_tol=1e-6):
            fail('fusable=True writes self-attention with per-query lengths (B, L_q) and the '
                 'scale 1 / sqrt(C) only (a TransformerEncoder); export this graph with '
                 'fusable=False', node=node['name'], query_shape=query, key_shape=key,
                 length_shape=length, scale=scale)


def _producers(graph):
    return {out: node for node in graph.node for out in node.output}


def literal_head_split(graph):
    """Write the head size into head-split reshapes: a ``Reshape`` by the constant
    ``[0, 0, K, -1]`` of ``Add(MatMul(x, W), b)`` with W a (D_in, N) initializer becomes
    ``[0, 0, K, N / K]`` (the same shape, stated: the optimizer reads the heads and the head
    size from it). Returns the number of reshapes rewritten."""
    inits = {t.name: t for t in graph.initializer}
    producers = _producers(graph)
    count = 0
    for node in graph.node:
        if node.op_type != 'Reshape' or node.input[1] not in inits:
            continue
        shape = numpy_helper.to_array(inits[node.input[1]]).copy()
        add = producers.get(node.input[0])
        if shape.tolist()[:2] != [0, 0] or len(shape) != 4 or shape[3] != -1 or shape[2] <= 0 \
                or add is None or add.op_type != 'Add':
            continue
        matmul = next((producers[i] for i in add.input if i in producers
                       and producers[i].op_type == 'MatMul'), None)
        if matmul is None or matmul.input[1] not in inits:
            continue
        width = inits[matmul.input[1]].dims[-1]
        if width % shape[2]:
            continue
        shape[3] = width // shape[2]
        inits[node.input[1]].CopyFrom(numpy_helper.from_array(shape, node.input[1]))
        count += 1
    return count


def unshare_initializers(graph):
    """Give every use of an initializer after its first its own copy (``<name>__use<k>``), so
    that no initializer feeds two nodes (ONNX Runtime's quantizer rewrites a weight in place
    for one consumer). Returns the number of copies made."""
    inits = {t.name: t for t in graph.initializer}
    seen, copies = {}, []
    for node in graph.node:
        for slot, name in enumerate(node.input):
            if name not in inits:
                continue
            seen[name] = seen.get(name, 0) + 1
            if seen[name] > 1:
                copy = numpy_helper.from_array(numpy_helper.to_array(inits[name]),
                                               '{}__use{}'.format(name, seen[name]))
                copies.append(copy)
                node.input[slot] = copy.name
    graph.initializer.extend(copies)
    return len(copies)
