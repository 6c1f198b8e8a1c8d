"""Export a hybridized block, load it back without its Python class, and check that it agrees.

:func:`export_and_check` is the one export path of the jobs and scripts: it writes
``<prefix>-symbol.json``, ``<prefix>-0000.params`` and ``<prefix>-inputs.json`` (through
:func:`export_block`), reloads them with ``SymbolBlock.imports`` (through :func:`import_block`,
which loads the fused kernel first when the graph uses it) and compares both blocks on every batch.
``python -m gluon_attention.export PREFIX INPUTS.npz OUTPUTS.npz`` (:mod:`.__main__`) runs an
exported model in a
fresh process on saved batches (``batch<i>/<input name>`` arrays) and saves its outputs
(``batch<i>/out<j>``).
"""
import json
import numbers
import os

import mxnet as mx
import numpy as onp

from .. import _checks
from ..core import fused
from ..files import atomic_path, atomic_write_json
from .loaded import ExportedBlock

__all__ = ['EXPORT_DTYPES', 'export_and_check', 'export_block', 'import_block', 'load',
           'run_exported']

#: The dtypes an exported graph's inputs may have (NumPy names).
EXPORT_DTYPES = ('float16', 'float32', 'float64', 'int8', 'uint8', 'int32', 'int64', 'bool')


def _graph_files(prefix, epoch):
    return {'symbol': '%s-symbol.json' % prefix, 'params': '%s-%04d.params' % (prefix, epoch)}


def _check_names(name, values):
    """A list or tuple of items, each checked as ``name[i]``; returns it as a list."""
    if isinstance(values, str) or not isinstance(values, (list, tuple)):
        _checks.fail_type('{} must be a list or tuple (one item per positional input)'.format(
            name), **{name: values})
    return list(values)


def _check_dtypes(input_dtypes):
    """The canonical names (list of str) of ``input_dtypes``, each in EXPORT_DTYPES."""
    names = []
    for i, dtype in enumerate(_check_names('input_dtypes', input_dtypes)):
        key = 'input_dtypes[{}]'.format(i)
        if not isinstance(dtype, (str, onp.dtype, type)):
            _checks.fail_type('{} must be a dtype name such as \'int32\''.format(key),
                              **{key: dtype})
        try:
            name = onp.dtype(dtype).name
        except TypeError:
            name = None
        if name not in EXPORT_DTYPES:
            _checks.fail('{} must be one of {}'.format(
                key, ', '.join(map(repr, EXPORT_DTYPES))), **{key: dtype})
        names.append(name)
    return names


def _check_input_spec(input_names, input_dtypes):
    """Names and dtypes of the positional inputs; returns the canonical dtype names."""
    for i, name in enumerate(_check_names('input_names', input_names)):
        if not isinstance(name, str):
            _checks.fail_type('input_names[{}] must be a str'.format(i),
                              **{'input_names[{}]'.format(i): name})
        if not name or name in input_names[:i]:
            _checks.fail('input names must be non-empty and distinct',
                         **{'input_names[{}]'.format(i): name})
    dtypes = _check_dtypes(input_dtypes)
    if len(input_names) != len(dtypes):
        _checks.fail('input_names and input_dtypes must have the same length',
                     input_names=input_names, input_dtypes=input_dtypes)
    return dtypes


def _check_export(block, prefix, input_names, input_dtypes, epoch):
    """The checks of :func:`export_block`; returns the canonical dtype names."""
    if not isinstance(block, mx.gluon.HybridBlock):
        _checks.fail_type('block must be a HybridBlock', block=type(block).__name__)
    if not isinstance(prefix, (str, os.PathLike)):
        _checks.fail_type('prefix must be a str or path', prefix=prefix)
    if not os.fspath(prefix):
        _checks.fail('prefix must be a non-empty path prefix', prefix=prefix)
    dtypes = _check_input_spec(input_names, input_dtypes)
    if isinstance(epoch, bool) or not isinstance(epoch, numbers.Integral) or epoch < 0:
        _checks.fail('epoch must be an integer >= 0', epoch=epoch)
    graph = getattr(block, '_cached_graph', ())
    if not graph:
        _checks.fail('block must be hybridized and called once before it is exported (its '
                     'graph is built by the first call)', block=type(block).__name__)
    if len(graph[0]) != len(input_names):
        _checks.fail('input_names must name each of the graph\'s {} inputs'.format(
            len(graph[0])), input_names=input_names)
    return dtypes


