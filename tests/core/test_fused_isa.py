"""The fused kernel's instruction-set paths (AVX-512, AVX2/FMA) against the float64 oracle.

The path is chosen once per process, when the library loads, so each one runs in a subprocess:
with ``GA_FUSED_ISA=avx2`` for the AVX2 path, and with the automatic choice for the AVX-512
path, which must pick AVX-512 on a CPU that has it (the test is skipped elsewhere). The cases
cross the query panels (16 / 32 rows) and blocks (128 rows), the key block (384 keys), the
channel chunks of the row tiles, and the unpacked path for at most 4 query rows. One more case
(:func:`subnormal_case`) puts attention weights across the subnormal range: both paths keep
subnormal results (gradual underflow), as the float64 oracle rounded to float32 does.
"""
import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as onp
import pytest

import reference as ref
from conftest import tol
from gluon_attention.core import fused, fused_build
from test_fused import lengths_for, make_inputs, oracle

pytestmark = pytest.mark.skipif(not fused.available(),
                                reason='the fused kernel is not built: {}'.format(
                                    fused.load_error()))

AVX512 = {'avx512f', 'avx512bw', 'avx512dq', 'avx512vl'}
# (layout, (B, K, L_q, L_m, C_k, C_v), lengths kind)
CASES = [('NKT', (1, 2, 140, 400, 64, 64), 'per_row'),
         ('NTK', (2, 3, 37, 50, 12, 20), 'batch'),
         ('TNK', (2, 2, 40, 30, 100, 72), 'none'),
         ('TNK', (3, 2, 3, 33, 8, 5), 'per_row')]
# Score gaps to the row maximum: e^gap from normal (e^-80) through the subnormal range
# (2^-126 = e^-87.3 down to 2^-149 = e^-103.3) to 0.
SUBNORMAL_GAPS = [0, -80, -86, -87, -87.5, -88, -90, -93, -96, -99, -101, -102, -102.8, -103.5,
                  -110, -200]
SUBNORMAL = len(CASES)      # its index among the cases the subprocess runs

WORKER = textwrap.dedent('''
    import json, sys
    import numpy as onp
    from mxnet import autograd, np, npx
    npx.set_np()
    from gluon_attention.core import fused
    data = onp.load(sys.argv[1])
    out = {}
    for i, layout in enumerate(json.loads(sys.argv[2])):
        arrays = [np.array(data['%d_%s' % (i, n)]) for n in ('q', 'k', 'v')]
        for x in arrays:
            x.attach_grad()
        vl = np.array(data['%d_vl' % i]) if '%d_vl' % i in data else None
        with autograd.record():
            ctx = fused._fused_dot_attn(*arrays, vl, layout=layout)
            loss = (ctx * np.array(data['%d_head' % i])).sum()
        loss.backward()
        out['%d_ctx' % i] = ctx.asnumpy()
        for n, x in zip('qkv', arrays):
            out['%d_d%s' % (i, n)] = x.grad.asnumpy()
    onp.savez(sys.argv[3], **out)
    print(json.dumps({'isa': fused.isa()}))
''')


def subnormal_case(rng):
    """One head, 20 query rows (more than a panel of 16) and 16 keys: query row i meets key j
    with the score ``SUBNORMAL_GAPS[j] * (1 + i / 200)``, and value j is the one-hot vector j, so
    that context channel j holds the weight of key j alone (key 0 holds the maximum)."""
    lq, lm, ck = 20, len(SUBNORMAL_GAPS), 4
    q = onp.zeros((1, 1, lq, ck))
    q[0, 0, :, 0] = 1 + onp.arange(lq) / 200
    key = onp.zeros((1, 1, lm, ck))
    key[0, 0, :, 0] = onp.array(SUBNORMAL_GAPS) * onp.sqrt(ck)    # the scale 1/sqrt(C_k)
    v = onp.eye(lm)[None, None]
    head = rng.normal(size=(1, lq, lm))
    return 'NKT', q, key, v, head


