"""Export a hybridized block and load it back without its Python class.

``export_block`` writes ``<prefix>-symbol.json``, ``<prefix>-0000.params`` and
``<prefix>-inputs.json`` (input names, dtypes and order). ``import_block`` reloads them with
``SymbolBlock.imports``. ``python -m gluon_attention.export PREFIX INPUTS.npz OUTPUTS.npz`` runs an
exported model in a fresh process on saved batches (``batch<i>/<input name>`` arrays) and saves
its outputs (``batch<i>/out<j>``), which is how the scripts prove a reload gives the same results.
"""
import json
import os
import sys
import warnings

import mxnet as mx
import numpy as onp

from .. import _checks

from ..core import fused

__all__ = ['export_block', 'import_block', 'run_exported']


def export_block(block, prefix, input_names, input_dtypes, epoch=0):
    """Export a hybridized block that has been called at least once.

    Parameters
    ----------
    block : HybridBlock
        Hybridized and run once (so its graph is cached).
    prefix : str
        Path prefix of the written files; its folder is created.
    input_names, input_dtypes : list of str
        Human names and dtypes of the positional inputs, in call order (recorded in
        ``<prefix>-inputs.json``; the graph's own input names are ``data0``, ``data1``, ...).

    Returns
    -------
    dict with the paths of the symbol, params and inputs files.
    """
    if len(input_names) != len(input_dtypes):
        _checks.fail('input_names and input_dtypes must have the same length',
                     input_names=input_names, input_dtypes=input_dtypes)
    os.makedirs(os.path.dirname(os.path.abspath(prefix)), exist_ok=True)
    block.export(prefix, epoch=epoch)
    graph_names = ['data'] if len(input_names) == 1 else [
        'data%d' % i for i in range(len(input_names))]
    spec = {'graph_input_names': graph_names, 'input_names': list(input_names),
            'input_dtypes': list(input_dtypes), 'epoch': epoch,
            'mxnet_version': mx.__version__, 'numpy_mode': True}
    with open('%s-symbol.json' % prefix, encoding='utf-8') as f:
        if '"{}"'.format(fused.OP_NAME) in f.read():
            spec['custom_operators'] = {
                fused.OP_NAME: 'the fused attention kernel: `import gluon_attention` (or '
                               'mx.library.load of gluon_attention.fused.library_path()) '
                               'before SymbolBlock.imports'}
    paths = {'symbol': '%s-symbol.json' % prefix, 'params': '%s-%04d.params' % (prefix, epoch),
             'inputs': '%s-inputs.json' % prefix}
    tmp = paths['inputs'] + '.tmp'
    with open(tmp, 'w', encoding='utf-8') as f:
        json.dump(spec, f, indent=2)
    os.replace(tmp, paths['inputs'])
    return paths


def import_block(prefix, ctx=None):
    """Load what :func:`export_block` wrote as a ``SymbolBlock`` (numpy mode).

    Returns ``(block, spec)`` where ``spec`` is the inputs JSON. Raises ValueError when a file is
    missing, RuntimeError when the graph needs the fused kernel and it cannot be loaded.
    """
    spec_path = '%s-inputs.json' % prefix
    if not os.path.exists(spec_path):
        _checks.fail('an exported model needs {}'.format(spec_path), prefix=prefix)
    with open(spec_path, encoding='utf-8') as f:
        spec = json.load(f)
    if fused.OP_NAME in spec.get('custom_operators', {}) and not fused.load():
        raise RuntimeError('{} uses the fused attention kernel, which cannot be loaded here: '
                           '{}'.format(prefix, fused.load_error()))
    params = '%s-%04d.params' % (prefix, spec['epoch'])
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')     # "Cannot decide type for the following arguments"
        with mx.util.np_shape(True), mx.util.np_array(True):
            block = mx.gluon.SymbolBlock.imports('%s-symbol.json' % prefix,
                                                 spec['graph_input_names'], params,
                                                 ctx=ctx or mx.cpu())
    return block, spec


def run_exported(prefix, batches, ctx=None):
    """Run an exported model on a list of input tuples; returns lists of NumPy outputs."""
    block, spec = import_block(prefix, ctx)
    ctx = ctx or mx.cpu()
    outputs = []
    with mx.util.np_shape(True), mx.util.np_array(True):
        for batch in batches:
            inputs = [mx.np.array(x, dtype=x.dtype, ctx=ctx) for x in batch]
            out = block(*inputs)
            out = out if isinstance(out, (list, tuple)) else [out]
            outputs.append([o.asnumpy() for o in out])
    return outputs


def _main(argv):
    if len(argv) != 3:
        print('usage: python -m gluon_attention.export PREFIX INPUTS.npz OUTPUTS.npz')
        return 2
    prefix, inputs_path, outputs_path = argv
    _, spec = import_block(prefix)
    with onp.load(inputs_path) as data:
        count = len({k.split('/')[0] for k in data.files})
        batches = [[data['batch%d/%s' % (i, n)] for n in spec['input_names']]
                   for i in range(count)]
    results = run_exported(prefix, batches)
    arrays = {'batch%d/out%d' % (i, j): o for i, outs in enumerate(results)
              for j, o in enumerate(outs)}
    tmp = outputs_path + '.tmp.npz'
    onp.savez(tmp, **arrays)
    os.replace(tmp, outputs_path)
    print('ran {} batches through {}'.format(count, prefix))
    return 0


if __name__ == '__main__':
    sys.exit(_main(sys.argv[1:]))
