"""The NLI job (``scripts/train_nli.py``): decomposable attention trained, scored and exported on
SNLI. Imports :mod:`jobs.engine`, never ``squad``."""
