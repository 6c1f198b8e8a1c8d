"""Data pipelines. SQuAD: ``squad`` (the whole QA data path; reading and the named files) built on
``squad_features``, ``squad_metric`` and ``squad_decode``. SNLI: ``snli``."""

__all__ = []   # a package of modules: each names its public API in its own __all__
