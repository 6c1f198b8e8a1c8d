"""Inference graphs whose dense products run in bfloat16, from a saved float32 graph.

:func:`bfloat16_products` rewrites an MXNet graph (its JSON) so that every ``FullyConnected``
node reads a bfloat16 input (an ``amp_cast`` inserted before it), bfloat16 weight and bias, and
hands a float32 result on (an ``amp_cast`` after it): oneDNN multiplies bfloat16 operands with
float32 accumulation, on AMX tiles where :mod:`gluon_attention.hardware` granted them. Every
other operator (LayerNorm, GELU, softmax, attention, the heads) keeps its float32 inputs; the
fused attention nodes get ``matmul_dtype='bfloat16'`` (their forward products on AMX tiles where
:func:`gluon_attention.core.fused.amx_problem` is None, as the encoders'
``matmul_dtype='bfloat16'`` runs them). The
weights and biases read only by those products become bfloat16 parameters, cast once when the
graph is built, so that no call casts them again (``matmul_dtype='bfloat16'`` of
:mod:`gluon_attention.core.matmul`, built for training, casts the float32 parameters on every
call); a parameter that another operator also reads stays float32 and is cast in the graph. The
files on disk stay float32: the conversion happens when the graph is loaded.

Numerics: each product's operands are rounded to bfloat16 (8 bits of mantissa, nearest even),
its sum accumulated in float32 and its result rounded to bfloat16 (oneDNN's bfloat16 output),
then widened to float32 -- the products of ``matmul_dtype='bfloat16'``.
"""
import json

import mxnet as mx

from .. import _checks
from . import fused as _fused
from .matmul import BFLOAT16

__all__ = ['bfloat16_products', 'Bfloat16Graph']

_PRODUCT = 'FullyConnected'
_MX_BFLOAT16 = '12'           # MXNet's type code of bfloat16 (a variable's __dtype__)


def _cast_node(name, source, dtype):
    return {'op': 'amp_cast', 'name': name, 'attrs': {'dtype': dtype}, 'inputs': [source]}


def _product_only_params(nodes):
    """Ids of the variables read only as a product's weight or bias."""
    readers = {}
    for node in nodes:
        for slot, (source, _, _) in enumerate(node['inputs']):
            readers.setdefault(source, []).append((node['op'], slot))
    return {i for i, node in enumerate(nodes) if node['op'] == 'null' and readers.get(i)
            and all(op == _PRODUCT and slot > 0 for op, slot in readers[i])}


def _rewrite(graph):
    """(new node list, ids of the variables made bfloat16) of the graph dict ``graph``."""
    nodes, counts = graph['nodes'], _output_counts(graph)
    cast_params = _product_only_params(nodes)
    new, where = [], {}                       # (old id, output) -> [new id, output]
    for old_id, node in enumerate(nodes):
        node = dict(node, inputs=[where[(s, o)] + [v] for s, o, v in node['inputs']])
        if old_id in cast_params:
            node['attrs'] = dict(node.get('attrs', {}), __dtype__=_MX_BFLOAT16)
        if node['op'] == _fused.OP_NAME:
            node['attrs'] = dict(node.get('attrs', {}), matmul_dtype='bfloat16')
        if node['op'] == _PRODUCT:
            sources = [s for s, _, _ in nodes[old_id]['inputs']]
            for slot, source in enumerate(sources):
                if slot == 0 or source not in cast_params:
                    new.append(_cast_node('{}_input{}_bfloat16'.format(node['name'], slot),
                                          node['inputs'][slot], 'bfloat16'))
                    node['inputs'][slot] = [len(new) - 1, 0, 0]
            new.append(node)
            new.append(_cast_node(node['name'] + '_float32', [len(new) - 1, 0, 0], 'float32'))
        else:
            new.append(node)
        for out in range(counts[old_id]):
            where[(old_id, out)] = [len(new) - 1, out]
    heads = [where[(s, o)] + [v] for s, o, v in graph['heads']]
    return new, heads, cast_params


def _output_counts(graph):
    """Outputs of each node (from ``node_row_ptr``; 1 each when the JSON has none)."""
    ptr = graph.get('node_row_ptr')
    if ptr:
        return [b - a for a, b in zip(ptr, ptr[1:])]
    return [1] * len(graph['nodes'])


def bfloat16_products(symbol_json, params):
    """The graph ``symbol_json`` with its dense products in bfloat16 (see the module docstring).

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
    float32 outputs); the products inside run in bfloat16. Raises ValueError as
    :func:`bfloat16_products`.
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
