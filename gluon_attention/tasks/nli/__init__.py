"""The NLI job (``scripts/train_nli.py``): decomposable attention trained, scored and exported on
SNLI. Imports :mod:`gluon_attention.tasks.engine` and :mod:`gluon_attention.tasks.export`,
never ``squad``."""
