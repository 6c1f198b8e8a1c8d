"""Models built on the core: the Transformer/BERT encoder and its checkpoint loading, the SQuAD
QA head, the decomposable-attention NLI blocks. Imports the core only."""

__all__ = []   # a package of modules: each names its public API in its own __all__
