"""The helpers of the bfloat16 benchmark rows: which squad_step runs exist, the goal lines under
the whole-model table, the header's torch AMX sentence, the JSON-lines peer process, the torch
peers' shared loop (scripts/_torch_peer.py) and bf16_encoder_speed.py's rounds and summary.
No speed is asserted: fake timings and fake peers only."""
import contextlib
import json
import subprocess
import sys
import types

import pytest

from jobs.bench import models as bench_models
from jobs.bench.peer import PeerProcess

from squad_tiny import ROOT, script_module

STEP_SCRIPT = 'scripts/squad_step_speed.py'


def _option(command, flag):
    return command[command.index(flag) + 1]


def test_squad_step_runs_each_side_in_float32_and_bfloat16_in_its_interpreter(monkeypatch):
    monkeypatch.setattr(bench_models, 'bfloat16_problem', lambda: None)
    runs, skipped = bench_models.squad_step_commands(STEP_SCRIPT, 2, '/peer/python', 4, 32,
                                                     3, 1, 'model')
    assert list(runs) == ['ours', 'ours_bfloat16', 'torch_transformers',
                          'torch_transformers_bfloat16'] and skipped == []
    assert [c[0] for c in runs.values()] == [sys.executable] * 2 + ['/peer/python'] * 2
    assert [(_option(c, '--impl'), _option(c, '--matmul-dtype')) for c in runs.values()] == [
        ('ours', 'float32'), ('ours', 'bfloat16'), ('torch', 'float32'), ('torch', 'bfloat16')]
    for flag, value in (('--threads', '2'), ('--batch-size', '4'), ('--seq-length', '32'),
                        ('--steps', '3'), ('--warmup', '1'), ('--model-dir', 'model')):
        assert {_option(c, flag) for c in runs.values()} == {value}


def test_squad_step_says_which_rows_it_leaves_out_and_why(monkeypatch):
    monkeypatch.setattr(bench_models, 'bfloat16_problem', lambda: 'MXNet refused it')
    runs, skipped = bench_models.squad_step_commands(STEP_SCRIPT, 1, None)
    assert list(runs) == ['ours']
    assert skipped == ['squad_step: no ours_bfloat16 row: MXNet refused it',
                       'squad_step: no torch_transformers, torch_transformers_bfloat16 rows: no '
                       'interpreter with torch and transformers (make bench installs .venv-peer; '
                       'benchmark.py --torch-python)']


def _row(config, impl, ratio, f1=None, kept=None):
    return dict(config=config, impl=impl, ratio=ratio, f1=f1, answers_kept=kept)


def test_goal_lines_give_each_measured_ratio_its_target_and_verdict():
    rows = [_row('qa_inference', 'ours_exported', {}, f1=80.0, kept=1.0),
            _row('qa_inference', 'ours_exported_bfloat16',
                 {'ours_exported': 2.0, 'onnxruntime_hf_int8': 1.49}, f1=79.85, kept=0.99),
            _row('squad_step', 'ours_bfloat16', {'ours': 1.5,
                                                 'torch_transformers_bfloat16': 1.25})]
    assert bench_models.goal_lines(rows) == [
        '',
        'goal: qa_inference ours_exported_bfloat16 vs ours_exported: 2.00x (>= 2.0x): met',
        'goal: qa_inference ours_exported_bfloat16 F1 -0.15 from float32 (within 0.2), 99.0% of '
        'answers kept (>= 99%): met',
        'goal: qa_inference ours_exported_bfloat16 vs onnxruntime_hf_int8: 1.49x (>= 1.5x): not '
        'met',
        'goal: squad_step ours_bfloat16 vs ours: 1.50x (>= 2.0x): not met',
        'goal: squad_step ours_bfloat16 vs torch_transformers_bfloat16: 1.25x (>= 1.0x): met']


