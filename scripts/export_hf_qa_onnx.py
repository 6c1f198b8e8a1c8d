"""PyTorch peer of the qa_inference ONNX rows: the Hugging Face ``BertModel`` export of the same
weights with the same conditional head, written in the form ONNX Runtime's optimizer fuses.

Runs in the interpreter that has torch, transformers and onnx (``benchmark.py --torch-python``;
make bench's ``.venv-peer``). ``BertModel`` loads ``--model-dir`` with eager attention; the head
is :func:`bench_qa_torch_peer.build_head` on the weights saved beside the batches
(``head/<name>`` arrays of the ``.npz`` given as ``--weights``). The model takes the inputs of
our QA graph (``input_ids``, ``token_types``, ``valid_length``, ``p_mask``) and gives its five
outputs. Two things make the export fusable (found by trying the optimizer on it):

- the attention mask is handed to ``BertModel`` already 4-D and additive, computed as
  ``(1 - float(keep[:, None, None, :])) * -10000`` (Unsqueeze, Unsqueeze, Cast, Sub, Mul: the
  optimizer's BERT mask pattern) from ``keep = position < valid_length``;
- the head-split reshapes that ``torch.onnx.export`` writes as ``Concat(B, T, -1, C)`` get the
  head count in place of the -1 (the optimizer reads the heads from them);
- the scores' scaling ``Mul(MatMul(q, k), s)`` becomes ``Div(MatMul(q, k), 1 / s)``: the
  optimizer takes the first ``Mul`` parent of the mask ``Add`` for the mask pattern, and with
  two ``Mul`` parents it finds the wrong one.

Writes the ``.onnx`` file (opset 14, free batch and sequence axes) and prints one JSON line:
``{"onnx": path, "heads_written": n, "scales_divided": n, "torch": ..., "transformers": ...}``.
"""
import argparse
import json
import os
import sys

import bench_qa_torch_peer

INPUT_NAMES = ['input_ids', 'token_types', 'valid_length', 'p_mask']
OUTPUT_NAMES = ['start_top_logits', 'start_top_index', 'end_top_logits', 'end_top_index',
                'answerable_logits']


def qa_module(torch, model, head):
    """(input_ids, token_types, valid_length, p_mask) -> the five QA outputs."""
    class QA(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, ids, types, length, p_mask):  # pylint: disable=arguments-differ
            keep = torch.arange(ids.shape[1])[None] < length[:, None]              # (B, T)
            additive = (1.0 - keep[:, None, None, :].float()) * -10000.0        # (B, 1, 1, T)
            hidden = self.model(input_ids=ids.long(), attention_mask=additive,
                                token_type_ids=types.long())[0]
            return head(hidden, p_mask)
    return QA().eval()


def scale_by_division(onnx, model):
    """``Mul(MatMul(..), s)`` feeding an ``Add`` -> ``Div(MatMul(..), 1 / s)``; returns how
    many were rewritten."""
    constants = {n.output[0]: n for n in model.graph.node if n.op_type == 'Constant'}
    producers = {o: n for n in model.graph.node for o in n.output}
    users = {}
    for node in model.graph.node:
        for name in node.input:
            users.setdefault(name, []).append(node.op_type)
    count = 0
    for node in model.graph.node:
        if node.op_type != 'Mul' or users.get(node.output[0]) != ['Add'] or not any(
                producers.get(i) is not None and producers[i].op_type == 'MatMul'
                for i in node.input):
            continue
        slot = next((k for k, i in enumerate(node.input) if i in constants), None)
        if slot is None or slot == 0:
            continue
        scale = onnx.numpy_helper.to_array(constants[node.input[slot]].attribute[0].t)
        if scale.size != 1:
            continue
        inverse = onnx.helper.make_node('Constant', [], [node.input[slot] + '_inverse'],
                                        value=onnx.numpy_helper.from_array(1 / scale))
        model.graph.node.insert(list(model.graph.node).index(node), inverse)
        node.op_type, node.input[slot] = 'Div', inverse.output[0]
        count += 1
    return count


def write_head_count(onnx, model, num_heads):
    """Put ``num_heads`` in place of the -1 of each ``Concat(..., -1, C)`` reshape target
    shape; returns how many were rewritten."""
    constants = {n.output[0]: n for n in model.graph.node if n.op_type == 'Constant'}
    producers = {o: n for n in model.graph.node for o in n.output}
    count = 0
    for node in model.graph.node:
        concat = producers.get(node.input[1]) if node.op_type == 'Reshape' else None
        if concat is None or concat.op_type != 'Concat' or len(concat.input) != 4:
            continue
        minus = constants.get(concat.input[2])
        if minus is None or onnx.numpy_helper.to_array(minus.attribute[0].t).tolist() != [-1]:
            continue
        value = onnx.numpy_helper.from_array(
            onnx.numpy_helper.to_array(minus.attribute[0].t) * 0 + num_heads)
        fresh = onnx.helper.make_node('Constant', [], [concat.input[2] + '_heads'], value=value)
        model.graph.node.insert(list(model.graph.node).index(concat), fresh)
        concat.input[2] = fresh.output[0]
        count += 1
    return count


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument('--model-dir', required=True)
    parser.add_argument('--weights', required=True, help='an .npz holding head/<name> arrays')
    parser.add_argument('--out', required=True, help='the .onnx file to write')
    args = parser.parse_args()
    import numpy as onp
    import onnx
    import onnx.helper  # noqa: F401 pylint: disable=unused-import
    import onnx.numpy_helper  # noqa: F401 pylint: disable=unused-import
    import torch
    import transformers
    with onp.load(args.weights) as data:
        head = bench_qa_torch_peer.build_head(torch, {k: data[k] for k in data.files
                                                      if k.startswith('head/')})
    config = transformers.BertConfig.from_pretrained(args.model_dir)
    config._attn_implementation = 'eager'      # pylint: disable=protected-access
    model = transformers.BertModel.from_pretrained(args.model_dir, config=config,
                                                   add_pooling_layer=False).eval()
    ids = torch.ones((2, 16), dtype=torch.int32)
    example = (ids, torch.zeros_like(ids), torch.tensor([16, 9], dtype=torch.int32),
               torch.ones((2, 16)))
    axes = {name: {0: 'batch', 1: 'sequence'} for name in INPUT_NAMES}
    axes['valid_length'] = {0: 'batch'}
    tmp = args.out + '.tmp%d.onnx' % os.getpid()
    with torch.no_grad():
        torch.onnx.export(qa_module(torch, model, head), example, tmp, input_names=INPUT_NAMES,
                          output_names=OUTPUT_NAMES, dynamic_axes=axes, opset_version=14,
                          dynamo=False)
    graph = onnx.load(tmp)
    heads = write_head_count(onnx, graph, config.num_attention_heads)
    scales = scale_by_division(onnx, graph)
    onnx.save(graph, tmp)
    os.replace(tmp, args.out)
    print(json.dumps({'onnx': args.out, 'heads_written': heads, 'scales_divided': scales,
                      'torch': torch.__version__,
                      'transformers': transformers.__version__}))
    return 0


if __name__ == '__main__':
    sys.exit(main())
