"""train_nli.py with a fixed seed writes the same metrics twice (timings and paths aside), with
MXNET_SAFE_ACCUMULATION unset (the script sets 1) and set to 1 (as make nli does), and records the
value in run_config.json."""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TINY = ['--max-train', '120', '--max-steps', '4', '--epochs', '1', '--batch-size', '16',
        '--num-hiddens', '12', '--threads', '1', '--no-progress', '--seed', '3']
VARYING = ('seconds', 'time', 'elapsed', 'per_second', 'prefix')


def _without_timings(metrics):
    """Metrics without the keys that vary between runs (timings, output paths)."""
    if isinstance(metrics, list):
        return [_without_timings(m) for m in metrics]
    if not isinstance(metrics, dict):
        return metrics
    return {k: _without_timings(v) for k, v in metrics.items()
            if not any(t in k for t in VARYING)}


def test_train_nli_deterministic_with_fixed_seed(tmp_path):
    runs = []
    env = {k: v for k, v in os.environ.items() if k != 'MXNET_SAFE_ACCUMULATION'}
    for i, safe in enumerate(({}, {'MXNET_SAFE_ACCUMULATION': '1'})):
        env = dict(env, OMP_NUM_THREADS='1', **safe)
        result = subprocess.run(
            [sys.executable, str(ROOT / 'scripts' / 'train_nli.py')] + TINY
            + ['--output-dir', str(tmp_path / str(i))],
            capture_output=True, text=True, env=env, cwd=str(ROOT), timeout=300)
        assert result.returncode == 0, result.stderr[-3000:]
        runs.append(json.loads((tmp_path / str(i) / 'metrics.json').read_text()))
        assert json.loads((tmp_path / str(i) / 'run_config.json').read_text())['environment'] == {
            'MXNET_SAFE_ACCUMULATION': '1', 'OMP_NUM_THREADS': '1'}
    assert _without_timings(runs[0]) == _without_timings(runs[1])
