"""Leaving Python: a hybridized block exported and reloaded with MXNet (:mod:`.block`), and an
exported graph converted to ONNX and run in ONNX Runtime (:mod:`.onnx` and its converters).
Imports only :mod:`gluon_attention.tasks.engine` among the rooms of ``tasks``."""

__all__ = []   # a package of modules: each names its public API in its own __all__
