"""The AMX decision (gluon_attention.hardware): every branch of ``decide`` with the CPU flags and
the permission request replaced; ``setup``'s handling of the environment (oneDNN reads the raised
level, then no child can see it); the probe's verdict with the timing replaced; and, on a CPU with
AMX whose Linux grants the tile state, real processes: a ``subprocess`` child and a
multiprocessing ``spawn`` child of this (AMX-using) process running a bfloat16 product, a process
where oneDNN ran before the import, and a user's own AMX level with ``GA_AMX=0``. Without the
design each child would die with SIGILL (exit 132) on that product.
"""
import ctypes
import errno
import multiprocessing
import os
import subprocess
import sys
import textwrap

import pytest

import gluon_attention
from gluon_attention import hardware as hardware_fn
from gluon_attention.hardware import (AMX_ISA, ENV, ISA_ENV, SAFE_ISA, HardwareReport,
                                      cpu_flags, decide, request_amx_permission, setup)

HW = sys.modules['gluon_attention.hardware']
AMX_CPU = frozenset({'avx512f', 'avx512_bf16', 'amx_tile', 'amx_bf16', 'amx_int8'})
OLD_CPU = frozenset({'avx2', 'avx512f'})
# a bfloat16 product that oneDNN runs on AMX tiles when the level is raised (SIGILL without the
# permission: measured), checked against its exact value
BF16_PRODUCT = textwrap.dedent("""
    import mxnet as mx, numpy as onp
    bf16 = onp.dtype([('bfloat16', onp.uint16)])
    a = mx.nd.amp_cast(mx.nd.ones((64, 256)), dtype=bf16)
    w = mx.nd.amp_cast(mx.nd.ones((256, 256)), dtype=bf16)
    out = mx.nd.amp_cast(mx.nd.FullyConnected(a, w, num_hidden=256, no_bias=True), dtype='float32')
    assert float(out.sum().asscalar()) == 64 * 256 * 256
""")


class Request:
    """A permission request that answers ``granted`` and counts its calls."""

    def __init__(self, granted, why=None):
        self.answer, self.calls = (granted, why), 0

    def __call__(self):
        self.calls += 1
        return self.answer


REFUSED = 'Linux refused the AMX tile permission: a Linux older than 5.16 (EINVAL)'


@pytest.mark.parametrize('env, flags, granted, isa, requested, warns', [
    ({}, AMX_CPU, True, AMX_ISA, 1, False),
    ({ENV: 'auto'}, AMX_CPU, False, None, 1, False),       # refused: left alone, no warning
    ({ENV: '1'}, AMX_CPU, False, None, 1, True),           # asked for, refused: warns
    ({ENV: '1'}, OLD_CPU, True, None, 0, True),            # asked for, no AMX: warns
    ({}, OLD_CPU, True, None, 0, False),
    ({}, frozenset(), True, None, 0, False),               # flags unknown (not Linux)
    ({ENV: '0'}, AMX_CPU, True, None, 0, False),           # opted out
    ({ENV: 'yes'}, AMX_CPU, True, None, 0, True),          # bad value: warns, AMX off
    ({ISA_ENV: 'AVX2'}, AMX_CPU, True, None, 0, False),    # the user's non-AMX level stays
    ({ISA_ENV: AMX_ISA, ENV: '0'}, AMX_CPU, True, AMX_ISA, 1, False),   # user's level wins
    ({ISA_ENV: 'avx512_core_amx'}, AMX_CPU, False, SAFE_ISA, 1, True),  # refused: lowered
    ({ISA_ENV: AMX_ISA}, OLD_CPU, False, SAFE_ISA, 1, False),  # lowered quietly: no AMX anyway
])
def test_decide_every_branch(env, flags, granted, isa, requested, warns):
    request = Request(granted, None if granted else REFUSED)
    report, new_isa, warning = decide(env, flags, request)
    assert (new_isa, request.calls, warning is not None) == (isa, requested, warns)
    assert isinstance(report, HardwareReport) and report.amx_verified is None
    assert report.amx_requested == bool(requested)
    assert report.amx_granted == (bool(requested) and granted)
    assert set(report.cpu_flags) <= set(flags)
    if requested and not granted:
        assert 'EINVAL' in report.reason
    if env.get(ENV) == 'yes':
        assert "Received: GA_AMX='yes'" in warning and 'auto, 0, 1' in warning


@pytest.fixture
def fresh(monkeypatch):
    """setup() as if gluon_attention were imported anew (the real decision is restored)."""
    monkeypatch.setitem(HW._STATE, 'report', None)


def test_setup_lets_onednn_read_the_level_then_removes_it(fresh):
    env, seen = {}, []
    report = setup(env, AMX_CPU, Request(True), read_isa=lambda: seen.append(dict(env)))
    assert seen == [{ISA_ENV: AMX_ISA}] and env == {}
    assert report.amx_granted and report.isa == AMX_ISA
    assert setup({}, OLD_CPU, Request(False)) is report          # decided once per process


def test_setup_keeps_a_users_request_for_children_that_import_the_library(fresh):
    env, seen = {ISA_ENV: AMX_ISA, ENV: '0'}, []
    setup(env, AMX_CPU, Request(True), read_isa=lambda: seen.append(env.get(ISA_ENV)))
    assert seen == [AMX_ISA] and env == {ENV: '1'}