def export_block(block, prefix, input_names, input_dtypes, epoch=0):
    """Export a hybridized block that has been called at least once; every file is written
    atomically, ``<prefix>-inputs.json`` last.

    Parameters
    ----------
    block : HybridBlock
        Hybridized and run once (so its graph is cached).
    prefix : str
        Path prefix of the written files; its folder is created.
    input_names, input_dtypes : list of str
        Human names and dtypes of the positional inputs, in call order, one per input of the
        graph (recorded in ``<prefix>-inputs.json``, each dtype by its NumPy name; the graph's
        own input names are ``data0``, ``data1``, ...).
    epoch : int
        The number in the parameters file's name (``<prefix>-0000.params`` for 0).

    Returns
    -------
    dict
        The paths of the ``symbol``, ``params`` and ``inputs`` files.

    Raises
    ------
    TypeError
        ``block`` is not a HybridBlock; ``prefix`` is not a str or path; ``input_names`` or
        ``input_dtypes`` is not a list or tuple, or holds an item that is not a str (a dtype may
        also be a NumPy dtype).
    ValueError
        ``block`` has no cached graph (not hybridized, or not called since); ``prefix`` is
        empty; a name is empty or repeated; a dtype is not one of ``EXPORT_DTYPES`` (float16,
        float32, float64, int8, uint8, int32, int64, bool);
        ``input_names`` and ``input_dtypes`` differ in length, or from the number of the
        graph's inputs; ``epoch`` is not an integer >= 0. Nothing is written then.
    """
    input_dtypes = _check_export(block, prefix, input_names, input_dtypes, epoch)
    os.makedirs(os.path.dirname(os.path.abspath(prefix)), exist_ok=True)
    paths = _graph_files(prefix, epoch)
    staged_prefix = '%s.tmp%d' % (prefix, os.getpid())
    staged = _graph_files(staged_prefix, epoch)
    try:
        block.export(staged_prefix, epoch=epoch)
        with open(staged['symbol'], encoding='utf-8') as f:
            text = f.read()
        used = [op for op in fused.LIBRARY_OPS if '"{}"'.format(op) in text]
        for kind in ('params', 'symbol'):
            with atomic_path(paths[kind]) as tmp:
                os.replace(staged[kind], tmp)
    finally:
        for path in staged.values():
            if os.path.exists(path):
                os.remove(path)
    graph_names = ['data'] if len(input_names) == 1 else [
        'data%d' % i for i in range(len(input_names))]
    spec = {'graph_input_names': graph_names, 'input_names': list(input_names),
            'input_dtypes': input_dtypes, 'epoch': epoch,
            'mxnet_version': mx.__version__, 'numpy_mode': True}
    if used:
        spec['custom_operators'] = dict.fromkeys(
            used, 'the fused kernel library: gluon_attention.export.load(prefix) loads it '
                  '(with SymbolBlock.imports: `import gluon_attention`, or mx.library.load of '
                  'gluon_attention.fused.library_path(), first)')
    paths['inputs'] = '%s-inputs.json' % prefix
    atomic_write_json(paths['inputs'], spec)
    return paths


def import_block(prefix, ctx=None):
    """Load what :func:`export_block` wrote as a ``SymbolBlock`` (numpy mode).

    Returns ``(block, spec)`` where ``spec`` is the inputs JSON; see :func:`load`.
    """
    spec_path = '%s-inputs.json' % prefix
    if not os.path.exists(spec_path):
        _checks.fail('an exported model needs {}'.format(spec_path), prefix=prefix)
    with open(spec_path, encoding='utf-8') as f:
        spec = json.load(f)
    if set(fused.LIBRARY_OPS) & set(spec.get('custom_operators', {})) and not fused.load():
        raise RuntimeError('{} uses the fused kernel library, which cannot be loaded here: '
                           '{}'.format(prefix, fused.load_error()))
    files = _graph_files(prefix, spec['epoch'])
    # Inputs declared with their dtypes: the parameters' types are inferred from them (the
    # untyped inputs of SymbolBlock.imports warn "Cannot decide type for the following
    # arguments"). A spec without dtypes (none is written so) would fall back to float32.
    dtypes = spec.get('input_dtypes') or ['float32'] * len(spec['graph_input_names'])
    with mx.util.np_shape(True), mx.util.np_array(True):
        inputs = [mx.sym.var(name, dtype=dtype).as_np_ndarray()
                  for name, dtype in zip(spec['graph_input_names'], dtypes)]
        block = ExportedBlock(mx.sym.load(files['symbol']).as_np_ndarray(), inputs,
                              spec.get('input_names') or spec['graph_input_names'], dtypes)
        block.collect_params().load(files['params'], ctx or mx.cpu(), cast_dtype=True,
                                    dtype_source='saved')
    return block, spec


