"""The NLI job (``scripts/train_nli.py``): decomposable attention trained, scored and exported on
SNLI. Imports :mod:`gluon_attention.tasks.engine` and :mod:`gluon_attention.tasks.export`,
never ``squad``."""

__all__ = []   # a package of modules: each names its public API in its own __all__
