"""The QA inference pipeline: a fine-tuned model folder (:func:`load_qa_folder`, read once;
:func:`load_qa_model` its model)
answering questions about contexts (:class:`QAPredictor`: tokenize, chunk, run, decode), with
its null threshold in one form (:class:`NullThreshold`). The ONNX Runtime block
(:class:`~gluon_attention.pipelines.onnx.OnnxQABlock`, the ``[onnx]`` extra) is imported from
:mod:`gluon_attention.pipelines.onnx`, not here. Tokenizers and ``safetensors`` files need the
``[hf]`` extra, imported when a folder is loaded.
"""
from .folder import QAFolder, load_qa_folder
from .predictor import QAAnswer, QAPredictor, load_qa_model
from .threshold import NullThreshold

__all__ = ['QAPredictor', 'QAAnswer', 'NullThreshold', 'QAFolder', 'load_qa_folder',
           'load_qa_model']
