"""Leaving MXNet: convert an exported model to ONNX (opset 13) and run it in ONNX Runtime.

``export_onnx(prefix)`` reads what :func:`gluon_attention.export.block.export_block` wrote
(``<prefix>-symbol.json``, ``<prefix>-0000.params``, ``<prefix>-inputs.json``) and writes
``<prefix>.onnx``, whose inputs carry the descriptive names of the inputs file (``input_ids``,
``token_types``, ``valid_length``, ``p_mask``; ``query``, ``key``, ``value``, ``valid_length``)
in the same order and dtypes, and whose batch and sequence axes are free. ``run_onnx`` runs it on
NumPy inputs on the CPU.

How: MXNet 1.9.1's exporter (``mxnet.onnx``) walks the graph and calls one converter per
operator. It has none for the numpy-interface operators (``_np_*``, ``_npi_*``, ``_npx_*``) nor
for the fused kernel library's operators; :mod:`.onnx_ops`, :mod:`.onnx_shape_ops`,
:mod:`.onnx_attention` and :mod:`.onnx_rowwise` register them, and a few of MXNet's own
converters are replaced while a conversion runs (see :data:`.onnx_attention.OVERRIDES`). Its
``export_model`` validates against the installed onnx package's default opset (18 and up)
although its converters are written for opsets 12-13, so the conversion goes through
``MXNetGraph`` directly with the checker and the model's opset import at 13. Needs
onnx 1.17 (the exporter imports ``onnx.mapping``, deprecated but still there in 1.17; ONNX
Runtime 1.26's quantizer needs the INT4 types of onnx 1.16 and later) and ``onnxruntime``:
``pip install gluon_attention[onnx]``.
"""
import contextlib
import functools
import json
import os
import warnings

import mxnet as mx
import numpy as onp
try:
    import onnx
except ImportError as error:
    raise ImportError('ONNX export needs onnx 1.17 and onnxruntime: pip install '
                      '"gluon_attention[onnx]"') from error
from onnx import helper
from mxnet.onnx.mx2onnx._export_onnx import MXNetGraph

from .. import _checks
from ..core import fused
from ..files import atomic_path
from . import (onnx_attention, onnx_fusable, onnx_ops, onnx_rowwise,  # noqa: F401
               onnx_shape_ops)
from .block import export_block

__all__ = ['export_onnx', 'onnx_session', 'run_onnx', 'check_onnx', 'max_abs_diff', 'OPSET']

OPSET = onnx_ops.OPSET


def _output_names(sym):
    """The ONNX names MXNet's exporter gives the graph outputs (``x_output1`` -> ``x1``)."""
    names = []
    for name in sym.list_outputs():
        stem, _, index = name.rpartition('_output')
        names.append(stem + index if stem else name)
    return names


# Sizes given to named axes for MXNet's shape inference, one list per pass: an output axis
# that follows a named input axis in both passes is named after it, one that changes is free.
# Multiples of 24, so that reshapes splitting an axis in 2, 3, 4, 6 or 8 infer.
_PROBE_SIZES = tuple(tuple(24 * k for k in range(first, first + 8)) for first in (1, 9))


def _probe_shapes(input_shapes):
    """Two concrete shape assignments of ``input_shapes`` (ints kept, axis names sized)."""
    axes = []
    for shape in input_shapes:
        axes += [a for a in shape if isinstance(a, str) and a not in axes]
    if len(axes) > len(_PROBE_SIZES[0]):
        _checks.fail('at most {} distinct axis names'.format(len(_PROBE_SIZES[0])), axes=axes)
    return [[tuple(sizes[axes.index(a)] if isinstance(a, str) else a for a in shape)
             for shape in input_shapes] for sizes in _PROBE_SIZES], axes


def _output_shapes(sym, params, graph_input_names, input_shapes):
    """The outputs' declared shapes: fixed sizes, input axis names, or None (free)."""
    probes, axes = _probe_shapes(input_shapes)
    found = []
    for shapes in probes:
        known = {n: v.shape for n, v in params.items()}
        known.update(zip(graph_input_names, shapes))
        with mx.util.np_shape(True):
            found.append(sym.infer_shape(**known)[1])
    declared = []
    for first, second in zip(*found):
        shape = []
        for a, b in zip(first, second):
            named = [n for i, n in enumerate(axes)
                     if (a, b) == (_PROBE_SIZES[0][i], _PROBE_SIZES[1][i])]
            shape.append(a if a == b else named[0] if named else None)
        declared.append(tuple(shape))
    return declared


