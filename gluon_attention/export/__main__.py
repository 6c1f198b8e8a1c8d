"""``python -m gluon_attention.export PREFIX INPUTS.npz OUTPUTS.npz``: run an exported graph on
the batches of ``INPUTS.npz`` (arrays ``batch<i>/<input name>``) and write its outputs to
``OUTPUTS.npz`` (``batch<i>/out<j>``); a missing or wrong file is one line on stderr and status 2.
"""
import os
import sys

import numpy as onp

from .. import _checks as checks
from ..files import atomic_path
from .block import import_block, run_exported

__all__ = ['main']


def main(argv=None):
    """``python -m gluon_attention.export PREFIX INPUTS.npz OUTPUTS.npz``; a missing or wrong
    file is one line on stderr and status 2."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 3:
        print('usage: python -m gluon_attention.export PREFIX INPUTS.npz OUTPUTS.npz')
        return 2
    prefix, inputs_path, outputs_path = argv
    try:
        batches, spec = _read_inputs(prefix, inputs_path)
        results = run_exported(prefix, batches)
    except (ValueError, OSError, RuntimeError) as err:
        print('python -m gluon_attention.export: error: {}'.format(err), file=sys.stderr)
        return 2
    arrays = {'batch%d/out%d' % (i, j): o for i, outs in enumerate(results)
              for j, o in enumerate(outs)}
    with atomic_path(outputs_path) as tmp:
        with open(tmp, 'wb') as handle:
            onp.savez(handle, **arrays)
    print('ran {} batches through {}'.format(len(batches), prefix))
    return 0


def _read_inputs(prefix, inputs_path):
    """(batches, spec) of the command line: the input arrays of ``INPUTS.npz`` in the exported
    graph's input order; ValueError naming a missing file or array."""
    if not os.path.isfile(inputs_path):
        checks.fail('INPUTS.npz must be an existing .npz file (arrays batch<i>/<input name>)',
                     inputs=inputs_path)
    _, spec = import_block(prefix)
    with onp.load(inputs_path) as data:
        count = len({k.split('/')[0] for k in data.files})
        wanted = ['batch%d/%s' % (i, n) for i in range(count) for n in spec['input_names']]
        missing = [key for key in wanted if key not in data.files]
        if missing or not count:
            checks.fail('INPUTS.npz must hold batch<i>/<input name> arrays for the inputs {} of '
                         '{}'.format(spec['input_names'], prefix), inputs=inputs_path,
                         missing=missing[:3])
        return [[data['batch%d/%s' % (i, n)] for n in spec['input_names']]
                for i in range(count)], spec


if __name__ == '__main__':
    sys.exit(main())
