"""Inference graphs that run in bfloat16 between their dense products, from a saved float32
graph.

:func:`bfloat16_products` rewrites an MXNet graph (its JSON) so that every ``FullyConnected``
node reads bfloat16 activations, weight and bias and writes bfloat16 (oneDNN multiplies bfloat16
operands with float32 accumulation, on AMX tiles where :mod:`gluon_attention.hardware` granted
them), and the activations stay bfloat16 from one product to the next wherever every operator
on the way reads bfloat16: the fused operators of the kernel library (``ga_bias_gelu``,
``ga_add_layer_norm``, ``ga_fused_attention``, which compute in float32 inside and round their
output to bfloat16) and the operators that only copy or reshape (``_np_copy``, ``_npx_reshape``,
``Reshape``, ``_copy``). A bfloat16 activation is cast to float32 (``amp_cast``, once per
activation) before any other operator (the heads' softmax, masking, MXNet's own LayerNorm,
``arange_like``, whose positions past 256 bfloat16 cannot hold) and before the graph's outputs,
which stay float32; a float32 activation is cast to bfloat16 where it first meets a product or a
fused operator in bfloat16 (the embeddings). The fused attention nodes also get
``matmul_dtype='bfloat16'`` (their products on AMX tiles where
:func:`gluon_attention.core.fused.amx_problem` is None, reading bfloat16 as it is). The weights
and biases read only by products become bfloat16 parameters, cast once when the graph is built
(``matmul_dtype='bfloat16'`` of :mod:`gluon_attention.core.matmul`, built for training, casts
the float32 parameters on every call); a parameter that another operator also reads stays
float32 and is cast in the graph, and the fused operators' gamma, beta and bias stay float32.
The files on disk stay float32: the conversion happens when the graph is loaded.

Numerics: each product's operands are bfloat16 (8 bits of mantissa), its sum accumulated in
float32 and its result rounded to bfloat16 (nearest even); the fused operators widen bfloat16
to float32, compute as in float32 and round their result to bfloat16; the residual stream
between layers is therefore bfloat16 (a relative rounding of 2^-9 per layer, as the products'
own results). MXNet's numpy arrays have no bfloat16 parameters, so the graph runs on legacy
arrays inside.
"""
import json

import mxnet as mx

from .. import _checks
from . import fused as _fused
from .matmul import BFLOAT16

__all__ = ['bfloat16_products', 'Bfloat16Graph']

_PRODUCT = 'FullyConnected'
_MX_BFLOAT16 = '12'           # MXNet's type code of bfloat16 (a variable's __dtype__)
# Operators that read bfloat16 activations at these input slots (all of them bfloat16 when any
# is) and then write a bfloat16 output 0; the other inputs (lengths, gamma, beta, bias) stay
# float32. The copies and reshapes pass their input's dtype on.
_BFLOAT16_SLOTS = {'ga_bias_gelu': (0,), 'ga_add_layer_norm': (0, 3),
                   _fused.OP_NAME: (0, 1, 2), '_np_copy': (0,), '_npx_reshape': (0,),
                   'Reshape': (0,), '_copy': (0,)}


def _product_only_params(nodes):
    """Ids of the variables read only as a product's weight or bias."""
    readers = {}
    for node in nodes:
        for slot, (source, _, _) in enumerate(node['inputs']):
            readers.setdefault(source, []).append((node['op'], slot))
    return {i for i, node in enumerate(nodes) if node['op'] == 'null' and readers.get(i)
            and all(op == _PRODUCT and slot > 0 for op, slot in readers[i])}


