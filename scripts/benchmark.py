"""Attention speed and memory against the peers, interleaved in one run: a Markdown table + JSON.

Attention rows: configuration x mode (forward, forward+backward) x implementation; columns:
median time, GFLOP/s (forward 4*B*K*L_q*L_m*C, forward+backward 3x that), fraction of this
machine's GEMM limit (oneDNN ``fully_connected`` 4096^2), ratio to each peer measured in the same
rounds, and for the long configurations the peak memory of a separate process per
implementation. Whole-model rows (``squad_step``, ``qa_inference``; their own table, see
``jobs.bench.models``; ``bert_models``: BERT-base and BERT-large against GluonNLP 0.10 with
oneDNN's fusion, ``jobs.bench.bert_models``): throughput, ratio to our float32 row, PyTorch +
transformers in float32 and in bfloat16 autocast, ONNX Runtime and ONNX Runtime on the fused
Hugging Face export (float32 and INT8), and for ``qa_inference`` the answers kept against our
float32 graph and F1 (``--qa-model-dir``); under that table, one line per ratio goal of the
bfloat16 rows (met or not). ``bert_models_train`` (the SQuAD step at BERT-base against 0.10 and
PyTorch, ``jobs.bench.bert_train``) and ``bert_models_qa_int8`` (our INT8 against 0.10's INT8 on
the fine-tuned ``--qa-model-dir``, ``jobs.bench.qa_int8``) share the bert_models table;
``--modes`` does not apply to the whole-model rows. The header says whether our bfloat16 rows
ran on AMX and what the torch peer said of AMX.

Example: ``python scripts/benchmark.py --threads 2 --configs bert128,bert384 --repeats 5``.
"""
import argparse
import gc
import json
import os
import platform
import subprocess
import sys
import time

# the repository root, for the jobs (jobs/, not part of the installed package)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

MODEL_CONFIGS = ('squad_step', 'qa_inference', 'bert_models', 'bert_models_train',
                 'bert_models_qa_int8')
