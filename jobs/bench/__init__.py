"""Benchmarks (``scripts/benchmark.py``, ``compare_transformers.py``): attention configurations
and implementations timed interleaved, and the whole-model rows (a SQuAD training step, the
exported QA model). The top room of ``jobs``: it may import every other but ``serve``."""
