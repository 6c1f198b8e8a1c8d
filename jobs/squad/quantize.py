"""``run_squad.py quantize``: the fine-tuned QA model in INT8, for ONNX Runtime.

The route, chosen by measurement on the demo's 626 evaluation questions (docs/performance.md):
the model folder's inference graph (:class:`~gluon_attention.models.qa.QAInference`) is
exported in the fusable ONNX form (:func:`~.onnx_check.export_qa_onnx`), fused by ONNX
Runtime's transformer optimizer (one ``Attention``, two ``SkipLayerNormalization`` and one
``BiasGelu`` per layer) and its weights quantized to INT8 by ONNX Runtime's ``quantize_dynamic``
(:mod:`gluon_attention.export.onnx_optimize`): every encoder projection and attention in
INT8, activations quantized per call, and the QA head's dense layers too (``--int8-head 0``
keeps them float32; on the demo model, 626 questions, float32 F1 54.47: per-channel INT8
everywhere F1 53.97 with 580 answers kept, the head in float32 53.93 / 581, per-tensor INT8
53.90 / 529). Written to ``<output-dir>/int8/``: ``qa-*`` (the MXNet export),
``qa.onnx`` (float32, fusable), ``qa-optimized.onnx`` (float32, fused), ``qa-int8.onnx`` and
``int8.json`` (options, operator counts). ``evaluate`` and ``predict`` run any of the ``.onnx``
files with ``--onnx-model``.
"""
import dataclasses
import json
import os

import mxnet as mx
import numpy as onp

from gluon_attention.export.block import export_block
from gluon_attention.models.qa import QAInference
from gluon_attention.pipelines import load_qa_folder, load_qa_model
from gluon_attention.pipelines.features import INPUT_DTYPES, INPUT_NAMES

from ..engine.common import atomic_write_json
from .folder import model_folder

__all__ = ['HEAD_PREFIX', 'int8_folder', 'QuantizeJob', 'prepare_quantize', 'run_quantize',
           'write_int8_model']

# The QA head's nodes in the exported graph (the model's own name scope), for --int8-head 0.
HEAD_PREFIX = 'modelforqaconditional'


def int8_folder(config):
    """``<output-dir>/int8``: where ``quantize`` writes."""
    return os.path.join(config.output_dir, 'int8')


def _graph_inputs(length=16):
    """One batch of two placeholder features (builds the graph; values do not matter)."""
    return {'input_ids': onp.ones((2, length), 'int32'),
            'token_types': onp.zeros((2, length), 'int32'),
            'valid_length': onp.array([length, length // 2], 'int32'),
            'p_mask': onp.ones((2, length), 'float32')}


def write_int8_model(inference, folder, num_heads, hidden_size, per_channel=True,
                     int8_head=True):
    """Export ``inference`` (a :class:`QAInference`) to ``folder`` and write its float32 ONNX
    files and the INT8 one (see the module docstring). Returns the ``int8.json`` content."""
    from gluon_attention.export.onnx_optimize import (  # pylint: disable=import-outside-toplevel
        optimize_and_quantize)
    # pylint: disable-next=import-outside-toplevel
    from gluon_attention.pipelines.onnx import export_qa_onnx
    inference.hybridize(static_alloc=True)
    batch = _graph_inputs()
    inference(*[mx.np.array(batch[k], dtype=batch[k].dtype) for k in INPUT_NAMES])
    prefix = os.path.join(folder, 'qa')
    export_block(inference, prefix, INPUT_NAMES, INPUT_DTYPES)
    report = optimize_and_quantize(export_qa_onnx(prefix), prefix, num_heads, hidden_size,
                                   per_channel, exclude=() if int8_head else (HEAD_PREFIX,))
    report['int8_head'] = bool(int8_head)
    atomic_write_json(os.path.join(folder, 'int8.json'), report)
    return report


@dataclasses.dataclass(frozen=True)
class QuantizeJob:
    """What :func:`prepare_quantize` reads for :func:`run_quantize`: the saved model folder and
    its encoder's ``num_attention_heads`` and ``hidden_size`` (``config.json``), which ONNX
    Runtime's optimizer needs to fuse the attention."""
    model_dir: str
    num_heads: int
    hidden_size: int


def prepare_quantize(config):
    """The model folder and its encoder's heads and units (a :class:`QuantizeJob`); ImportError
    without the ``[onnx]`` extra (onnxruntime, sympy, onnx 1.17)."""
    import onnxruntime.quantization  # noqa: F401 pylint: disable=import-outside-toplevel,unused-import
    import sympy  # noqa: F401 pylint: disable=import-outside-toplevel,unused-import
    folder = model_folder(config)
    with open(os.path.join(folder, 'config.json'), encoding='utf-8') as handle:
        encoder = json.load(handle)
    return QuantizeJob(folder, encoder['num_attention_heads'], encoder['hidden_size'])


def run_quantize(config, job):
    """Load the model folder, write ``<output-dir>/int8/`` and say what was written."""
    model = load_qa_model(load_qa_folder(job.model_dir), [mx.cpu()])
    inference = QAInference(model, config.start_top_n, config.end_top_n)
    report = write_int8_model(inference, int8_folder(config), job.num_heads, job.hidden_size,
                              config.per_channel, config.int8_head)
    counts = report['optimized_counts']
    print('fused: {} Attention, {} SkipLayerNormalization, {} BiasGelu ({} nodes); INT8 model '
          'written to {} (run it with evaluate/predict --onnx-model)'.format(
              counts.get('Attention', 0), counts.get('SkipLayerNormalization', 0),
              counts.get('BiasGelu', 0), counts['nodes'], report['int8']))
    return 0