CONFIG_NAMES = ('bert128', 'bert384', 'long2048', 'long4096', 'decode') + MODEL_CONFIGS
PEERS = ('gluonnlp_dot', 'torch_sdpa', 'batch_dot_ceiling', 'gemm_softmax_floor')
SCRIPTS = os.path.dirname(os.path.abspath(__file__))
TORCH_WORKER = os.path.join(SCRIPTS, 'bench_torch_peer.py')


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument('--threads', type=int, default=os.cpu_count(),
                        help='OpenMP threads, set before MXNet is imported (default: all cores)')
    parser.add_argument('--configs', default=','.join(CONFIG_NAMES),
                        help='comma-separated subset of ' + ', '.join(CONFIG_NAMES))
    parser.add_argument('--modes', default='fwd,fwdbwd', help='fwd, fwdbwd or both')
    parser.add_argument('--repeats', type=int, default=5, help='timed rounds (median; >= 5)')
    parser.add_argument('--model-rounds', type=int, default=2,
                        help='timed rounds of the whole-model rows (median; bert_models_train '
                             'and bert_models_qa_int8: one fewer, at least 1)')
    parser.add_argument('--quick', action='store_true',
                        help='bert128 and decode only, 3 rounds, no memory processes')
    parser.add_argument('--no-memory', action='store_true', help='skip the memory processes')
    parser.add_argument('--no-gluonnlp', action='store_true')
    parser.add_argument('--impls', default='',
                        help='comma-separated name prefixes to keep (default: all)')
    parser.add_argument('--torch-python', default=None,
                        help='interpreter with torch for the SDPA peer, e.g. '
                             '.venv-peer/bin/python as make bench installs it (default: this '
                             'one if it imports torch; "none" skips it)')
    parser.add_argument('--out', default='runs/benchmark', help='writes OUT.md and OUT.json')
    parser.add_argument('--data-dir', default='',
                        help='data folder of the qa_inference questions (haystack-small) '
                             "(default: '': $GA_DATA_DIR, else ../shared/data from the "
                             'repository root)')
    parser.add_argument('--qa-model-dir', default='',
                        help='the model of the qa_inference rows: a fine-tuned model folder as '
                             'run_squad.py train saves it (e.g. runs/squad/model after make '
                             'demo; its heads, lengths and threshold; F1 reported) or a '
                             "pretrained encoder folder (random heads; no F1) (default: '': the "
                             'embedded pretrained encoder); bert_models_qa_int8 runs only with a '
                             'fine-tuned folder')
    parser.add_argument('--memory-worker', nargs=3, metavar=('IMPL', 'CONFIG', 'MODE'),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.configs, args.repeats, args.no_memory = 'bert128,decode', 3, True
    args.configs = [c.strip() for c in args.configs.split(',') if c.strip()]
    args.modes = [m.strip() for m in args.modes.split(',') if m.strip()]
    unknown = [c for c in args.configs if c not in CONFIG_NAMES]
    if (unknown or not args.configs or not set(args.modes) <= {'fwd', 'fwdbwd'}
            or min(args.repeats, args.model_rounds) < 1):
        parser.error('configs must be one or more of {}, modes among fwd, fwdbwd, repeats and '
                     'model-rounds >= 1. Received: configs={}, modes={}, repeats={}, '
                     'model_rounds={}'.format(CONFIG_NAMES, args.configs, args.modes,
                                              args.repeats, args.model_rounds))
    return args


def torch_python(choice):
    """The interpreter for the torch peer, or None when torch is unavailable; an interpreter
    named by --torch-python that cannot import torch is an error."""
    if choice == 'none':
        return None
    python = choice or sys.executable
    if os.path.exists(python) and subprocess.run(
            [python, '-c', 'import torch'], capture_output=True).returncode == 0:
        return python
    if choice:
        raise SystemExit('--torch-python must name an interpreter that imports torch. '
                         'Received: --torch-python={}'.format(choice))
    return None


class TorchPeer:
    """A persistent torch process: one timed SDPA pass per request (interleaved rounds)."""

    def __init__(self, python, threads):
        self.proc = subprocess.Popen([python, TORCH_WORKER, '--threads', str(threads)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        ready = json.loads(self.proc.stdout.readline())
        self.version, self.amx = ready['torch'], ready.get('amx')

    def timer(self, request):
        def run():
            self.proc.stdin.write(json.dumps(request) + '\n')
            self.proc.stdin.flush()
            return json.loads(self.proc.stdout.readline())['seconds']
        return run

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()


def memory_of(impl, config, mode, args, python):
    """Peak RSS growth (bytes) of one pass of ``impl``, in a fresh process; None on failure."""
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    if impl == 'torch_sdpa':
        cmd = [python, TORCH_WORKER, '--memory', '--threads', str(args.threads)]
        from jobs.bench import attention as bench
        request = {'shape': bench.CONFIGS[config], 'mode': mode,
                   'lengths': bench.valid_lengths(config).tolist()}
        stdin = json.dumps(request) + '\n'
    else:
        cmd = [sys.executable, os.path.abspath(__file__), '--threads', str(args.threads),
               '--memory-worker', impl, config, mode]
        stdin = ''
    done = subprocess.run(cmd, input=stdin, capture_output=True, text=True, env=env)
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])['peak_bytes']
    except (IndexError, ValueError, KeyError):
        print('memory of {} {} {} failed: {}'.format(impl, config, mode, done.stderr[-300:]))
        return None


def measure(args, torch_peer, python, on_row=None):
    """Rows of the table; ``on_row(rows)`` is called after each configuration and mode."""
    from jobs.bench import attention as bench
    rows = []
    for config in [c for c in args.configs if c not in MODEL_CONFIGS]:
        for mode in args.modes:
            gc.collect()     # free the previous row's graphs (blocks hold reference cycles)
            made = bench.factories(config, mode, gluonnlp=not args.no_gluonnlp)
            keep = [p for p in args.impls.split(',') if p]
            impls = {name: make() for name, make in made.items()
                     if not keep or any(name.startswith(p) for p in keep)}
            external = {}
            if torch_peer is not None and (not keep or any('torch_sdpa'.startswith(p)
                                                          for p in keep)):
                external['torch_sdpa'] = torch_peer.timer(
                    {'shape': bench.CONFIGS[config], 'mode': mode,
                     'lengths': bench.valid_lengths(config).tolist()})
            if (config, mode) in bench.ONE_AT_A_TIME:
                # Each static graph holds ~10 (B, K, L_q, L_m) float32 buffers (8 GB here):
                # together they do not fit in 24 GB, so each runs its own rounds, then is freed.
                medians = {}
                for name in list(impls):
                    medians.update(bench.interleaved_medians({name: impls.pop(name)},
                                                             args.repeats))
                    gc.collect()
                medians.update(bench.interleaved_medians({}, args.repeats, external))
            else:
                medians = bench.interleaved_medians(impls, args.repeats, external)
            impls.clear()
            gc.collect()     # before the memory processes start
            gflop = bench.attention_gflop(config, mode)
            for impl, seconds in medians.items():
                row = dict(config=config, shape=bench.CONFIGS[config], mode=mode, impl=impl,
                           median_s=seconds, gflops=gflop / seconds)
                row['ratio'] = {p: medians[p] / seconds for p in PEERS if p in medians}
                if config in bench.LONG_CONFIGS and not args.no_memory:
                    row['peak_mb'] = memory_of(impl, config, mode, args, python)
                    row['peak_mb'] = row['peak_mb'] and row['peak_mb'] / 2 ** 20
                rows.append(row)
            print('{} {} done'.format(config, mode), flush=True)
            if on_row:
                on_row(rows)
    for config in [c for c in args.configs if c in MODEL_CONFIGS]:
        done = list(rows)       # bert_models writes the table after each (model, T)
        rows += model_rows(config, args.threads, python, args.model_rounds, args.data_dir,
                           args.qa_model_dir, on_rows=on_row and (
                               lambda part, done=done: on_row(done + part)))
        print('{} done'.format(config), flush=True)
        if on_row:
            on_row(rows)
    return rows


def model_rows(config, threads, torch_python, rounds, data_dir='', qa_model_dir='',
               on_rows=None):
    """The rows of a whole-model configuration (one of MODEL_CONFIGS) at full size;
    ``torch_python`` None, or one without transformers: no torch row (nor HF rows);
    ``data_dir``: the data folder of the questions; ``qa_model_dir``: their model for
    qa_inference ('': the pretrained encoder under random heads) and bert_models_qa_int8 (a
    fine-tuned folder; '': rows left out, with a line saying why); ``on_rows(rows)``: called
    by bert_models after each (model, T)."""
    from jobs.bench import bert_models, models, qa
    if torch_python and not models.has_transformers(torch_python):
        torch_python = None
    if config == 'bert_models':     # BERT-base and -large against GluonNLP 0.10 (oneDNN)
        return bert_models.bert_model_rows(rounds=rounds, on_rows=on_rows, onnx=dict(
            threads=threads, torch_python=torch_python,
            peer_script=os.path.join(SCRIPTS, 'bench_qa_torch_peer.py')))
    if config == 'bert_models_train':
        from jobs.bench.bert_train import bert_train_rows
        return bert_train_rows(os.path.join(SCRIPTS, 'squad_step_speed.py'), threads,
                               torch_python, rounds=max(1, rounds - 1))
    if config == 'bert_models_qa_int8':
        from jobs.bench.qa_int8 import qa_int8_rows
        return qa_int8_rows(qa_model_dir, threads, rounds=max(1, rounds - 1),
                            data_dir=data_dir)
    if config == 'squad_step':
        return models.squad_step_rows(os.path.join(SCRIPTS, 'squad_step_speed.py'), threads,
                                      torch_python, rounds=rounds)
    return qa.qa_inference_rows(os.path.join(SCRIPTS, 'bench_qa_torch_peer.py'), threads,
                                torch_python, rounds=rounds, data_dir=data_dir,
                                model_dir=qa_model_dir or None)


def versions(args, torch_peer):
    import mxnet as mx
    import numpy
    info = dict(threads=args.threads, OMP_NUM_THREADS=os.environ.get('OMP_NUM_THREADS'),
                cpu_count=os.cpu_count(), python=platform.python_version(),
                mxnet=mx.__version__, numpy=numpy.__version__, machine=platform.machine(),
                torch=torch_peer.version if torch_peer else None,
                torch_amx=torch_peer.amx if torch_peer else None)
    from gluon_attention.core import fused
    info['fused_isa'], info['cpu_features'] = fused.isa(), fused.cpu_features()
    from gluon_attention import hardware
    from gluon_attention.hardware import amx_in_use
    info['amx'], info['amx_reason'] = amx_in_use(), hardware(verify=False).reason
    info['fused_amx'] = fused.amx_problem() or 'AMX tiles'
    try:
        import gluonnlp
        info['gluonnlp'] = gluonnlp.__version__
    except ImportError:
        info['gluonnlp'] = None
    info['commit'] = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], capture_output=True,
                                    text=True, cwd=os.path.dirname(TORCH_WORKER)).stdout.strip()
    return info


