"""Leaving Python: a hybridized block exported and reloaded with MXNet (:mod:`.block`), and an
exported graph converted to ONNX and run in ONNX Runtime (:mod:`.onnx` and its converters; the
``[onnx]`` extra, imported only when those modules are).

``export_block(block, prefix, input_names, input_dtypes)`` writes the graph, its parameters and
``<prefix>-inputs.json``; ``load(prefix)`` reloads it in any process (the library's operators
loaded, no warning). ``python -m gluon_attention.export PREFIX INPUTS.npz OUTPUTS.npz`` runs an
exported graph (:mod:`.__main__`).
"""
from .block import export_and_check, export_block, import_block, load, run_exported

__all__ = ['export_block', 'import_block', 'load', 'run_exported', 'export_and_check']