def test_goal_lines_judge_f1_and_answers_kept_only_where_f1_was_measured():
    ratio = {'ours_exported': 2.5}
    far = [_row('qa_inference', 'ours_exported', {}, f1=80.0, kept=1.0),
           _row('qa_inference', 'ours_exported_bfloat16', ratio, f1=80.3, kept=1.0)]
    assert bench_models.goal_lines(far)[2].endswith('F1 +0.30 from float32 (within 0.2), '
                                                     '100.0% of answers kept (>= 99%): not met')
    few_kept = [far[0], _row('qa_inference', 'ours_exported_bfloat16', ratio, 80.0, 0.985)]
    assert bench_models.goal_lines(few_kept)[2].endswith('98.5% of answers kept (>= 99%): not met')
    random_heads = [_row('qa_inference', 'ours_exported', {}, kept=1.0),
                    _row('qa_inference', 'ours_exported_bfloat16', ratio, kept=1.0)]
    assert len(bench_models.goal_lines(random_heads)) == 2
    assert bench_models.goal_lines([_row('squad_step', 'ours', {})]) == []


def test_the_header_says_what_the_torch_peer_said_of_amx():
    sentence = bench_models.torch_amx_sentence
    assert sentence({'torch': None, 'torch_amx': None}) == ''
    assert sentence({'torch': '2.13.0', 'torch_amx': True}) == (
        ' PyTorch 2.13.0 may use AMX tiles (granted) for its bfloat16 autocast rows.')
    assert 'runs without AMX tiles (not granted)' in sentence({'torch': '2', 'torch_amx': False})
    assert 'did not say whether it uses AMX' in sentence({'torch': '2'})


ECHO_PEER = ('import json, sys\n'
             'print(json.dumps({"ready": True, "name": sys.argv[1]}), flush=True)\n'
             'for line in sys.stdin:\n'
             '    request = json.loads(line)\n'
             '    if request.get("die"):\n'
             '        sys.stderr.write("dying on request %d" % request["n"]); sys.exit(3)\n'
             '    print(json.dumps({"twice": 2 * request["n"]}), flush=True)\n')


def test_a_peer_process_answers_each_request_in_turn(tmp_path):
    peer = PeerProcess([sys.executable, '-c', ECHO_PEER, 'echo'], str(tmp_path / 'log'))
    try:
        assert peer.ready == {'ready': True, 'name': 'echo'}
        assert [peer.ask({'n': n})['twice'] for n in (3, -1, 20)] == [6, -2, 40]
    finally:
        peer.close()
    assert peer.proc.returncode == 0


def test_a_peer_that_stops_answering_is_an_error_quoting_its_stderr(tmp_path):
    peer = PeerProcess([sys.executable, '-c', ECHO_PEER, 'echo'], str(tmp_path / 'log'))
    with pytest.raises(RuntimeError, match='stopped: dying on request 7'):
        peer.ask({'n': 7, 'die': True})
    peer.proc.wait()
    assert peer.proc.returncode == 3


class _FakeTorch(types.SimpleNamespace):
    """What scripts/_torch_peer.py reads of torch: its version, AMX initialisation, autocast."""

    def __init__(self, amx):
        super().__init__(__version__='9.9', bfloat16='bf16', calls=[],
                         cpu=types.SimpleNamespace(_init_amx=lambda: amx))

    def autocast(self, device, dtype):
        self.calls.append((device, dtype))
        return contextlib.nullcontext()


def test_the_torch_peers_autocast_only_in_bfloat16():
    peer = script_module('_torch_peer')
    torch = _FakeTorch(True)
    assert isinstance(peer.autocast_context(torch, None), contextlib.nullcontext)
    assert torch.calls == []
    peer.autocast_context(torch, 'bfloat16')
    assert torch.calls == [('cpu', 'bf16')]
    with pytest.raises(ValueError, match='None or bfloat16. Received: autocast=float16'):
        peer.autocast_context(torch, 'float16')
    assert peer.torch_amx(_FakeTorch(False)) is False
    assert peer.torch_amx(types.SimpleNamespace(cpu=types.SimpleNamespace())) is None


