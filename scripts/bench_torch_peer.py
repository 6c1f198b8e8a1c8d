"""PyTorch peer for scripts/benchmark.py: scaled_dot_product_attention on CPU, run in the
interpreter that has torch (``benchmark.py --torch-python``), talking JSON lines.

Each stdin line is {"shape": [B, K, L_q, L_m, C], "lengths": [...], "mode": "fwd"|"fwdbwd"};
the reply is {"seconds": t} for one timed pass (inputs cached per request). With
``--memory`` one request is read and {"peak_bytes": n} (RSS growth of one pass) is written.
"""
import argparse
import json
import os
import sys
import time

from _torch_peer import torch_amx


def status_bytes(field):
    with open('/proc/self/status') as status:
        return next(int(line.split()[1]) * 1024 for line in status
                    if line.startswith(field + ':'))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument('--threads', type=int, default=os.cpu_count())
    parser.add_argument('--memory', action='store_true')
    args = parser.parse_args()
    import torch
    import torch.nn.functional as tf
    torch.set_num_threads(args.threads)
    cache = {}

    def prepare(request):
        key = json.dumps(request, sort_keys=True)
        if key not in cache:
            b, k, lq, lm, c = request['shape']
            gen = torch.Generator().manual_seed(0)
            tensors = [torch.randn(size, generator=gen, requires_grad=True)
                       for size in ((b, k, lq, c), (b, k, lm, c), (b, k, lm, c))]
            lengths = torch.tensor(request['lengths'])
            mask = (torch.arange(lm)[None, :] < lengths[:, None])[:, None, None, :]
            cache[key] = tensors, mask
        return cache[key]

    def one_pass(request):
        (q, k, v), mask = prepare(request)
        if request['mode'] == 'fwd':
            with torch.no_grad():
                tf.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        else:
            tf.scaled_dot_product_attention(q, k, v, attn_mask=mask).sum().backward()

    if args.memory:
        request = json.loads(sys.stdin.readline())
        prepare(request)
        before = status_bytes('VmRSS')
        one_pass(request)
        peak = status_bytes('VmHWM') - before      # VmHWM: not inherited like ru_maxrss
        print(json.dumps({'peak_bytes': peak, 'torch': torch.__version__}), flush=True)
        return
    print(json.dumps({'ready': True, 'torch': torch.__version__, 'amx': torch_amx(torch)}),
          flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        start = time.perf_counter()
        one_pass(request)
        print(json.dumps({'seconds': time.perf_counter() - start}), flush=True)


if __name__ == '__main__':
    main()
