"""Data pipelines. SQuAD: ``squad`` (the whole QA data path; reading and shipped files) built on
``squad_features``, ``squad_metric`` and ``squad_decode``. SNLI: ``snli``."""
