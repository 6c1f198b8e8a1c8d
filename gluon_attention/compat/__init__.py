"""A PyTorch-style ``attend`` function and its helpers on MXNet numpy arrays."""

__all__ = []   # a package of modules: each names its public API in its own __all__
