"""Documented path of the MXNet export helpers: :mod:`gluon_attention.tasks.export.block`.

``python -m gluon_attention.export PREFIX INPUTS.npz OUTPUTS.npz`` runs an exported graph.
"""
import sys

from .tasks.export.block import _main, export_block, import_block, run_exported  # noqa: F401

if __name__ == '__main__':
    sys.exit(_main(sys.argv[1:]))