class _NewGraph:
    """The rewritten node list: which outputs are bfloat16, and the casts (one per output and
    dtype, shared by its readers)."""

    def __init__(self):
        self.nodes, self.bfloat16, self._casts = [], set(), {}

    def add(self, node, bfloat16_outputs):
        self.nodes.append(node)
        self.bfloat16.update((len(self.nodes) - 1, out) for out in bfloat16_outputs)
        return len(self.nodes) - 1

    def cast(self, ref, dtype):
        """``ref`` ((node, output)) as ``dtype`` ('bfloat16' or 'float32'): itself when it is
        so already (any non-bfloat16 output counts as float32), else a shared amp_cast."""
        if (tuple(ref) in self.bfloat16) == (dtype == 'bfloat16'):
            return tuple(ref)
        if (tuple(ref), dtype) not in self._casts:
            source = self.nodes[ref[0]]['name'] + ('_out{}'.format(ref[1]) if ref[1] else '')
            node = {'op': 'amp_cast', 'name': '{}_{}'.format(source, dtype),
                    'attrs': {'dtype': dtype}, 'inputs': [[ref[0], ref[1], 0]]}
            self._casts[(tuple(ref), dtype)] = (self.add(node, [0] if dtype == 'bfloat16'
                                                         else []), 0)
        return self._casts[(tuple(ref), dtype)]


def _place(new, node, inputs):
    """Sets ``node``'s inputs from ``inputs`` ((node, output) of the new graph), cast where its
    operator needs; returns its bfloat16 outputs."""
    op = node['op']
    if op == _PRODUCT:
        wanted = {slot: 'bfloat16' for slot in range(len(inputs))}
    else:
        slots = [s for s in _BFLOAT16_SLOTS.get(op, ()) if s < len(inputs)]
        runs = any(tuple(inputs[s]) in new.bfloat16 for s in slots)
        wanted = {slot: 'bfloat16' if runs and slot in slots else 'float32'
                  for slot in range(len(inputs))}
    node['inputs'] = [list(new.cast(ref, wanted[slot])) + [0]
                      for slot, ref in enumerate(inputs)]
    return [0] if op != 'null' and wanted.get(0) == 'bfloat16' else []


def _rewrite(graph):
    """(new node list, heads, ids of the variables made bfloat16) of the graph dict ``graph``."""
    nodes, counts = graph['nodes'], _output_counts(graph)
    cast_params = _product_only_params(nodes)
    new, where = _NewGraph(), {}              # (old id, output) -> (new id, output)
    for old_id, node in enumerate(nodes):
        node = dict(node)
        if old_id in cast_params:
            node['attrs'] = dict(node.get('attrs', {}), __dtype__=_MX_BFLOAT16)
        if node['op'] == _fused.OP_NAME:
            node['attrs'] = dict(node.get('attrs', {}), matmul_dtype='bfloat16')
        bfloat16 = [0] if old_id in cast_params else _place(
            new, node, [where[(s, o)] for s, o, _ in nodes[old_id]['inputs']])
        new_id = new.add(node, bfloat16)
        for out in range(counts[old_id]):
            where[(old_id, out)] = (new_id, out)
    heads = [list(new.cast(where[(s, o)], 'float32')) + [v] for s, o, v in graph['heads']]
    return new.nodes, heads, cast_params


def _output_counts(graph):
    """Outputs of each node (from ``node_row_ptr``; 1 each when the JSON has none)."""
    ptr = graph.get('node_row_ptr')
    if ptr:
        return [b - a for a, b in zip(ptr, ptr[1:])]
    return [1] * len(graph['nodes'])


def bfloat16_products(symbol_json, params):
    """The graph ``symbol_json`` with its dense products and the activations between them in
    bfloat16 (see the module docstring).

    Parameters
    ----------
    symbol_json : str
        An MXNet graph as ``Symbol.tojson()`` (or a ``-symbol.json`` file) gives it, float32.
    params : dict of str to NDArray
        Its parameters by name (``arg:``/``aux:`` prefixes removed), float32.

    Returns
    -------
    symbol : mx.sym.Symbol
        The rewritten graph.
    params : dict of str to NDArray
        ``params`` with the weights and biases read only by products cast to bfloat16 (new
        arrays; the given ones are not changed).

    Raises
    ------
    ValueError
        ``symbol_json`` is not an MXNet graph, or has no ``FullyConnected`` node.
    """
    try:
        graph = json.loads(symbol_json)
        nodes = graph['nodes']
    except (ValueError, TypeError, KeyError):
        _checks.fail('symbol_json must be an MXNet graph in JSON (Symbol.tojson())',
                     symbol_json=str(symbol_json)[:60])
    if not any(node['op'] == _PRODUCT for node in nodes):
        _checks.fail('the graph has no FullyConnected product to run in bfloat16',
                     symbol_json=str(symbol_json)[:60])
    new, heads, cast_params = _rewrite(graph)
    cast_names = {nodes[i]['name'] for i in cast_params}
    out = {'nodes': new, 'heads': heads, 'attrs': graph.get('attrs', {}),
           'arg_nodes': [i for i, node in enumerate(new) if node['op'] == 'null']}
    converted = {name: mx.nd.amp_cast(value, dtype=BFLOAT16) if name in cast_names else value
                 for name, value in params.items()}
    return mx.sym.load_json(json.dumps(out)), converted


