"""Leaving Python: a hybridized block exported and reloaded with MXNet (:mod:`.block`), and an
exported graph converted to ONNX and run in ONNX Runtime (:mod:`.onnx` and its converters).
Imports only :mod:`gluon_attention.tasks.engine` among the rooms of ``tasks``."""