def run_path(tmp_path, isa_env):
    """Run every case in a subprocess (GA_FUSED_ISA=isa_env, or unset for None); returns the
    path the subprocess chose and the oracle comparisons to make."""
    rng = onp.random.RandomState(7)
    inputs, expected = {}, []
    for i, (layout, size, kind) in enumerate(CASES):
        q, key, v = (x.astype('float32') for x in make_inputs(rng, layout, *size))
        lengths = lengths_for(kind, rng, size[0], size[2], size[3])
        head = rng.normal(size=ref.merge_heads(onp.zeros(size[:3] + size[5:]), layout).shape)
        inputs.update({'%d_q' % i: q, '%d_k' % i: key, '%d_v' % i: v, '%d_head' % i: head})
        if lengths is not None:
            inputs['%d_vl' % i] = lengths.astype('int32')
        expected.append(oracle(q, key, v, lengths, layout, head))
    layout, q, key, v, head = subnormal_case(rng)
    inputs.update({'%d_q' % SUBNORMAL: q.astype('float32'), '%d_k' % SUBNORMAL: key.astype(
        'float32'), '%d_v' % SUBNORMAL: v.astype('float32'), '%d_head' % SUBNORMAL: head})
    expected.append(oracle(q, key, v, None, layout, head) + (head,))
    onp.savez(tmp_path / 'in.npz', **inputs)
    env = {k: v for k, v in os.environ.items() if k != fused.ISA_ENV}
    if isa_env:
        env[fused.ISA_ENV] = isa_env
    done = subprocess.run([sys.executable, '-c', WORKER, str(tmp_path / 'in.npz'),
                           json.dumps([c[0] for c in CASES] + ['NKT']), str(tmp_path / 'out.npz')],
                          env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])['isa'], \
        onp.load(tmp_path / 'out.npz'), expected


def assert_matches_oracle(got, expected):
    """Every case within the float32 tolerances; the subnormal case's context (each weight
    alone) and the value gradient (sums of 20 weight x head products) also within a few units
    of the smallest subnormal, 2^-149, beside the float32 rounding of the scores (relative
    5e-6 of the weights here); flushing the weights to 0 misses by up to 2^-126."""
    ctx_ref, grads_ref, head = expected[SUBNORMAL]
    assert ((ctx_ref > 2 ** -149) & (ctx_ref < 2 ** -126)).sum() >= 100    # the range is covered
    onp.testing.assert_allclose(got['%d_ctx' % SUBNORMAL], ctx_ref, rtol=1e-5, atol=2 ** -147)
    bound = onp.einsum('bkqm,bqc->bkmc', onp.abs(ctx_ref)[:, None], onp.abs(head))
    miss = onp.abs(got['%d_dv' % SUBNORMAL] - grads_ref[2]) - (2 ** -144 + 2e-5 * bound)
    assert miss.max() <= 0, miss.max()
    for i, (ctx_ref, grads_ref) in enumerate(e[:2] for e in expected):
        if i == SUBNORMAL:
            for n, grad in zip('qkv', grads_ref):
                onp.testing.assert_allclose(got['%d_d%s' % (i, n)], grad, rtol=1e-5, atol=1e-5,
                                            err_msg='subnormal d' + n)
            continue
        case = '{} {} lengths={}'.format(*CASES[i])
        onp.testing.assert_allclose(got['%d_ctx' % i], ctx_ref, err_msg=case, **tol())
        for n, grad in zip('qkv', grads_ref):
            onp.testing.assert_allclose(got['%d_d%s' % (i, n)], grad,
                                        err_msg='{} d{}'.format(case, n), **tol())


def test_avx2_path_matches_oracle(tmp_path):
    """GA_FUSED_ISA=avx2 runs the AVX2/FMA kernels (on any CPU the kernel supports)."""
    isa, got, expected = run_path(tmp_path, 'avx2')
    assert isa == 'avx2'
    assert_matches_oracle(got, expected)


def test_avx512_path_is_chosen_and_matches_oracle(tmp_path):
    """Where the CPU has AVX-512 F/BW/DQ/VL the automatic choice is the AVX-512 kernels."""
    missing = AVX512 - set(fused.cpu_features().split())
    if missing:
        pytest.skip('this CPU lacks {} (has: {}): the AVX-512 path cannot run here'.format(
            ', '.join(sorted(missing)), fused.cpu_features()))
    isa, got, expected = run_path(tmp_path, None)
    assert isa == 'avx512'
    assert_matches_oracle(got, expected)