@contextlib.contextmanager
def _exporter_at_opset(fusable=False):
    """MXNet's exporter with our replacement converters (and, when ``fusable``, those of
    :mod:`.onnx_fusable`) and the checker at opset 13; both are restored on exit."""
    overrides = dict(onnx_attention.OVERRIDES)
    registry = MXNetGraph.registry_.setdefault(OPSET, {})
    if fusable:
        overrides.update({op: functools.partial(convert, exact=overrides.get(op) or registry.get(
            op) or MXNetGraph.registry_[12].get(op))
                          for op, convert in onnx_fusable.FUSABLE_OVERRIDES.items()})
    saved = {op: registry.get(op) for op in overrides}
    context = onnx.checker.DEFAULT_CONTEXT
    opsets = dict(context.opset_imports)
    try:
        registry.update(overrides)
        context.opset_imports = {'': OPSET}
        with warnings.catch_warnings():
            warnings.simplefilter('ignore', DeprecationWarning)     # onnx.mapping
            yield
    finally:
        for op, func in saved.items():
            if func is None:
                registry.pop(op, None)
            else:
                registry[op] = func
        context.opset_imports = opsets


def _read_spec(prefix):
    path = '%s-inputs.json' % prefix
    if not os.path.exists(path):
        _checks.fail('export_onnx needs the files of export_block, including {}'.format(path),
                     prefix=prefix)
    with open(path, encoding='utf-8') as f:
        return json.load(f)


def _load_graph(prefix, spec):
    if set(fused.LIBRARY_OPS) & set(spec.get('custom_operators', {})) and not fused.load():
        raise RuntimeError('{} uses the fused kernel library, which is needed to read '
                           'the graph: {}'.format(prefix, fused.load_error()))
    with mx.util.np_shape(True), mx.util.np_array(True):
        sym, arg_params, aux_params = mx.model.load_checkpoint(prefix, spec.get('epoch', 0))
    return sym, dict(arg_params, **aux_params)


def _finish_graph(graph, sym, spec, input_names, outputs):
    """Data inputs only (weights are initializers), descriptive input names, and the outputs
    ``[(name, shape)]`` in the MXNet graph's order."""
    rename = dict(zip(spec['graph_input_names'], input_names))
    clash = set(input_names) & ({o for n in graph.node for o in n.output}
                                | {t.name for t in graph.initializer})
    if clash:
        _checks.fail('input names must differ from the graph\'s tensor names',
                     input_names=sorted(clash))
    inputs = sorted((v for v in graph.input if v.name in rename),
                    key=lambda v: spec['graph_input_names'].index(v.name))
    for value in inputs:
        value.name = rename[value.name]
    for node in graph.node:
        node.input[:] = [rename.get(name, name) for name in node.input]
    del graph.input[:]
    graph.input.extend(inputs)
    used = {name for node in graph.node for name in node.input}
    kept = [t for t in graph.initializer if t.name in used]      # converters leave a few unused
    del graph.initializer[:]
    graph.initializer.extend(kept)
    produced = {o.name: o for o in graph.output}
    order = [produced[name] for name in _output_names(sym)]
    del graph.output[:]
    for value, (new_name, shape) in zip(order, outputs):
        graph.node.append(helper.make_node('Identity', [value.name], [new_name]))
        graph.output.append(helper.make_tensor_value_info(
            new_name, value.type.tensor_type.elem_type, shape))
    return graph


def _describe_inputs(spec, names, dtypes, shapes):
    """Names, dtypes and shapes of the ONNX inputs: as given, else from the inputs file."""
    count = len(spec['graph_input_names'])
    names = list(names or spec['input_names'])
    dtypes = list(dtypes or spec['input_dtypes'])
    shapes = shapes or spec.get('input_shapes')
    if shapes is None:
        _checks.fail('export_onnx needs input_shapes: one tuple per input of axis names '
                     '(free axes, e.g. \'batch\') and ints (fixed sizes)', input_shapes=None)
    shapes = [tuple(s) for s in shapes]
    if not len(names) == len(dtypes) == len(shapes) == count:
        _checks.fail('the model has {} inputs: give that many names, dtypes and shapes'.format(
            count), input_names=names, input_dtypes=dtypes, input_shapes=shapes)
    return names, dtypes, shapes


