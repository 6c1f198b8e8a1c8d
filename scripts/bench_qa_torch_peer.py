"""PyTorch peer of the qa_inference benchmark row: the QA model in PyTorch + transformers.

Runs in the interpreter that has torch and transformers (``benchmark.py --torch-python``).
``BertModel`` (eval mode, ``torch.inference_mode``) loads the same encoder folder; the head is
the library's conditional QA head with the weights saved beside the batches (``head/<name>``
arrays of ``jobs.bench.qa.head_weights``): start scores, top-5 starts, the end
head (dense, tanh, LayerNorm, dense) on [start; token] pairs, top-5 ends, the answerable head on
the start-weighted pooled vector and [CLS]. Talks JSON lines: each stdin line
{"batch": i} is answered {"seconds": t} for one timed pass over batch i of the ``.npz``
(``batch<i>/input_ids`` ...); {"batch": i, "autocast": "bfloat16"} runs the pass (encoder and
head) under ``torch.autocast('cpu', dtype=torch.bfloat16)``; {"batch": i, "save": PATH} also
writes the five outputs (float32) to PATH. The first line says the torch version and whether
PyTorch's oneDNN may use AMX tiles (``amx``: the tile permission granted to this process).
"""
from _torch_peer import autocast_context, serve, start_peer


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
    import numpy as onp
    torch, arrays, model = start_peer(__doc__.splitlines()[0], '--batches',
                                      'the .npz of bench_qa.save_batches')
    head = build_head(torch, {k: v for k, v in arrays.items() if k.startswith('head/')})

    def one_pass(i, autocast):
        batch = {k: arrays['batch%d/%s' % (i, k)] for k in
                 ('input_ids', 'token_types', 'valid_length', 'p_mask')}
        with torch.inference_mode(), autocast_context(torch, autocast):
            ids = torch.from_numpy(batch['input_ids']).long()
            length = torch.from_numpy(batch['valid_length'])
            mask = (torch.arange(ids.shape[1])[None] < length[:, None]).long()
            hidden = model(input_ids=ids, attention_mask=mask,
                           token_type_ids=torch.from_numpy(batch['token_types']).long())[0]
            return [o.float().numpy() for o in head(hidden, torch.from_numpy(batch['p_mask']))]

    serve(torch, lambda request: one_pass(request['batch'], request.get('autocast')),
          lambda path, outputs: onp.savez(path, *outputs))


if __name__ == '__main__':
    main()
