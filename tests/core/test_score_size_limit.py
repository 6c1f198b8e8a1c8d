"""Score tensors beyond 32-bit indexing (B*K = 100, L_q = 7000, L_m = 6000: 4.2e9 elements) are a
ValueError naming the size before any kernel runs. The calls run in a child process whose
address space is capped at 6 GiB, so a missing check fails instead of allocating 16 GiB."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent('''
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))
    import mxnet as mx
    from mxnet import np, npx
    npx.set_np()
    from gluon_attention.core import cells, functional as fn

    def expect_value_error(call, label):
        try:
            call()
        except ValueError as err:
            print(label, 'OK' if 'Received:' in str(err) else 'NO_RECEIVED', str(err)[:200])
            return
        except Exception as err:
            print(label, 'WRONG', type(err).__name__, str(err)[:200])
            return
        print(label, 'NO_ERROR')

    q, k = np.ones((1, 100, 7000, 1)), np.ones((1, 100, 6000, 1))
    expect_value_error(lambda: fn.multi_head_dot_attn(q, k, k, scaled=False)[0].wait_to_read(),
                       'multi_head_dot_attn')
    qb, kb = np.ones((100, 7000, 1)), np.ones((100, 6000, 1))
    expect_value_error(lambda: cells.DotProductAttention()(qb, kb, kb)[0].wait_to_read(), 'DPA')
    cell = cells.MultiHeadAttentionCell(100, 100, layout='NKT')
    expect_value_error(lambda: cell(q, k, k)[0].wait_to_read(), 'MultiHeadAttentionCell')
    mha = cells.MultiHeadAttention(100, 100)
    mha.initialize()
    qm, km = np.ones((1, 7000, 4)), np.ones((1, 6000, 4))
    expect_value_error(lambda: mha(qm, km, km)[0].wait_to_read(), 'MultiHeadAttention')
''')
LABELS = ('multi_head_dot_attn', 'DPA', 'MultiHeadAttentionCell', 'MultiHeadAttention')


def test_too_large_score_tensor_is_a_value_error_before_allocation():
    env = dict(os.environ, OMP_NUM_THREADS='1')
    proc = subprocess.run([sys.executable, '-c', CHILD], capture_output=True, text=True,
                          timeout=120, cwd=str(ROOT), env=env)
    lines = [line for line in proc.stdout.splitlines() if line.split(' ')[0] in LABELS]
    assert len(lines) == len(LABELS), proc.stdout + proc.stderr[-2000:]
    bad = [line for line in lines if line.split(' ')[1] != 'OK']
    assert not bad, '\n'.join(bad)