def export_onnx(block_or_prefix, onnx_path=None, input_names=None, input_dtypes=None,
                input_shapes=None, output_names=None, fusable=False):
    """Convert an exported MXNet model to an ONNX file (opset 13).

    Parameters
    ----------
    block_or_prefix : str or HybridBlock
        The prefix given to :func:`~gluon_attention.export.block.export_block`, or a
        hybridized block that has run once (it is exported first, to ``onnx_path`` without
        ``.onnx``).
    onnx_path : str, optional
        Where to write; default ``<prefix>.onnx``. Required with a block.
    input_names, input_dtypes : list of str, optional
        Names and dtypes of the ONNX inputs, in the MXNet call order; default (and required to
        match in length) those of ``<prefix>-inputs.json``. Required with a block.
    input_shapes : list of tuple
        The inputs' shapes, one tuple per input: an axis name (str) for a free axis (e.g.
        ``('batch', 'sequence')``), an int for a fixed size (a feature size the weights fix).
        Axes sharing a name must agree at run time; outputs name their axes after them.
        Required unless ``<prefix>-inputs.json`` records ``input_shapes``.
    output_names : list of str, optional
        Names of the ONNX outputs, in the MXNet output order; default ``output0``, ...
    fusable : bool
        Write the transformer in the subgraphs ONNX Runtime's transformer optimizer fuses
        (:mod:`.onnx_optimize`; what changes is in :mod:`.onnx_fusable`: outputs at padded
        positions, past ``valid_length``, differ from MXNet's). Default False: every output
        as MXNet computes it. Either way no initializer feeds two nodes.

    Returns
    -------
    str, the path of the written ``.onnx`` file.

    Raises
    ------
    ValueError
        Missing export files, names or dtypes of the wrong length; an operator option that has
        no exact ONNX equivalent here (e.g. ``npx.reshape`` code 0, a sum with ``dtype``).
    RuntimeError
        The graph uses the fused kernel and its library cannot be loaded here.
    AttributeError
        An operator without a converter (the exporter's own message).
    """
    if isinstance(block_or_prefix, mx.gluon.HybridBlock):
        if onnx_path is None or input_names is None or input_dtypes is None:
            _checks.fail('exporting a block needs onnx_path, input_names and input_dtypes',
                         onnx_path=onnx_path, input_names=input_names)
        prefix = onnx_path[:-len('.onnx')] if onnx_path.endswith('.onnx') else onnx_path
        export_block(block_or_prefix, prefix, input_names, input_dtypes)
    else:
        prefix = os.fspath(block_or_prefix)
    spec = _read_spec(prefix)
    input_names, input_dtypes, input_shapes = _describe_inputs(spec, input_names, input_dtypes,
                                                               input_shapes)
    sym, params = _load_graph(prefix, spec)
    order = [spec['graph_input_names'].index(n) for n in sym.list_inputs() if n not in params]
    probe = _probe_shapes(input_shapes)[0][0]
    if fusable:
        onnx_fusable.check_fusable(sym, dict({n: v.shape for n, v in params.items()},
                                             **dict(zip(spec['graph_input_names'], probe))))
    with _exporter_at_opset(fusable), mx.util.np_shape(True):
        graph = MXNetGraph().create_onnx_graph_proto(
            sym, params, [probe[i] for i in order],
            [onnx_ops.tensor_type(input_dtypes[i]) for i in order], opset_version=OPSET,
            dynamic=True, dynamic_input_shapes=[input_shapes[i] for i in order])
    output_names = list(output_names or ['output%d' % i for i in range(len(sym.list_outputs()))])
    shapes = _output_shapes(sym, params, spec['graph_input_names'], input_shapes)
    graph = _finish_graph(graph, sym, spec, input_names, list(zip(output_names, shapes)))
    if fusable:
        onnx_fusable.literal_head_split(graph)
    onnx_fusable.unshare_initializers(graph)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', OPSET)],
                              producer_name='gluon_attention')
    helper.set_model_props(model, {'mxnet_prefix': os.path.basename(prefix),
                                   'mxnet_input_names': json.dumps(dict(zip(
                                       input_names, spec['graph_input_names'])))})
    onnx.checker.check_model(model, full_check=True)
    onnx_path = onnx_path or prefix + '.onnx'
    with atomic_path(onnx_path) as tmp:
        onnx.save(model, tmp)
    return onnx_path


