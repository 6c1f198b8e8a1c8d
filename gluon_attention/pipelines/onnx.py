"""The exported QA model in ONNX Runtime (the ``[onnx]`` extra): the ``.onnx`` file of an
exported ``QAInference`` graph (:func:`export_qa_onnx`), run on QA features
(:func:`run_onnx_squad`) or called like the block (:class:`OnnxQABlock`, which
:class:`~gluon_attention.pipelines.QAPredictor` and the SQuAD job's ``evaluate --onnx-model``
use).
"""
import mxnet as mx

from .._checks import check_positive_int
from ..data import squad
from ..export.onnx import export_onnx, onnx_session, run_onnx

__all__ = ['QA_INPUT_SHAPES', 'QA_OUTPUT_NAMES', 'OnnxQABlock', 'export_qa_onnx',
           'run_onnx_squad']

# The QA graph's inputs (input_ids, token_types, valid_length, p_mask) and outputs.
QA_INPUT_SHAPES = (('batch', 'sequence'), ('batch', 'sequence'), ('batch',),
                   ('batch', 'sequence'))
QA_OUTPUT_NAMES = ('start_top_logits', 'start_top_index', 'end_top_logits', 'end_top_index',
                   'answerable_logits')


def export_qa_onnx(prefix, fusable=True):
    """``<prefix>.onnx`` from the exported ``QAInference`` at ``prefix`` (the SQuAD job's
    ``<output-dir>/export/qa``), with free batch and sequence axes and named outputs; returns
    its path. ``fusable`` (default): in the form ONNX Runtime's optimizer fuses
    (:mod:`gluon_attention.export.onnx_fusable`): the outputs read no padded position where
    ``p_mask`` blocks them, as in every SQuAD feature, so they stay MXNet's."""
    return export_onnx(prefix, input_shapes=QA_INPUT_SHAPES, output_names=QA_OUTPUT_NAMES,
                       fusable=fusable)


class OnnxQABlock:
    """A QA ONNX file (``qa.onnx``, the optimized or the INT8 one) called like a ``QAInference``
    block: ``block(input_ids, token_types, valid_length, p_mask)`` on mx.np arrays (int32
    (B, T), int32 (B, T), int32 (B,), float32 (B, T)) returns its five outputs as mx.np
    arrays, computed in ONNX Runtime on the CPU (``threads`` intra-op threads, default
    ``OMP_NUM_THREADS``)."""

    def __init__(self, onnx_path, threads=None):
        self.session = onnx_session(onnx_path, threads)
        self.names = [i.name for i in self.session.get_inputs()]

    def __call__(self, *inputs):
        outputs = run_onnx(self.session, dict(zip(self.names, (x.asnumpy() for x in inputs))))
        return [mx.np.array(o, dtype=o.dtype) for o in outputs]


def run_onnx_squad(onnx_path, features, batch_size=32, threads=None):
    """QA outputs of the ONNX model (a path, or an ONNX Runtime session) for each feature: a
    list of 5-tuples of NumPy arrays (``start_top_logits``, ``start_top_index``,
    ``end_top_logits``, ``end_top_index``, ``answerable_logits``), in feature order. Batches
    group features of similar length, padded to a multiple of 8 tokens."""
    check_positive_int('batch_size', batch_size)
    session = onnx_path if hasattr(onnx_path, 'run') else onnx_session(onnx_path, threads)
    names = [i.name for i in session.get_inputs()]
    outputs = [None] * len(features)
    for index in squad.length_sorted_batches(features, batch_size):
        arrays = squad.batchify([features[k] for k in index], round_to=8)
        result = run_onnx(session, {n: arrays[n] for n in names})
        for row, k in enumerate(index):
            outputs[k] = tuple(r[row] for r in result)
    return outputs
