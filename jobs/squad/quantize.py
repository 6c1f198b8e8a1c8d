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
``qa.onnx`` (float32, fusable), ``qa-optimized.onnx`` (float32, fused), ``qa-int8.onnx``
(with calibrated scales, ``qa-int8-dynamic.onnx`` beside it: the same with dynamic ones) and
``int8.json`` (every setting, the CPU's instruction sets, the ONNX Runtime version, operator
counts). ``evaluate`` and ``predict`` run any of the ``.onnx`` files with ``--onnx-model``.

Faithfulness guards: the quantize step fails (ValueError, exit status 2) when the optimizer
fused fewer ``Attention`` nodes than the encoder has layers, when a fused attention was not
quantized, or when a node kept in float32 was quantized anyway; ``--int8-ffn 0`` (the default)
keeps the encoder's feed-forward products in float32 (with them in INT8 the demo model's answers
moved away from float32's: start/end argmax agreement 83.7%, F1 +0.97; float32 there: 95.2%,
F1 +0.12, docs/performance.md; the speed-up over float32 is then gone); ``--int8-head 0`` keeps
every product of the QA head (every node named after it, copies included) in float32, listed
by exact name; weights are 7-bit (``reduce_range``) on a CPU without VNNI (AVX512-VNNI, AVX-VNNI or AMX),
where 8-bit products can saturate. With ``--activation-scales calibrated`` (the default) the
activation scales are constants measured on training features
(:mod:`gluon_attention.export.onnx_calibrate`), so a feature's answer does not depend on
the batch it is in.
"""
import dataclasses
import json
import os

import mxnet as mx
import numpy as onp

from gluon_attention.checks import fail
from gluon_attention.data import squad
from gluon_attention.export.block import export_block
from gluon_attention.hardware import cpu_flags as read_cpu_flags
from gluon_attention.models.qa import QAInference
from gluon_attention.pipelines import load_qa_folder, load_qa_model
from gluon_attention.pipelines.features import INPUT_DTYPES, INPUT_NAMES, eval_features
from gluon_attention.pipelines.folder import read_qa_config

from ..engine.common import atomic_write_json
from .data import data_path
from .folder import model_folder

__all__ = ['HEAD_PREFIXES', 'VNNI_FLAGS', 'int8_folder', 'head_node_names', 'ffn_node_names',
           'cpu_flags',
           'check_int8_counts', 'QuantizeJob', 'prepare_quantize', 'run_quantize',
           'write_int8_model', 'calibration_batches']

#: The QA head's nodes in the exported graph, for --int8-head 0: the conditional head's (the
#: model's own name scope) and the span head's of a folder converted from GluonNLP 0.10.
HEAD_PREFIXES = ('modelforqaconditional', 'spanhead')
#: The encoder's feed-forward activation as ONNX Runtime's optimizer leaves it: GELU fused with
#: its bias (``BiasGelu``), or ReLU (ERNIE) after its bias ``Add``.
FFN_ACTIVATIONS = ('BiasGelu', 'Gelu', 'Relu')
#: CPU flags (/proc/cpuinfo) with 8-bit dot products that do not saturate: reduce_range is off.
VNNI_FLAGS = ('avx512_vnni', 'avx_vnni', 'amx_int8')
_RECORDED_FLAGS = ('sse4_1', 'avx2', 'fma', 'avx512f', 'avx512bw', 'avx512_vnni', 'avx_vnni',
                   'avx512_bf16', 'amx_tile', 'amx_int8', 'amx_bf16')


def int8_folder(config):
    """``<output-dir>/int8``: where ``quantize`` writes."""
    return os.path.join(config.output_dir, 'int8')


def _graph_inputs(length=16):
    """One batch of two placeholder features (builds the graph; values do not matter)."""
    return {'input_ids': onp.ones((2, length), 'int32'),
            'token_types': onp.zeros((2, length), 'int32'),
            'valid_length': onp.array([length, length // 2], 'int32'),
            'p_mask': onp.ones((2, length), 'float32')}


def head_node_names(model):
    """Exact names of the QA head's products in a fused ``ModelProto``: every ``MatMul`` or
    ``Attention`` node whose name holds one of :data:`HEAD_PREFIXES` (the exporter's copies
    such as ``idx_152_modelforqaconditional0_dense0_fwd__matmul2`` included)."""
    return [node.name for node in model.graph.node
            if node.op_type in ('MatMul', 'Attention')
            and any(prefix in node.name for prefix in HEAD_PREFIXES)]


def ffn_node_names(model):
    """Exact names of the encoder's feed-forward products in a fused ``ModelProto``: each
    ``MatMul`` outside the QA head whose output an activation of :data:`FFN_ACTIVATIONS` reads,
    directly or through a bias ``Add`` (the first product), or that reads an activation's
    output (the second)."""
    nodes = model.graph.node
    producer = {name: node for node in nodes for name in node.output}
    activations = [node for node in nodes if node.op_type in FFN_ACTIVATIONS]
    act_out = {name for node in activations for name in node.output}
    act_in = {name for node in activations for name in node.input}
    act_in |= {bias_input for name in act_in if name in producer
               and producer[name].op_type == 'Add' for bias_input in producer[name].input}
    head = set(head_node_names(model))
    return [n.name for n in nodes if n.op_type == 'MatMul' and n.name not in head
            and (set(n.output) & act_in or set(n.input) & act_out)]


def _float32_nodes(int8_head, int8_ffn):
    """The ``exclude`` callable of :func:`optimize_and_quantize` for these options."""
    def names(model):
        kept = [] if int8_head else head_node_names(model)
        return kept + ([] if int8_ffn else ffn_node_names(model))
    return names


def cpu_flags(path='/proc/cpuinfo'):
    """The instruction sets that INT8 results depend on, as the CPU reports them (sorted list of
    str; empty where ``path`` cannot be read): :data:`_RECORDED_FLAGS` of
    :func:`gluon_attention.hardware.cpu_flags`."""
    flags = read_cpu_flags(path)
    return sorted(f for f in _RECORDED_FLAGS if f in flags)


def check_int8_counts(report, num_layers):
    """ValueError (with the counts) unless the optimizer fused ``num_layers`` ``Attention``
    nodes and every one of them was quantized (``QAttention``) unless excluded."""
    fused = report['optimized_counts'].get('Attention', 0)
    quantized = report['int8_counts'].get('QAttention', 0)
    excluded = report['excluded_attention']
    if fused != num_layers or quantized != fused - excluded:
        fail('expected one fused Attention per encoder layer, each quantized unless excluded '
             "(ONNX Runtime's optimizer or quantizer did not do it)", num_layers=num_layers,
             fused_attention=fused, quantized_attention=quantized, excluded_attention=excluded)


def calibration_batches(examples, tokenizer, qa_config, count, batch_size=32):
    """(batches, valid lengths): the first ``count`` evaluation-length features of ``examples``
    as model inputs, ``batch_size`` a batch (as :func:`activation_ranges` takes them)."""
    features = eval_features(examples, tokenizer, qa_config['eval_max_seq_length'],
                             qa_config['max_query_length'])[:count]
    batches, lengths = [], []
    for begin in range(0, len(features), batch_size):
        arrays = squad.batchify(features[begin:begin + batch_size], round_to=8)
        batches.append({k: arrays[k] for k in INPUT_NAMES})
        lengths.append(arrays['valid_length'])
    return batches, lengths


def _calibrate(report, calibration):
    from gluon_attention.export.onnx_calibrate import (  # pylint: disable=import-outside-toplevel
        activation_ranges, fix_activation_scales)
    batches, lengths = calibration
    dynamic = report['int8'][:-len('.onnx')] + '-dynamic.onnx'
    os.replace(report['int8'], dynamic)
    ranges = activation_ranges(dynamic, batches, lengths)
    report['calibrated_activations'] = fix_activation_scales(dynamic, ranges, report['int8'])
    report['calibration_features'] = int(sum(len(v) for v in lengths))
    report['int8_dynamic'] = dynamic


#: What marks ``<output-dir>/int8`` finished: removed before a run writes and when it fails.
FINISHED_FILES = ('qa-int8.onnx', 'qa-int8-dynamic.onnx', 'int8.json')


def write_int8_model(inference, folder, *args, **options):
    """:func:`_write_int8_model`, leaving no file that looks finished when it fails: the INT8
    models and ``int8.json`` of :data:`FINISHED_FILES` (an earlier run's included) are removed
    first and again on any exception, which is raised again. Each file is itself written
    atomically, so a finished ``int8.json`` means every file it names was written whole."""
    def remove_finished():
        for name in FINISHED_FILES:
            if os.path.exists(os.path.join(folder, name)):
                os.remove(os.path.join(folder, name))
    remove_finished()
    try:
        return _write_int8_model(inference, folder, *args, **options)
    except BaseException:
        remove_finished()
        raise


def _write_int8_model(inference, folder, num_heads, hidden_size, per_channel=True,
                      int8_head=True, num_layers=None, calibration=None, reduce_range=None,
                      int8_ffn=True):
    """Export ``inference`` (a :class:`QAInference`) to ``folder`` and write its float32 ONNX
    files and the INT8 one (see the module docstring). ``int8_head``, ``int8_ffn``: False keeps
    the QA head's, the encoder's feed-forward products in float32. ``num_layers``: the encoder's
    layers
    (checked by :func:`check_int8_counts` when given); ``calibration``: (batches, valid
    lengths) of :func:`calibration_batches` for calibrated activation scales, None for dynamic
    ones; ``reduce_range``: None decides by the CPU (:data:`VNNI_FLAGS`). Returns the
    ``int8.json`` content."""
    import onnx  # pylint: disable=import-outside-toplevel
    import onnxruntime  # pylint: disable=import-outside-toplevel
    from gluon_attention.export.onnx_optimize import (  # pylint: disable=import-outside-toplevel
        optimize_and_quantize)
    # pylint: disable-next=import-outside-toplevel
    from gluon_attention.pipelines.onnx import export_qa_onnx
    inference.hybridize(static_alloc=True)
    batch = _graph_inputs()
    inference(*[mx.np.array(batch[k], dtype=batch[k].dtype) for k in INPUT_NAMES])
    prefix = os.path.join(folder, 'qa')
    export_block(inference, prefix, INPUT_NAMES, INPUT_DTYPES)
    flags = cpu_flags()
    if reduce_range is None:
        reduce_range = not set(VNNI_FLAGS) & set(flags)
    report = optimize_and_quantize(export_qa_onnx(prefix), prefix, num_heads, hidden_size,
                                   per_channel, reduce_range=reduce_range,
                                   exclude=_float32_nodes(int8_head, int8_ffn))
    report.update(int8_head=bool(int8_head), int8_ffn=bool(int8_ffn), weight_type='QInt8',
                  activation_type='QUInt8',
                  op_types_to_quantize=['MatMul', 'Attention'], cpu_flags=flags,
                  onnxruntime_version=onnxruntime.__version__, onnx_version=onnx.__version__,
                  activation_scales='dynamic' if calibration is None else 'calibrated')
    if num_layers is not None:
        check_int8_counts(report, num_layers)
    if calibration is not None:
        _calibrate(report, calibration)
    atomic_write_json(os.path.join(folder, 'int8.json'), report)
    return report


@dataclasses.dataclass(frozen=True)
class QuantizeJob:
    """What :func:`prepare_quantize` reads for :func:`run_quantize`: the saved model folder, its
    encoder's ``num_attention_heads``, ``hidden_size`` and ``num_hidden_layers``
    (``config.json``), which ONNX Runtime's optimizer needs to fuse the attention and the check
    counts, and the calibration questions (those of ``--calibration-file`` in the folder's
    trained articles; empty for ``--activation-scales dynamic``)."""
    model_dir: str
    num_heads: int
    hidden_size: int
    num_layers: int
    calibration_examples: tuple = ()


def _calibration_examples(config, folder):
    """The questions of ``--calibration-file`` that calibrate: those of the folder's trained
    articles, or, for a folder that records none (``trained_titles`` absent: converted from
    GluonNLP 0.10, whose training data is not known), all of them (said on stdout)."""
    if config.activation_scales == 'dynamic':
        return ()
    trained = read_qa_config(folder).get('trained_titles')
    examples = squad.read_squad(data_path(config.calibration_file, config.data_dir))
    if trained is None:
        print('calibration: {} records no trained articles; every question of {} '
              'calibrates'.format(folder, config.calibration_file))
        return tuple(examples)
    examples = [e for e in examples if e.title in set(trained)]
    if not examples:
        fail("--calibration-file must hold questions of the model's trained articles (the "
             'trained_titles of its qa_config.json)', calibration_file=config.calibration_file,
             trained_titles=len(trained))
    return tuple(examples)


def prepare_quantize(config):
    """The model folder, its encoder's sizes and the calibration questions (a
    :class:`QuantizeJob`); ImportError without the ``[onnx]`` extra (onnxruntime, sympy, onnx
    1.17); ValueError when the calibration file holds none of the trained articles of a
    folder that records them."""
    import onnxruntime.quantization  # noqa: F401 pylint: disable=import-outside-toplevel,unused-import
    import sympy  # noqa: F401 pylint: disable=import-outside-toplevel,unused-import
    folder = model_folder(config)
    with open(os.path.join(folder, 'config.json'), encoding='utf-8') as handle:
        encoder = json.load(handle)
    return QuantizeJob(folder, encoder['num_attention_heads'], encoder['hidden_size'],
                       encoder['num_hidden_layers'], _calibration_examples(config, folder))


def run_quantize(config, job):
    """Load the model folder, write ``<output-dir>/int8/`` and say what was written; status 2
    with the counts when the checks of :func:`check_int8_counts` or the exclusions fail."""
    import sys  # pylint: disable=import-outside-toplevel
    qa_folder = load_qa_folder(job.model_dir)
    model = load_qa_model(qa_folder, [mx.cpu()])
    inference = QAInference(model, config.start_top_n, config.end_top_n)
    calibration = None
    if job.calibration_examples:
        calibration = calibration_batches(
            list(job.calibration_examples), qa_folder.tokenizer(), qa_folder.qa_config,
            config.calibration_features, config.eval_batch_size)
    try:
        report = write_int8_model(inference, int8_folder(config), job.num_heads,
                                  job.hidden_size, config.per_channel, config.int8_head,
                                  job.num_layers, calibration, int8_ffn=config.int8_ffn)
    except ValueError as err:
        print('run_squad.py: error: {}'.format(err), file=sys.stderr)
        return 2
    counts = report['optimized_counts']
    print('fused: {} Attention, {} SkipLayerNormalization, {} BiasGelu ({} nodes); INT8 model '
          '({} activation scales, reduce_range {}) written to {} (run it with evaluate/predict '
          '--onnx-model)'.format(counts.get('Attention', 0),
                                 counts.get('SkipLayerNormalization', 0),
                                 counts.get('BiasGelu', 0), counts['nodes'],
                                 report['activation_scales'], report['reduce_range'],
                                 report['int8']))
    return 0
