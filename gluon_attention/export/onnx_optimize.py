"""ONNX Runtime's own tools on our ONNX files: the transformer optimizer and INT8 quantization.

:func:`optimize_onnx` runs ``onnxruntime.transformers.optimizer.optimize_model`` (model type
``'bert'``, its Python fusions only: ``opt_level=0``, which needs no torch) on a file written by
:func:`gluon_attention.export.onnx.export_onnx` with ``fusable=True``; each encoder layer becomes
one ``Attention``, two ``SkipLayerNormalization`` (bias folded in) and one ``BiasGelu``; as
in the export, no initializer of the written file feeds two nodes.
:func:`quantize_onnx` quantizes the weights of its ``MatMul`` and ``Attention`` nodes to INT8
(``quantize_dynamic``: activations quantized per call, per tensor; weights per tensor or per
output channel). :func:`optimize_and_quantize` runs one, then the other (the INT8 route of
``run_squad.py quantize``). They need onnxruntime and sympy (the ``[onnx]`` extra).
"""
import collections
import difflib
import os

from .. import _checks
from ..files import atomic_path
from .onnx_fusable import unshare_initializers

__all__ = ['FUSED_OPS', 'fusion_counts', 'optimize_onnx', 'quantize_onnx', 'check_node_names',
           'optimize_and_quantize']

# The fused operators counted by :func:`fusion_counts` (com.microsoft domain).
FUSED_OPS = ('Attention', 'MultiHeadAttention', 'SkipLayerNormalization', 'BiasGelu', 'Gelu',
             'EmbedLayerNormalization', 'LayerNormalization', 'QAttention',
             'DynamicQuantizeMatMul', 'MatMulInteger')


def fusion_counts(model_or_path):
    """``{op_type: count}`` over the nodes of an ONNX model (a path or a ``ModelProto``), every
    operator type included, plus ``'nodes'``: the total."""
    import onnx  # pylint: disable=import-outside-toplevel
    model = onnx.load(os.fspath(model_or_path)) if isinstance(
        model_or_path, (str, os.PathLike)) else model_or_path
    counts = collections.Counter(node.op_type for node in model.graph.node)
    counts['nodes'] = len(model.graph.node)
    return dict(counts)


def optimize_onnx(onnx_path, out_path, num_heads, hidden_size):
    """Fuse the transformer of ``onnx_path`` with ONNX Runtime's optimizer into ``out_path``.

    Parameters
    ----------
    onnx_path, out_path : str
        A ``fusable`` export (:func:`~gluon_attention.export.onnx.export_onnx`) and where to
        write the fused model (atomically).
    num_heads, hidden_size : int
        The encoder's heads K and units D (the optimizer checks them against the head-split
        reshapes).

    Returns
    -------
    dict, :func:`fusion_counts` of the written model.

    Raises
    ------
    ValueError
        ``num_heads`` or ``hidden_size`` not a positive int, or D not a multiple of K.
    """
    _checks.check_positive_int('num_heads', num_heads)
    _checks.check_positive_int('hidden_size', hidden_size)
    if hidden_size % num_heads:
        _checks.fail('hidden_size a multiple of num_heads', hidden_size=hidden_size,
                     num_heads=num_heads)
    from onnxruntime.transformers.optimizer import (  # pylint: disable=import-outside-toplevel
        optimize_model)
    import logging  # pylint: disable=import-outside-toplevel
    quiet = logging.getLogger('onnxruntime.transformers.optimizer')
    level, quiet.level = quiet.level, logging.ERROR       # "producer not matched: pytorch"
    try:
        model = optimize_model(os.fspath(onnx_path), model_type='bert', num_heads=num_heads,
                               hidden_size=hidden_size, opt_level=0)
    finally:
        quiet.level = level
    unshare_initializers(model.model.graph)        # the optimizer shares its own constants
    with atomic_path(out_path) as tmp:
        model.save_model_to_file(tmp)
    return fusion_counts(model.model)


