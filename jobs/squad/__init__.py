"""The SQuAD 2.0 job (``scripts/run_squad.py``): options, data, training loop, model folder,
evaluation, prediction, the threshold calibration, the learning curve, the ONNX check and the
INT8 model. Its prediction API is the library's :class:`gluon_attention.pipelines.QAPredictor`.
Imports :mod:`jobs.engine`, never ``nli``."""
