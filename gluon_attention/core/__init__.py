"""The attention library: layouts, masks and the softmax family, the functional core, the cells,
query-chunked and fused (C++) attention. Imports nothing above it."""

__all__ = []   # a package of modules: each names its public API in its own __all__
