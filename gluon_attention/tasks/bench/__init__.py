"""Benchmarks (``scripts/benchmark.py``): attention configurations and implementations timed
interleaved, and the whole-model rows (a SQuAD training step, the exported QA model). The top
room of ``tasks``: it may import every other."""

__all__ = []   # a package of modules: each names its public API in its own __all__
