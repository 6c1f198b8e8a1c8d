"""Documented path of the MXNet export helpers: :mod:`gluon_attention.tasks.export.block`.

``export_block(block, prefix, input_names, input_dtypes)`` writes the graph, its parameters and
``<prefix>-inputs.json``; ``load(prefix)`` reloads it in any process (the library's operators
loaded, no warning).

``python -m gluon_attention.export PREFIX INPUTS.npz OUTPUTS.npz`` runs an exported graph.
"""
import sys

from .tasks.export.block import (  # noqa: F401
    _main, export_block, import_block, load, run_exported)

if __name__ == '__main__':
    sys.exit(_main(sys.argv[1:]))