def load(prefix, ctx=None):
    """The documented reload path: the block :func:`export_block` wrote at ``prefix``, ready to
    call with the inputs named in ``<prefix>-inputs.json``.

    Reads ``<prefix>-inputs.json`` (input names and dtypes), loads this library's custom
    operators first when the graph uses them (so a fresh process needs no ``import`` order and
    never fails with ``Operator ga_fused_attention is not registered``), and declares each input
    with its dtype, so that no "Cannot decide type" warning is printed.

    Parameters
    ----------
    prefix : str
        As given to :func:`export_block` (``<prefix>-symbol.json``, ``-0000.params``,
        ``-inputs.json``).
    ctx : mx.Context, optional
        Where the parameters go (default CPU).

    Returns
    -------
    ExportedBlock (an mx.gluon.SymbolBlock)
        Numpy mode; call it positionally with ``mx.np`` arrays of the recorded dtypes (a call
        with another dtype, e.g. float16 inputs to a graph exported from float32 calls, raises
        TypeError naming the input and its recorded dtype).

    Raises
    ------
    ValueError
        ``<prefix>-inputs.json`` is missing.
    RuntimeError
        The graph uses the fused kernel library and it cannot be loaded here (not built, or
        another MXNet).
    """
    return import_block(prefix, ctx)[0]


def _run(block, batch, dtypes, ctx):
    """Outputs of ``block`` on the first ``len(dtypes)`` items of ``batch`` as NumPy arrays."""
    inputs = [mx.np.array(x, dtype=dtype, ctx=ctx) for x, dtype in zip(batch, dtypes)]
    out = block(*inputs)
    flat = []
    for item in (out if isinstance(out, (list, tuple)) else [out]):
        flat.extend(item if isinstance(item, (list, tuple)) else [item])
    return [o.asnumpy() for o in flat if o is not None]      # a cell's weights may be None


def _max_abs_diff(want, got):
    """Largest absolute difference in float64; equal values (NaN with NaN, inf with inf) count 0
    and any other NaN counts as inf."""
    if want.shape != got.shape:
        return float('inf')
    same = (want == got) | (onp.isnan(want) & onp.isnan(got))
    with onp.errstate(invalid='ignore'):        # inf - inf where both hold one: counted 0
        delta = onp.where(same, 0.0, onp.abs(want.astype('float64') - got.astype('float64')))
    return float(onp.nan_to_num(delta, nan=onp.inf).max()) if delta.size else 0.0


def export_and_check(block, prefix, batches, input_names, input_dtypes, ctx=None):
    """Hybridize, export, reload with ``SymbolBlock.imports`` and compare on every batch.

    Parameters
    ----------
    block : HybridBlock
        Initialized. Hybridized here when it is not yet (no static shapes, so the exported graph
        takes any batch size B and any sequence lengths).
    prefix : str
        Path prefix: ``<prefix>-symbol.json``, ``<prefix>-0000.params`` and
        ``<prefix>-inputs.json`` are written atomically (its folder is created).
    batches : sequence of sequences of arrays
        Each batch holds the positional inputs in call order (NumPy or ``mx.np`` arrays, any B
        and lengths); items beyond ``len(input_names)`` (labels, indices) are ignored.
        ``batches[0]`` builds the graph.
    input_names, input_dtypes : list of str
        Names (recorded in the inputs JSON) and dtypes (used to build the inputs) of the
        positional inputs.
    ctx : mx.Context, optional
        Where both blocks run (default CPU).

    Returns
    -------
    (SymbolBlock, dict)
        The reloaded block (graph inputs ``data0``, ``data1``, ... in call order; ``data`` for a
        single input) and the report: ``max_abs_diff`` (float, largest absolute difference over
        every output of every batch, computed in float64), ``num_batches`` and the ``symbol``,
        ``params`` and ``inputs`` paths.

    Raises
    ------
    TypeError, ValueError
        ``batches`` is empty (ValueError); bad ``input_names`` or ``input_dtypes``, checked
        before the block runs, or another argument :func:`export_block` refuses.
    """
    if not batches:
        _checks.fail('export_and_check needs at least one batch', num_batches=0)
    input_dtypes = _check_input_spec(input_names, input_dtypes)
    ctx = ctx or mx.cpu()
    with mx.util.np_shape(True), mx.util.np_array(True):
        if not getattr(block, '_active', False):
            block.hybridize()
        _run(block, batches[0], input_dtypes, ctx)
        paths = export_block(block, prefix, input_names, input_dtypes)
        reloaded, _ = import_block(prefix, ctx)
        diff = 0.0
        for batch in batches:
            for want, got in zip(_run(block, batch, input_dtypes, ctx),
                                 _run(reloaded, batch, input_dtypes, ctx)):
                diff = max(diff, _max_abs_diff(want, got))
    return reloaded, dict(paths, max_abs_diff=diff, num_batches=len(batches))


def run_exported(prefix, batches, ctx=None):
    """Run an exported model on a list of input tuples; returns lists of NumPy outputs."""
    block, spec = import_block(prefix, ctx)
    with mx.util.np_shape(True), mx.util.np_array(True):
        return [_run(block, batch, [x.dtype for x in batch], ctx or mx.cpu())
                for batch in batches]
