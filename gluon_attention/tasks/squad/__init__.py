"""The SQuAD 2.0 job (``scripts/run_squad.py``): options, data, training loop, model folder,
evaluation, prediction, the null threshold, the learning curve and the ONNX check; and its
prediction API, :class:`QAPredictor` (``tasks/squad/predictor.py``). Imports
:mod:`gluon_attention.tasks.engine` and :mod:`gluon_attention.tasks.export`, never ``nli``."""
from .predictor import QAAnswer, QAPredictor

__all__ = ['QAAnswer', 'QAPredictor']
