"""Data pipelines. SQuAD: ``squad`` (the whole QA data path; reading and the named files) built on
``squad_features``, ``squad_metric`` and ``squad_decode``. SNLI: ``snli``."""
