"""PyTorch peer of the qa_inference benchmark row: the QA model in PyTorch + transformers.

Runs in the interpreter that has torch and transformers (``benchmark.py --torch-python``).
``BertModel`` (eval mode, ``torch.inference_mode``) loads the same encoder folder; the head is
the library's conditional QA head with the weights saved beside the batches (``head/<name>``
arrays of ``jobs.bench.qa.head_weights``): start scores, top-5 starts, the end
head (dense, tanh, LayerNorm, dense) on [start; token] pairs, top-5 ends, the answerable head on
the start-weighted pooled vector and [CLS]. Talks JSON lines: each stdin line
{"batch": i} is answered {"seconds": t} for one timed pass over batch i of the ``.npz``
(``batch<i>/input_ids`` ...); {"batch": i, "save": PATH} also writes the five outputs to PATH.
"""
import argparse
import json
import os
import sys
import time


def build_head(torch, weights):
    """The conditional head as a function of (hidden (B, T, C), p_mask (B, T)) -> 5 outputs."""
    w = {k[len('head/'):]: torch.from_numpy(v) for k, v in weights.items()}
    fn = torch.nn.functional

    def dense(x, name):
        return fn.linear(x, w[name + '.weight'], w[name + '.bias'])

    def head(hidden, p_mask):
        blocked = p_mask == 0
        scores = dense(hidden, 'start').squeeze(-1).masked_fill(blocked, float('-inf'))
        start_logits = torch.log_softmax(scores, -1)
        start_top, start_index = torch.topk(start_logits, 5, dim=-1)          # (B, N)
        picked = torch.gather(hidden, 1, start_index[..., None].expand(-1, -1, hidden.shape[-1]))
        pairs = torch.cat(torch.broadcast_tensors(picked[:, :, None], hidden[:, None]), -1)
        end = torch.tanh(dense(pairs, 'end.0'))
        gamma = w['end.2.gamma']          # its shape, constant: the head exports to ONNX
        end = fn.layer_norm(end, gamma.shape, gamma, w['end.2.beta'], 1e-12)
        end = dense(end, 'end.3').squeeze(-1).masked_fill(blocked[:, None], float('-inf'))
        end_top, end_index = torch.topk(torch.log_softmax(end, -1), 5, dim=-1)  # (B, N, N)
        pooled = torch.bmm(torch.softmax(scores, -1)[:, None], hidden)[:, 0]
        answerable = dense(torch.tanh(dense(torch.cat([pooled, hidden[:, 0]], -1),
                                            'answerable.0')), 'answerable.3')
        return (start_top, start_index.float(), end_top, end_index.float(),
                torch.log_softmax(answerable, -1))
    return head


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument('--threads', type=int, default=os.cpu_count())
    parser.add_argument('--model-dir', required=True)
    parser.add_argument('--batches', required=True, help='the .npz of bench_qa.save_batches')
    args = parser.parse_args()
    import numpy as onp
    import torch
    from transformers import BertModel
    torch.set_num_threads(args.threads)
    with onp.load(args.batches) as data:
        arrays = {k: data[k] for k in data.files}
    head = build_head(torch, {k: v for k, v in arrays.items() if k.startswith('head/')})
    model = BertModel.from_pretrained(args.model_dir, add_pooling_layer=False).eval()

    def one_pass(i):
        batch = {k: arrays['batch%d/%s' % (i, k)] for k in
                 ('input_ids', 'token_types', 'valid_length', 'p_mask')}
        with torch.inference_mode():
            ids = torch.from_numpy(batch['input_ids']).long()
            length = torch.from_numpy(batch['valid_length'])
            mask = (torch.arange(ids.shape[1])[None] < length[:, None]).long()
            hidden = model(input_ids=ids, attention_mask=mask,
                           token_type_ids=torch.from_numpy(batch['token_types']).long())[0]
            return [o.numpy() for o in head(hidden, torch.from_numpy(batch['p_mask']))]

    print(json.dumps({'ready': True, 'torch': torch.__version__}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        start = time.perf_counter()
        outputs = one_pass(request['batch'])
        reply = {'seconds': time.perf_counter() - start}
        if request.get('save'):
            onp.savez(request['save'], *outputs)
        print(json.dumps(reply), flush=True)


if __name__ == '__main__':
    main()