def test_setup_lowers_a_refused_user_level_with_a_warning(fresh):
    env = {ISA_ENV: AMX_ISA}
    with pytest.warns(RuntimeWarning, match='lowered to AVX512_CORE_BF16'):
        report = setup(env, AMX_CPU, Request(False, REFUSED), read_isa=pytest.fail)
    assert env == {ISA_ENV: SAFE_ISA} and not report.amx_granted


def test_setup_leaves_the_environment_alone_without_amx(fresh):
    env = {ENV: '0'}
    report = setup(env, AMX_CPU, Request(True), read_isa=pytest.fail)
    assert env == {ENV: '0'} and report.isa is None and 'GA_AMX=0' in report.reason


@pytest.mark.parametrize('speedup, verified', [(3.0, True), (0.7, False)])
def test_the_probe_decides_verified(fresh, monkeypatch, speedup, verified):
    setup({}, AMX_CPU, Request(True), read_isa=lambda: None)
    monkeypatch.setattr(HW, 'bfloat16_speedup', lambda: speedup)
    report = hardware_fn()
    assert report.amx_verified is verified and '{:.2f}x'.format(speedup) in report.reason
    unverified = hardware_fn(verify=False)
    assert unverified.amx_verified is None and 'requested, unverified' in unverified.reason


def test_no_probe_without_amx(fresh, monkeypatch):
    setup({}, OLD_CPU, Request(True))
    monkeypatch.setattr(HW, 'bfloat16_speedup', pytest.fail)
    assert hardware_fn().amx_verified is None and not HW.amx_in_use()


def test_cpu_flags_reads_the_first_flags_line(tmp_path):
    path = tmp_path / 'cpuinfo'
    path.write_text('processor : 0\nflags\t\t: fpu avx2 amx_tile amx_bf16\nflags : other\n')
    assert cpu_flags(str(path)) == {'fpu', 'avx2', 'amx_tile', 'amx_bf16'}
    assert cpu_flags(str(tmp_path / 'missing')) == frozenset()


class FakeLibc:
    def __init__(self, code):
        self.code = code

    def syscall(self, *args):
        assert [a.value for a in args] == [158, 0x1023, 18]
        ctypes.set_errno(self.code)
        return -1


@pytest.mark.skipif(not sys.platform.startswith('linux'), reason='Linux only')
@pytest.mark.parametrize('code, fragment', [(errno.EINVAL, 'older than 5.16'),
                                            (errno.EPERM, 'seccomp'), (errno.ENOSYS, 'ENOSYS')])
def test_a_refused_request_says_why(monkeypatch, code, fragment):
    monkeypatch.setattr(HW.platform, 'machine', lambda: 'x86_64')
    monkeypatch.setattr(HW.ctypes, 'CDLL', lambda *a, **k: FakeLibc(code))
    granted, why = request_amx_permission()
    assert not granted and fragment in why


def test_not_linux_x86_is_refused_without_a_call(monkeypatch):
    monkeypatch.setattr(HW.platform, 'machine', lambda: 'aarch64')
    monkeypatch.setattr(HW.ctypes, 'CDLL', pytest.fail)
    assert request_amx_permission()[0] is False


# --- real processes, on a CPU with AMX whose Linux grants the tile state --------------------

REAL = gluon_attention.hardware(verify=False)
needs_amx = pytest.mark.skipif(not REAL.amx_granted, reason='AMX not in use here: {}'.format(
    REAL.reason))


def run_python(code, **env):
    """Run ``code`` in a fresh interpreter (this environment plus ``env``); its result."""
    return subprocess.run([sys.executable, '-c', code], env=dict(os.environ, **env),
                          capture_output=True, text=True, timeout=120, check=False)


def assert_ran(result):
    assert result.returncode == 0, (result.returncode, result.stderr[-2000:])


@needs_amx
def test_this_process_uses_amx_and_its_children_survive():
    assert ISA_ENV not in os.environ
    exec(BF16_PRODUCT)      # noqa: S102  this process: permission granted
    assert_ran(run_python(BF16_PRODUCT))        # a subprocess that never imports the library
    child = multiprocessing.get_context('spawn').Process(target=exec, args=(BF16_PRODUCT,))
    child.start()
    child.join(120)
    assert child.exitcode == 0


@needs_amx
def test_onednn_ran_before_the_import():
    code = ('import mxnet as mx\nmx.nd.FullyConnected(mx.nd.ones((4, 8)), mx.nd.ones((8, 8)), '
            'num_hidden=8, no_bias=True).wait_to_read()\nimport gluon_attention\n' +
            BF16_PRODUCT + 'report = gluon_attention.hardware()\n'
            'assert report.amx_granted and report.amx_verified is not None, report\n')
    assert_ran(run_python(code))


@needs_amx
def test_a_users_amx_level_wins_over_the_opt_out_and_its_children_survive():
    code = ('import os, subprocess, sys\nimport gluon_attention\n' + BF16_PRODUCT +
            'report = gluon_attention.hardware(verify=False)\n'
            'assert report.isa == {!r} and report.amx_granted, report\n'
            'assert os.environ[{!r}] == "1" and {!r} not in os.environ\n'
            'sys.exit(subprocess.run([sys.executable, "-c", {!r}]).returncode)\n').format(
                AMX_ISA, ENV, ISA_ENV, BF16_PRODUCT)
    assert_ran(run_python(code, **{ISA_ENV: AMX_ISA, ENV: '0'}))