def quantize_onnx(onnx_path, out_path, per_channel=True, exclude=(), reduce_range=False):
    """INT8 weights for the ``MatMul`` and ``Attention`` nodes of ``onnx_path``, written to
    ``out_path`` (ONNX Runtime's ``quantize_dynamic``: signed INT8 weights, per output channel
    when ``per_channel``, else per tensor, 7-bit with ``reduce_range``; activations quantized at
    run time). The nodes named in ``exclude`` (exact node names) stay float32.

    Returns
    -------
    dict
        :func:`fusion_counts` of the written model.

    Raises
    ------
    ValueError
        A name of ``exclude`` that is no node of ``onnx_path`` (the message lists the nearest
        node names), or an excluded node that the quantizer changed anyway.
    """
    import onnx  # pylint: disable=import-outside-toplevel
    from onnxruntime.quantization import (  # pylint: disable=import-outside-toplevel
        QuantType, quantize_dynamic)
    source = onnx.load(os.fspath(onnx_path)).graph.node
    kept = check_node_names(exclude, [node.name for node in source])
    import logging  # pylint: disable=import-outside-toplevel
    root = logging.getLogger()
    # it warns on the root logger for each fused output it cannot type (DefaultTensorType
    # below types them) and suggests a pre-processing step meant for image models
    level, root.level = root.level, max(root.level, logging.ERROR)
    try:
        with atomic_path(out_path) as tmp:
            quantize_dynamic(os.fspath(onnx_path), tmp, per_channel=bool(per_channel),
                             reduce_range=bool(reduce_range),
                             weight_type=QuantType.QInt8, nodes_to_exclude=kept,
                             op_types_to_quantize=['MatMul', 'Attention'],
                             # the fused com.microsoft outputs have no inferred type: float32
                             extra_options={'DefaultTensorType': 1})
    finally:
        root.level = level
    written = {(n.name, n.op_type) for n in onnx.load(os.fspath(out_path)).graph.node}
    wanted = {(n.name, n.op_type) for n in source if n.name in set(kept)}
    if wanted - written:
        _checks.fail('expected every excluded node to stay float32 in the INT8 model',
                     excluded=len(wanted), quantized_anyway=sorted(n for n, _ in wanted - written))
    return fusion_counts(out_path)


def check_node_names(names, known):
    """``names`` (exact node names) as a list, each checked to be in ``known``; ValueError
    naming the first unknown one and its nearest known names (difflib)."""
    names, known_set = list(names), set(known)
    for name in names:
        if name not in known_set:
            near = difflib.get_close_matches(name, sorted(known_set), n=5, cutoff=0.5)
            _checks.fail('expected exact node names of the model to keep in float32 (nearest: '
                         '{})'.format(', '.join(near) or 'none'), exclude=name)
    return names


def optimize_and_quantize(onnx_path, prefix, num_heads, hidden_size, per_channel=True,
                          exclude=(), reduce_range=False):
    """:func:`optimize_onnx` of the fusable float32 file ``onnx_path`` into
    ``<prefix>-optimized.onnx``, then :func:`quantize_onnx` of that into ``<prefix>-int8.onnx``
    (``per_channel``, ``exclude``, ``reduce_range`` as there; ``exclude`` may be a callable
    that takes the fused ``ModelProto`` and returns the node names). Returns ``onnx``,
    ``optimized``, ``int8`` (the paths), ``per_channel``, ``reduce_range``, ``excluded`` (the
    names), ``excluded_attention`` (how many of them are fused ``Attention`` nodes),
    ``optimized_counts`` and ``int8_counts`` (:func:`fusion_counts`)."""
    import onnx  # pylint: disable=import-outside-toplevel
    optimized, int8 = prefix + '-optimized.onnx', prefix + '-int8.onnx'
    fused = optimize_onnx(onnx_path, optimized, num_heads, hidden_size)
    graph = onnx.load(optimized)
    names = list(exclude(graph) if callable(exclude) else exclude)
    counts = quantize_onnx(optimized, int8, per_channel, exclude=names, reduce_range=reduce_range)
    attention = sum(1 for node in graph.graph.node
                    if node.op_type == 'Attention' and node.name in set(names))
    return {'onnx': onnx_path, 'optimized': optimized, 'int8': int8,
            'per_channel': bool(per_channel), 'reduce_range': bool(reduce_range),
            'excluded': names, 'excluded_attention': attention, 'optimized_counts': fused,
            'int8_counts': counts}
