"""Data pipelines: SQuAD reading, features, official metric and span decoding (``squad``,
``squad_metric``)."""