def test_the_torch_peers_loop_times_each_request_and_saves_on_request(capsys):
    peer = script_module('_torch_peer')
    done, saved = [], []
    lines = [json.dumps({'n': 1}), json.dumps({'n': 2, 'save': 'out.npy'})]
    peer.serve(_FakeTorch(True), lambda r: done.append(r['n']) or 10 * r['n'],
               lambda path, result: saved.append((path, result)), lines=lines)
    replies = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert replies[0] == {'ready': True, 'torch': '9.9', 'amx': True}
    assert [set(r) for r in replies[1:]] == [{'seconds'}] * 2
    assert all(r['seconds'] >= 0 for r in replies[1:])
    assert done == [1, 2] and saved == [('out.npy', 20)]


def test_encoder_speed_ways_default_to_all_that_can_run_and_refuse_the_others(capsys):
    script = script_module('bf16_encoder_speed')
    assert script.parse_args([]).ways == ['float32', 'bfloat16', 'bfloat16-graph']
    assert script.parse_args(['--torch-python', 'p']).ways == [
        'float32', 'bfloat16', 'bfloat16-graph', 'torch-float32', 'torch-bfloat16']
    assert script.parse_args(['--ways', ' bfloat16 ,float32']).ways == ['bfloat16', 'float32']
    for argv in (['--ways', 'torch-bfloat16'], ['--ways', 'float16'], ['--repeats', '0']):
        with pytest.raises(SystemExit):
            script.parse_args(argv)
        assert 'the torch ways need --torch-python' in capsys.readouterr().err


def test_encoder_speed_rounds_rotate_the_order_after_an_untimed_warm_up():
    script = script_module('bf16_encoder_speed')
    order, clock = [], iter(range(1, 100))

    def way(name):
        def run(save):
            order.append((name, save))
            return next(clock), name if save else None
        return run
    times, outputs = script.interleaved({n: way(n) for n in 'abc'}, list('abc'), 2)
    assert [n for n, _ in order] == list('abc') + list('bca') + list('cab')
    assert [n for n, save in order if save] == list('cab')           # the last round only
    assert times == {'a': [6, 8], 'b': [4, 9], 'c': [5, 7]}
    assert outputs == {'a': 'a', 'b': 'b', 'c': 'c'}


def test_encoder_speed_summary_gives_speed_against_float32_and_torch_bfloat16():
    script = script_module('bf16_encoder_speed')
    times = {'float32': [0.4, 0.2, 0.3], 'bfloat16-graph': [0.1, 0.15, 0.2],
             'torch-bfloat16': [0.075, 0.075, 0.075]}
    lines = script.summary(times, {'float32': 0.0, 'bfloat16-graph': 0.0123})
    assert [line.split()[0] for line in lines] == list(times)
    assert 'median    150.0 ms  (min 100.0, max 200.0)  vs float32  2.00x' in lines[1]
    assert lines[1].endswith('vs torch-bfloat16  0.50x  max |diff| 0.0123')
    assert lines[2].endswith('vs float32  4.00x  vs torch-bfloat16  1.00x  max |diff| -')
    only = script.summary({'bfloat16': [1.0]}, {})
    assert 'vs float32      -  vs torch-bfloat16      -' in only[0]


@pytest.mark.slow          # builds three MiniLM-sized encoders and the torch peer: about 15 s
def test_encoder_speed_torch_ways_run_our_weights_on_our_inputs(tmp_path):
    python = ROOT / '.venv-peer' / 'bin' / 'python'
    if not python.exists() or not bench_models.has_transformers(str(python)):
        pytest.skip('no .venv-peer with torch and transformers (make bench creates it)')
    done = subprocess.run([sys.executable, str(ROOT / 'scripts' / 'bf16_encoder_speed.py'),
                           '--batch', '2', '--length', '16', '--repeats', '1', '--threads', '1',
                           '--torch-python', str(python)], capture_output=True, text=True,
                          check=True)
    lines = {line.split()[0]: line for line in done.stdout.splitlines() if 'median' in line}
    assert list(lines) == ['float32', 'bfloat16', 'bfloat16-graph', 'torch-float32',
                           'torch-bfloat16']
    diffs = {way: float(line.rsplit(' ', 1)[1]) for way, line in lines.items()}
    assert diffs['float32'] == 0 and diffs['torch-float32'] < 1e-4     # the same model
    assert 1e-4 < diffs['torch-bfloat16'] < 0.1 and 1e-4 < diffs['bfloat16'] < 0.1
