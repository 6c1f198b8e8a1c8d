"""The jobs and their tools, one folder per product: ``engine`` (what the jobs share: training
loop, data parallel, optimiser, checkpoints, configs, launcher), ``export`` (MXNet and ONNX),
``squad`` and ``nli`` (the two jobs) and ``bench`` (benchmarks). The top layer: scripts call it."""

__all__ = []   # a package of modules: each names its public API in its own __all__