def test_isa_variable_rejects_unknown_and_missing_sets(monkeypatch):
    monkeypatch.setenv(fused.ISA_ENV, 'sse')
    assert 'GA_FUSED_ISA must be one of auto, avx512, avx2. Received: GA_FUSED_ISA=' in \
        fused._isa_problem('avx2', 'avx2 fma')
    monkeypatch.setenv(fused.ISA_ENV, 'avx512')
    assert 'AVX-512' in fused._isa_problem('', 'avx2 fma')
    assert fused._isa_problem('avx512', 'avx2 fma avx512f') is None
    monkeypatch.delenv(fused.ISA_ENV)
    assert 'needs a CPU with AVX2 and FMA' in fused._isa_problem('', '')


def test_build_tracks_every_source_file(tmp_path, monkeypatch):
    """The up-to-date check looks at every file of csrc/ (a changed header rebuilds)."""
    src = tmp_path / 'csrc'
    src.mkdir()
    for name in ('a.cc', 'b.h'):
        (src / name).write_text('')
    lib = tmp_path / 'lib.so'
    lib.write_text('')
    monkeypatch.setattr(fused_build, '_CSRC', src)
    os.utime(src / 'b.h', (0, 0))
    os.utime(src / 'a.cc', (0, 0))
    assert fused_build._up_to_date(lib)
    os.utime(src / 'b.h', None)
    os.utime(lib, (1, 1))
    assert not fused_build._up_to_date(lib)


@pytest.mark.skipif(not (shutil.which('nm') and shutil.which('g++')), reason='needs g++, nm')
def test_build_rejects_code_shared_between_instruction_sets(tmp_path):
    """An instruction-set object defining a std:: template instance (a weak symbol the linker
    may share with the other path) fails the build check; one in its own namespace passes."""
    shared = tmp_path / 'shared.cc'
    shared.write_text('#include <vector>\nnamespace ga_avx512 {\n'
                      'int f(int n) { std::vector<int> v(n); return v.size(); }\n}\n')
    own = tmp_path / 'own.cc'
    own.write_text('namespace ga_avx512 {\ninline int g(int x) { return x + 1; }\n'
                   'int f(int n) { return g(n); }\n}\n')
    for src in (shared, own):
        subprocess.run(['g++', '-c', '-O0', '-fPIC', str(src), '-o', str(src) + '.o'],
                       check=True)
    with pytest.raises(RuntimeError, match='shares code with the other instruction sets'):
        fused_build._check_isa_object(str(shared) + '.o', 'ga_avx512')
    fused_build._check_isa_object(str(own) + '.o', 'ga_avx512')


def test_build_retries_amx_unit_without_its_flags(tmp_path):
    """A compiler that refuses the AMX flags (gcc before 11) still builds the library: the AMX
    unit is compiled again without them; any other unit's failure raises."""
    refuse = 'import sys; sys.exit("-mamx-tile" in sys.argv)'
    for name, fails in (('kernel_amx.cc', False), ('kernel_avx512.cc', True)):
        cmd = [sys.executable, '-c', refuse, '-mamx-tile', '-mamx-bf16', str(tmp_path / name),
               '-o', str(tmp_path / 'out.o')]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if fails:
            with pytest.raises(RuntimeError, match='building the fused attention kernel failed'):
                fused_build._finish(cmd, proc)
        else:
            fused_build._finish(cmd, proc)


@pytest.mark.skipif(not (shutil.which('nm') and shutil.which('g++')), reason='needs g++, nm')
def test_amx_unit_without_amx_flags_builds_stubs_only(tmp_path):
    """Compiled without -mamx-* (what the retry does), kernel_amx.cc defines the two entry
    points as stubs (amx_compiled() false: never chosen) and contains no tile instruction."""
    obj = tmp_path / 'amx.o'
    subprocess.run(['g++', '-c', '-O1', '-std=c++17', '-I', str(fused_build._CSRC),
                    str(fused_build._CSRC / 'kernel_amx.cc'), '-o', str(obj)], check=True)
    symbols = subprocess.run(['nm', '-C', str(obj)], capture_output=True, text=True).stdout
    assert 'ga::amx_compiled()' in symbols and 'ga::forward_amx_bf16' in symbols
    assert 'ga_amx::' not in symbols
