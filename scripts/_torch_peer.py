"""What the PyTorch peer scripts share (they run in the interpreter with torch, without the
package): the autocast choice, whether PyTorch may use AMX, and the JSON-lines loop that
``jobs.bench.peer.PeerProcess`` talks to."""
import argparse
import contextlib
import json
import os
import sys
import time


def torch_amx(torch):
    """Whether PyTorch may use AMX tiles here: the CPU has them and Linux granted this process
    the tile state (``torch.cpu._init_amx``, PyTorch >= 2.3; None where PyTorch cannot say)."""
    init = getattr(getattr(torch, 'cpu', None), '_init_amx', None)
    return bool(init()) if init else None


def autocast_context(torch, dtype):
    """``torch.autocast('cpu', dtype=torch.bfloat16)`` for ``dtype`` 'bfloat16', a context
    that does nothing for None (float32); ValueError for any other dtype."""
    if dtype is None:
        return contextlib.nullcontext()
    if dtype != 'bfloat16':
        raise ValueError('autocast must be None or bfloat16. Received: autocast={}'.format(dtype))
    return torch.autocast('cpu', dtype=torch.bfloat16)


def start_peer(description, inputs_flag, inputs_help):
    """Parse ``--threads``, ``--model-dir`` and ``inputs_flag`` (an ``.npz``), set torch's
    threads, load the arrays and ``BertModel`` (no pooler, eval mode) from the model folder.
    Returns (torch, the arrays by name, the model)."""
    parser = argparse.ArgumentParser(description=description, allow_abbrev=False)
    parser.add_argument('--threads', type=int, default=os.cpu_count())
    parser.add_argument('--model-dir', required=True)
    parser.add_argument(inputs_flag, required=True, help=inputs_help)
    args = parser.parse_args()
    import numpy as onp  # pylint: disable=import-outside-toplevel
    import torch  # pylint: disable=import-outside-toplevel
    from transformers import BertModel  # pylint: disable=import-outside-toplevel
    torch.set_num_threads(args.threads)
    with onp.load(getattr(args, inputs_flag.lstrip('-').replace('-', '_'))) as data:
        arrays = {k: data[k] for k in data.files}
    return torch, arrays, BertModel.from_pretrained(args.model_dir,
                                                    add_pooling_layer=False).eval()


def serve(torch, one_pass, save=None, lines=None):
    """Write the ready line ({"ready", "torch", "amx"}), then answer each JSON line of ``lines``
    (default: standard input) with {"seconds": t}, the time of ``result = one_pass(request)``;
    a request with "save": PATH then has ``save(PATH, result)`` called, untimed."""
    print(json.dumps({'ready': True, 'torch': torch.__version__, 'amx': torch_amx(torch)}),
          flush=True)
    for line in (sys.stdin if lines is None else lines):
        request = json.loads(line)
        start = time.perf_counter()
        result = one_pass(request)
        reply = {'seconds': time.perf_counter() - start}
        if request.get('save') and save is not None:
            save(request['save'], result)
        print(json.dumps(reply), flush=True)
