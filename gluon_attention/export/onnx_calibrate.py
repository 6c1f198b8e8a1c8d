"""Calibrated activation scales for a dynamically quantized ONNX model.

ONNX Runtime's ``quantize_dynamic`` quantizes each activation at run time with
``DynamicQuantizeLinear``: its scale and zero point come from the minimum and maximum of the
whole batch, padding included, so a feature's outputs depend on which features share its batch.
:func:`fix_activation_scales` replaces every ``DynamicQuantizeLinear`` by a ``QuantizeLinear``
whose scale and zero point are constants computed by the same rule (asymmetric uint8, range
widened to hold 0) from ranges measured once, on calibration batches, by
:func:`activation_ranges`. The integer products (``MatMulInteger``, ``QAttention``) and their
rescaling are left as they are, so the model keeps the speed of the dynamic one and gives each
feature the same outputs whatever its batch. Needs onnx and onnxruntime (the ``[onnx]`` extra).
"""
import os

import numpy as onp

from .. import _checks
from ..files import atomic_path

__all__ = ['dynamic_quantize_inputs', 'activation_ranges', 'uint8_scale', 'fix_activation_scales']


def dynamic_quantize_inputs(model):
    """The float32 tensors that the ``DynamicQuantizeLinear`` nodes of ``model`` (a
    ``ModelProto``) quantize, in graph order, each once (list of str)."""
    names = [node.input[0] for node in model.graph.node if node.op_type == 'DynamicQuantizeLinear']
    return list(dict.fromkeys(names))


def activation_ranges(onnx_path, batches, valid_lengths=None):
    """Minimum and maximum of each tensor that a ``DynamicQuantizeLinear`` quantizes.

    Parameters
    ----------
    onnx_path : str
        The dynamically quantized model.
    batches : list of dict of str -> numpy.ndarray
        Its inputs, one dict per batch.
    valid_lengths : list of numpy.ndarray, optional
        Per batch, the (B,) valid lengths: a tensor of shape (B, T, ...) is then measured on its
        valid positions only (padding left out); other tensors on every value.

    Returns
    -------
    dict of str -> (float, float)

    Raises
    ------
    ValueError
        For no batches, or a model without ``DynamicQuantizeLinear`` nodes.
    """
    import onnx  # pylint: disable=import-outside-toplevel
    import onnxruntime  # pylint: disable=import-outside-toplevel
    if not batches:
        _checks.fail('expected at least one calibration batch', num_batches=0)
    model = onnx.load(os.fspath(onnx_path))
    names = dynamic_quantize_inputs(model)
    if not names:
        _checks.fail('expected a model with DynamicQuantizeLinear nodes', onnx_path=onnx_path)
    present = {o.name for o in model.graph.output}
    for name in names:
        if name not in present:
            model.graph.output.append(onnx.helper.make_tensor_value_info(
                name, onnx.TensorProto.FLOAT, None))
    session = onnxruntime.InferenceSession(model.SerializeToString(),
                                           providers=['CPUExecutionProvider'])
    low, high = {}, {}
    for index, batch in enumerate(batches):
        values = session.run(names, batch)
        lengths = None if valid_lengths is None else onp.asarray(valid_lengths[index])
        for name, value in zip(names, values):
            kept = _valid_values(value, lengths)
            low[name] = min(low.get(name, onp.inf), float(kept.min()))
            high[name] = max(high.get(name, -onp.inf), float(kept.max()))
    return {name: (low[name], high[name]) for name in names}


def _valid_values(value, lengths):
    if lengths is None or value.ndim < 2 or value.shape[0] != len(lengths):
        return value
    valid = onp.arange(value.shape[1])[None, :] < lengths[:, None]           # (B, T)
    return value[valid]


def uint8_scale(low, high):
    """(scale, zero point) of ``DynamicQuantizeLinear`` for values in ``[low, high]``: the range
    widened to hold 0, 255 steps, zero point rounded half to even and kept in [0, 255]; scale 1
    for an all-zero range. Returns (numpy.float32, numpy.uint8)."""
    low, high = min(float(low), 0.0), max(float(high), 0.0)
    scale = (high - low) / 255.0 or 1.0
    zero = onp.clip(onp.round(-low / scale), 0, 255)
    return onp.float32(scale), onp.uint8(zero)


def fix_activation_scales(onnx_path, ranges, out_path):
    """Replace each ``DynamicQuantizeLinear`` of ``onnx_path`` by a ``QuantizeLinear`` with
    constant scale and zero point (:func:`uint8_scale` of ``ranges``), written to ``out_path``.

    The constants take the names of the dynamic node's scale and zero-point outputs, so every
    node that read them (the products' rescaling, ``QAttention``) reads the constants.

    Returns
    -------
    int
        How many nodes were replaced.

    Raises
    ------
    ValueError
        When ``ranges`` lacks a tensor that a ``DynamicQuantizeLinear`` quantizes.
    """
    import onnx  # pylint: disable=import-outside-toplevel
    from onnx import helper, numpy_helper  # pylint: disable=import-outside-toplevel
    model = onnx.load(os.fspath(onnx_path))
    missing = [n for n in dynamic_quantize_inputs(model) if n not in ranges]
    if missing:
        _checks.fail('expected a calibrated range for every DynamicQuantizeLinear input',
                     missing=len(missing), first_missing=missing[0])
    nodes, replaced = [], 0
    for node in model.graph.node:
        if node.op_type != 'DynamicQuantizeLinear':
            nodes.append(node)
            continue
        scale, zero = uint8_scale(*ranges[node.input[0]])
        quantized, scale_name, zero_name = node.output
        model.graph.initializer.extend([numpy_helper.from_array(onp.array(scale), scale_name),
                                        numpy_helper.from_array(onp.array(zero), zero_name)])
        nodes.append(helper.make_node('QuantizeLinear', [node.input[0], scale_name, zero_name],
                                      [quantized], name=node.name + '_calibrated'))
        replaced += 1
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    with atomic_path(out_path) as tmp:
        onnx.save(model, tmp)
    return replaced