def markdown(rows, info, limit):
    from jobs.bench.bert_models import bert_models_table
    from jobs.bench.models import goal_lines, model_table, torch_amx_sentence
    lines = ['Threads: {threads} (OMP_NUM_THREADS={OMP_NUM_THREADS}, {cpu_count} cores); '
             'mxnet {mxnet}, numpy {numpy}, gluonnlp {gluonnlp}, torch {torch}, '
             'Python {python}; commit {commit}.'.format(**info),
             'Fused kernel: {fused_isa} path (CPU instruction sets: {cpu_features}).'.format(
                 **info),
             'AMX {} for the bfloat16 rows ({}).'.format('used' if info['amx'] else 'not used',
                                                         info['amx_reason'])
             + torch_amx_sentence(info),
             'Fused bfloat16 rows (forward products): {}.'.format(info.get('fused_amx', '-')),
             'GEMM limit (oneDNN fully_connected 4096^2): {:.0f} GFLOP/s. Ratios: peer time / '
             'this row\'s time (> 1 = this row is faster).'.format(limit), '',
             '| config | mode | implementation | median ms | GFLOP/s | % of GEMM limit | '
             'vs gluonnlp | vs torch SDPA | vs 2 batch_dot | vs GEMM+softmax floor | peak MB |',
             '|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|']
    for row in (r for r in rows if r['config'] not in MODEL_CONFIGS):
        ratio = row['ratio']
        cells = [row['config'], row['mode'], row['impl'], '%.2f' % (1e3 * row['median_s']),
                 '%.1f' % row['gflops'], '%.0f%%' % (100 * row['gflops'] / limit)]
        cells += ['%.2fx' % ratio[p] if p in ratio else '-' for p in PEERS]
        cells.append('%.0f' % row['peak_mb'] if row.get('peak_mb') is not None else '-')
        lines.append('| ' + ' | '.join(cells) + ' |')
    return '\n'.join(lines + model_table(rows) + goal_lines(rows)
                     + bert_models_table(rows)) + '\n'