class Bfloat16Graph:
    """A graph of :func:`bfloat16_products` ready to call, hybridized (``static_alloc``).

    Parameters
    ----------
    symbol_json, params
        The float32 graph and its parameters, as :func:`bfloat16_products` takes them.
    input_names : list of str
        The graph's data inputs in call order (``data0``, ``data1``, ... for an exported block).
    input_dtypes : list of str, optional
        Their dtypes (e.g. ``['int32'] * 3`` for an encoder's token ids, token types and valid
        lengths); None: inferred at the first call.
    ctx : mx.Context, optional
        Default ``mx.cpu()``.

    Calls take and return what the float32 graph does (MXNet numpy arrays: int32 token ids,
    float32 outputs); the products and the activations between them are bfloat16 inside. Raises
    ValueError as :func:`bfloat16_products`.
    """

    def __init__(self, symbol_json, params, input_names, input_dtypes=None, ctx=None):
        symbol, converted = bfloat16_products(symbol_json, params)
        # legacy arrays inside (np_array off): MXNet's numpy arrays have no bfloat16 parameters
        with mx.util.np_shape(True), mx.util.np_array(False):
            dtypes = input_dtypes or [None] * len(input_names)
            self.block = mx.gluon.SymbolBlock(symbol, [mx.sym.var(n, dtype=d) for n, d in
                                                       zip(input_names, dtypes)])
            self.block.collect_params().load_dict(converted, ctx or mx.cpu(), cast_dtype=True,
                                                  dtype_source='saved')
            self.block.hybridize(static_alloc=True)

    @classmethod
    def from_exported(cls, prefix, ctx=None):
        """The graph an export wrote at ``prefix`` (``<prefix>-symbol.json``, the parameters of
        the epoch and ``<prefix>-inputs.json`` with the input names and dtypes, as
        ``gluon_attention.export.export_block`` writes them), its products in bfloat16; the
        fused kernel library is loaded first. Raises ValueError when a file is missing or the
        graph has no product, RuntimeError when it needs the library and that cannot load."""
        spec_path = '{}-inputs.json'.format(prefix)
        try:
            with open(spec_path, encoding='utf-8') as handle:
                spec = json.load(handle)
            with open('{}-symbol.json'.format(prefix), encoding='utf-8') as handle:
                symbol_json = handle.read()
        except OSError as err:
            _checks.fail('an exported graph needs {}-symbol.json, its parameters and '
                         '{} ({})'.format(prefix, spec_path, err.strerror), prefix=prefix)
        if any('"{}"'.format(op) in symbol_json for op in _fused.LIBRARY_OPS) and \
                not _fused.load():
            raise RuntimeError('{} uses the fused kernel library, which cannot be loaded here: '
                               '{}'.format(prefix, _fused.load_error()))
        with mx.util.np_shape(True):
            saved = mx.nd.load('{}-{:04d}.params'.format(prefix, spec.get('epoch', 0)))
        params = {k.split(':', 1)[-1]: v for k, v in saved.items()}
        return cls(symbol_json, params, spec['graph_input_names'], spec.get('input_dtypes'), ctx)

    def __call__(self, *inputs):
        with mx.util.np_shape(True), mx.util.np_array(False):
            out = self.block(*[x.as_nd_ndarray() for x in inputs])
        if isinstance(out, (list, tuple)):
            return [o.as_np_ndarray() for o in out]
        return out.as_np_ndarray()