def onnx_session(onnx_path, threads=None):
    """An ONNX Runtime CPU session for ``onnx_path``; ``threads`` (default: OMP_NUM_THREADS,
    else 1) intra-op threads. ValueError (one line, ONNX Runtime's reason) for a file ONNX
    Runtime cannot load: missing, not an ONNX model, an invalid graph."""
    import onnxruntime  # pylint: disable=import-outside-toplevel
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = int(threads or os.environ.get('OMP_NUM_THREADS') or 1)
    options.inter_op_num_threads = 1
    try:
        return onnxruntime.InferenceSession(os.fspath(onnx_path), options,
                                            providers=['CPUExecutionProvider'])
    except Exception as err:  # pylint: disable=broad-except
        if not type(err).__module__.startswith('onnxruntime'):
            raise
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0]
        return _checks.fail('the ONNX file must be an ONNX model that ONNX Runtime loads',
                            onnx_path=os.fspath(onnx_path), reason=reason.split('failed:')[-1])


def _np_dtype(ort_type):
    """ONNX Runtime's type string (``'tensor(float)'``) -> NumPy dtype."""
    name = ort_type[len('tensor('):-1]
    return onp.dtype({'float': 'float32', 'double': 'float64'}.get(name, name))


def run_onnx(session_or_path, inputs, threads=None):
    """Run an ONNX model on NumPy inputs: a list in input order or a dict by input name.

    Returns the list of NumPy outputs. Each input is cast to the model's declared dtype only
    if its values survive the cast (int64 ids for an int32 input); otherwise TypeError.
    """
    session = session_or_path if hasattr(session_or_path, 'run') else onnx_session(
        session_or_path, threads)
    declared = session.get_inputs()
    if not isinstance(inputs, dict):
        if len(inputs) != len(declared):
            _checks.fail('the model takes {} inputs ({})'.format(
                len(declared), ', '.join(d.name for d in declared)), num_inputs=len(inputs))
        inputs = {d.name: x for d, x in zip(declared, inputs)}
    feed = {}
    for d in declared:
        dtype = _np_dtype(d.type)
        array = onp.asarray(inputs[d.name])
        cast = array.astype(dtype)
        if not onp.array_equal(cast, array, equal_nan=array.dtype.kind == 'f'):
            _checks.fail_type('input {} must be {}'.format(d.name, dtype.name),
                              **{d.name + '.dtype': array.dtype.name})
        feed[d.name] = cast
    return session.run(None, feed)


def max_abs_diff(want, got):
    """Largest ``|want - got|`` over two arrays of one shape; equal values (infinities included)
    and NaN against NaN count 0."""
    want, got = onp.asarray(want, 'float64'), onp.asarray(got, 'float64')
    same = (want == got) | (onp.isnan(want) & onp.isnan(got))
    with onp.errstate(invalid='ignore'):        # inf - inf where both hold one: counted 0
        return float(onp.where(same, 0.0, onp.abs(want - got)).max(initial=0.0))


def check_onnx(block, prefix, batches, input_shapes, output_names=None, threads=None):
    """Convert the export at ``prefix`` to ``<prefix>.onnx`` and compare ONNX Runtime with
    ``block`` (the exported, hybridized block) on ``batches`` (lists of NumPy inputs).

    Returns ``{'onnx_path', 'max_abs_diff', 'num_batches'}``; the difference is over every
    output element (equal infinities count 0, NaN against a number counts infinite).
    """
    path = export_onnx(prefix, input_shapes=input_shapes, output_names=output_names)
    session = onnx_session(path, threads)
    worst = 0.0
    for batch in batches:
        want = block(*[mx.np.array(x, dtype=x.dtype) for x in batch])
        want = want if isinstance(want, (list, tuple)) else [want]
        for w, g in zip(want, run_onnx(session, list(batch))):
            worst = max(worst, max_abs_diff(w.asnumpy(), g))
    return {'onnx_path': path, 'max_abs_diff': worst, 'num_batches': len(batches)}