def main(argv=None):
    args = parse_args(argv)
    os.environ['OMP_NUM_THREADS'] = str(args.threads)      # before mxnet is imported
    from mxnet import npx
    from jobs.bench import attention as bench
    npx.set_np()
    if args.memory_worker:
        print(json.dumps({'peak_bytes': bench.peak_memory_bytes(*args.memory_worker)}))
        return
    if {'qa_inference', 'bert_models_qa_int8'} & set(args.configs):   # their data file and
        # model folder exist before any timing starts
        from gluon_attention.data import squad
        from gluon_attention.pipelines.folder import check_model_folder
        from jobs.bench.qa import EVAL_FILE, fine_tuned_folder
        from jobs.engine.config import as_flags
        try:
            squad.default_data_path(EVAL_FILE, args.data_dir)
            if args.qa_model_dir:           # and its model folder
                check_model_folder(args.qa_model_dir, fine_tuned=os.path.isdir(
                    args.qa_model_dir) and fine_tuned_folder(args.qa_model_dir) is not None)
        except ValueError as err:
            message = as_flags(err, ['data_dir'])
            raise SystemExit('benchmark.py: error: {}'.format(message)) from None
    python = torch_python(args.torch_python)
    torch_peer = TorchPeer(python, args.threads) if python else None
    start = time.time()
    os.makedirs(os.path.dirname(args.out) or '.', exist_ok=True)

    def write(rows, final=False):
        """The table so far (a killed run keeps its finished rows), atomically."""
        info = versions(args, torch_peer)
        info.update(gemm_limit_gflops=limit, repeats=args.repeats,
                    seconds=time.time() - start, complete=final)
        table = markdown(rows, info, limit)
        for suffix, text in (('.md', table), ('.json', json.dumps({'info': info, 'rows': rows},
                                                                  indent=1))):
            with open(args.out + suffix + '.tmp', 'w') as out:
                out.write(text)
            os.replace(args.out + suffix + '.tmp', args.out + suffix)
        return table

    try:
        limit = bench.gemm_limit_gflops()
        rows = measure(args, torch_peer, python, on_row=write)
    finally:
        if torch_peer:
            torch_peer.close()
    print(write(rows, final=True))
    print('wrote {0}.md and {0}.json'.format(args.out))


if __name__ == '__main__':
    main()
