"""Whether this process runs oneDNN's products on AMX, decided once, when gluon_attention is imported.

Intel AMX (Advanced Matrix Extensions: tile registers and bfloat16 / int8 tile products) makes
MXNet's bfloat16 dense products several times faster than float32 (docs/performance.md, "AMX").
MXNet 1.9.1's oneDNN (v2.4.4) leaves AMX off unless ``DNNL_MAX_CPU_ISA`` names it, and predates
Linux's rule that a process must ask for the tile state first
(``arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)``, Linux 5.16+): with the variable set and
no request, the first bfloat16 product dies with SIGILL. :func:`setup`, called once by
``import gluon_attention`` before any oneDNN primitive of the library runs, raises the variable
only when all three hold: the CPU has AMX (``amx_tile`` and ``amx_bf16`` among the flags of
``/proc/cpuinfo``), Linux granted the request, and ``GA_AMX`` (``auto``, the default, ``0`` or
``1``) is not ``0``. A ``DNNL_MAX_CPU_ISA`` that already names an AMX level (set by the user) gets
the request whatever ``GA_AMX`` says, and is lowered to ``AVX512_CORE_BF16`` with a warning when
the request fails. ``GA_AMX=1`` warns when AMX cannot be had; an unknown ``GA_AMX`` warns and
leaves AMX off.

Child processes inherit the environment but not the permission (the permission is per process
and lost across ``exec``; a ``fork`` child keeps it): a ``subprocess`` or multiprocessing
``spawn`` child that saw an AMX level would die on its first bfloat16 product. So :func:`setup`
makes this process's oneDNN read the variable at once (one 1 x 1 float32 product) and then takes
the AMX level out of ``os.environ`` again: no child ever starts with it, and a child that imports
gluon_attention decides for itself. A consequence: setting ``DNNL_MAX_CPU_ISA`` after
``import gluon_attention`` has no effect (oneDNN reads it once per process).

oneDNN reads the variable only once, at its first primitive, and MXNet exposes no query of it: in
a process where a oneDNN product ran before ``import gluon_attention``, raising it is silently
ignored. :func:`hardware` then tells it by a timed probe (``verify=True``): on a CPU with AMX a
bfloat16 product of (2048, 1024) x (1024, 1024) beats float32 only on AMX tiles (measured on a
2-core Xeon with AMX under load 7-8: 1.7-2.6x with AMX, 0.7-0.8x without, where oneDNN uses
AVX512-BF16), so a probe where bfloat16 is not faster reports AMX not in use. Shared, loaded
cores can still mislead it (a (1024, 1024) probe read 0.86-4.1x with AMX): the report gives the
measured ratio.
"""
import collections
import ctypes
import errno
import functools
import os
import platform
import sys
import time
import warnings

__all__ = ['ENV', 'ISA_ENV', 'AMX_ISA', 'HardwareReport', 'cpu_flags', 'request_amx_permission',
           'decide', 'setup', 'hardware', 'amx_in_use']

ENV = 'GA_AMX'
CHOICES = ('auto', '0', '1')
ISA_ENV = 'DNNL_MAX_CPU_ISA'
AMX_ISA = 'AVX512_CORE_AMX'
#: The level a user's AMX level is lowered to when the tile permission is refused.
SAFE_ISA = 'AVX512_CORE_BF16'
AMX_FLAGS = ('amx_tile', 'amx_bf16')
REPORTED_FLAGS = ('avx2', 'avx512f', 'avx512_bf16', 'amx_tile', 'amx_bf16', 'amx_int8')
#: bfloat16 / float32 speed of the probe above which AMX counts as in use.
PROBE_THRESHOLD = 1.0
_SYS_ARCH_PRCTL = 158           # x86-64 Linux
_ARCH_REQ_XCOMP_PERM = 0x1023
_XFEATURE_XTILEDATA = 18

HardwareReport = collections.namedtuple(
    'HardwareReport', 'cpu_flags amx_requested amx_granted amx_verified isa reason')
HardwareReport.__doc__ = """What :func:`setup` decided (immutable).

cpu_flags : tuple of str
    The flags of :data:`REPORTED_FLAGS` this CPU has (``/proc/cpuinfo``; empty off Linux).
amx_requested : bool
    Whether the tile permission was asked for (GA_AMX not 0 and the CPU has AMX, or the user's
    own AMX level).
amx_granted : bool
    Whether Linux granted it.
amx_verified : bool or None
    The timed probe's verdict (True: bfloat16 products run on AMX); None when it did not run.
isa : str or None
    The ``DNNL_MAX_CPU_ISA`` this process's oneDNN was given (None: oneDNN's default, no AMX).
reason : str
    One sentence: why AMX is, or is not, in use.
"""
_STATE = {'report': None}


def cpu_flags(path='/proc/cpuinfo'):
    """The CPU's instruction-set flags (a frozenset of ``/proc/cpuinfo`` names such as
    ``'amx_bf16'``); empty when the file cannot be read (not Linux)."""
    try:
        with open(path, encoding='utf-8', errors='replace') as handle:
            for line in handle:
                if line.startswith('flags'):
                    return frozenset(line.partition(':')[2].split())
    except OSError:
        pass
    return frozenset()


def request_amx_permission():
    """Ask Linux for the AMX tile state (``arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)``
    through ``syscall``); returns ``(True, None)`` when granted, else ``(False, why)``."""
    if not sys.platform.startswith('linux') or platform.machine() not in ('x86_64', 'AMD64'):
        return False, 'AMX needs Linux on x86-64 (this is {} on {})'.format(
            sys.platform, platform.machine())
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        result = libc.syscall(ctypes.c_long(_SYS_ARCH_PRCTL), ctypes.c_long(_ARCH_REQ_XCOMP_PERM),
                              ctypes.c_ulong(_XFEATURE_XTILEDATA))
    except (OSError, AttributeError) as err:
        return False, 'the arch_prctl request could not be made ({})'.format(err)
    if result == 0:
        return True, None
    code = ctypes.get_errno()
    why = {errno.EINVAL: 'a Linux older than 5.16 or built without AMX support',
           errno.ENOSYS: 'the system call is not available (a seccomp filter?)',
           errno.EPERM: 'the process may not use it (a seccomp filter or a small sigaltstack)'}
    return False, 'Linux refused the AMX tile permission: {} ({})'.format(
        why.get(code, os.strerror(code)), errno.errorcode.get(code, code))


def _is_amx_level(value):
    return 'AMX' in value.upper()


def _report(flags, requested, granted, isa, reason):
    return HardwareReport(tuple(f for f in REPORTED_FLAGS if f in flags), requested, granted,
                          None, isa, reason)


def _user_amx_level(user_isa, flags, request):
    """The user's own AMX level: kept when the permission is granted, else lowered."""
    granted, why = request()
    if granted:
        return (_report(flags, True, True, user_isa, '{}={} (set by the user); AMX tile '
                        'permission granted'.format(ISA_ENV, user_isa)), user_isa, None)
    reason = '{}={} lowered to {}: {}'.format(ISA_ENV, user_isa, SAFE_ISA, why)
    loud = all(f in flags for f in AMX_FLAGS)      # without AMX the level changed nothing
    return _report(flags, True, False, SAFE_ISA, reason), SAFE_ISA, reason if loud else None


def decide(environ, flags, request):
    """The AMX decision, without side effects.

    Parameters
    ----------
    environ : mapping of str to str
        The environment (``GA_AMX``, ``DNNL_MAX_CPU_ISA``).
    flags : set of str
        The CPU's flags, as :func:`cpu_flags` gives them.
    request : callable
        ``request() -> (granted, why)``, :func:`request_amx_permission`; called only when needed.

    Returns
    -------
    report : HardwareReport
    isa : str or None
        The ``DNNL_MAX_CPU_ISA`` oneDNN must read (None: leave the environment alone).
    warning : str or None
        A sentence to warn with.
    """
    user_isa = environ.get(ISA_ENV, '')
    if _is_amx_level(user_isa):
        return _user_amx_level(user_isa, flags, request)
    if user_isa:
        return _report(flags, False, False, user_isa, '{}={} set by the user: left as it '
                       'is'.format(ISA_ENV, user_isa)), None, None
    choice = environ.get(ENV, '') or 'auto'
    if choice not in CHOICES:
        warning = ('{} must be one of {}; AMX left off. Received: {}={!r}'.format(
            ENV, ', '.join(CHOICES), ENV, choice))
        return _report(flags, False, False, None, warning), None, warning
    if choice == '0':
        return _report(flags, False, False, None, 'AMX off: {}=0'.format(ENV)), None, None
    if not all(f in flags for f in AMX_FLAGS):
        reason = 'this CPU has no AMX ({} not among its flags)'.format(' and '.join(AMX_FLAGS))
        return _report(flags, False, False, None, reason), None, _asked(choice, reason)
    granted, why = request()
    if not granted:
        return _report(flags, True, False, None, why), None, _asked(choice, why)
    return (_report(flags, True, True, AMX_ISA, 'AMX tile permission granted; {} raised to '
                    '{}'.format(ISA_ENV, AMX_ISA)), AMX_ISA, None)


def _asked(choice, reason):
    return '{}=1 but AMX stays off: {}'.format(ENV, reason) if choice == '1' else None


def _make_onednn_read_isa():
    """One tiny float32 oneDNN product: oneDNN reads DNNL_MAX_CPU_ISA at its first primitive."""
    import mxnet as mx
    one = mx.nd.ones((1, 1), ctx=mx.cpu())
    mx.nd.FullyConnected(one, one, num_hidden=1, no_bias=True).wait_to_read()


def setup(environ=None, flags=None, request=None, read_isa=None):
    """Decide once per process (``import gluon_attention`` calls it; later calls return the
    first report): see the module docstring. Warns (RuntimeWarning) as :func:`decide` says.
    The arguments replace, for tests, ``os.environ``, :func:`cpu_flags`,
    :func:`request_amx_permission` and the product that makes oneDNN read the level."""
    if _STATE['report'] is not None:
        return _STATE['report']
    environ = os.environ if environ is None else environ
    report, isa, warning = decide(environ, cpu_flags() if flags is None else flags,
                                  request or request_amx_permission)
    if warning:
        warnings.warn(warning, RuntimeWarning, stacklevel=2)
    if isa is not None:
        user_isa = environ.get(ISA_ENV)
        environ[ISA_ENV] = isa
        if _is_amx_level(isa):
            (read_isa or _make_onednn_read_isa)()
            del environ[ISA_ENV]            # children never start with an AMX level
            if user_isa:
                environ[ENV] = '1'          # a child that imports gluon_attention asks again
    _STATE['report'] = report
    return report


def amx_in_use():
    """Whether this process asked oneDNN for AMX and was granted the tile state (from the
    decision, no timing; a oneDNN that ran before the import may still not use it)."""
    report = _STATE['report']
    return bool(report and report.amx_granted and report.isa and _is_amx_level(report.isa))


@functools.lru_cache(maxsize=None)
def bfloat16_speedup(rows=2048, size=1024, repeats=7):
    """float32 time / bfloat16 time of one (rows, size) x (size, size) product, the fastest of
    ``repeats`` interleaved runs each after one untimed run, by wall clock and by the process's
    CPU time (less disturbed when other jobs share the cores); the larger of the two ratios:
    above 1 bfloat16 is faster."""
    import mxnet as mx
    import numpy as onp
    bf16 = onp.dtype([('bfloat16', onp.uint16)])
    x = mx.nd.random.uniform(-1, 1, (rows, size), ctx=mx.cpu())
    w = mx.nd.random.uniform(-1, 1, (size, size), ctx=mx.cpu())
    operands = {'float32': (x, w), 'bfloat16': tuple(mx.nd.amp_cast(a, dtype=bf16)
                                                      for a in (x, w))}
    best = {}
    for run in range(repeats + 1):
        for name, (a, b) in operands.items():
            mx.nd.waitall()
            start = (time.perf_counter(), time.process_time())
            mx.nd.FullyConnected(a, b, num_hidden=size, no_bias=True).wait_to_read()
            took = (time.perf_counter() - start[0], time.process_time() - start[1])
            if run:
                best[name] = [min(old, new) for old, new in zip(best.get(name, took), took)]
    return max(f / b for f, b in zip(best['float32'], best['bfloat16']))


def hardware(verify=True):
    """What this process decided about AMX, as a :class:`HardwareReport`.

    Parameters
    ----------
    verify : bool
        When AMX was granted, time one bfloat16 and one float32 product (about 1 s, once per
        process) and set ``amx_verified``: False when the bfloat16 product is not
        :data:`PROBE_THRESHOLD` times faster (oneDNN ran before the import, so it kept its
        default). False: ``amx_verified`` stays None ("requested, unverified").

    Returns
    -------
    HardwareReport
        Immutable; ``reason`` gives the probe's measured bfloat16 / float32 speed ratio.
    """
    report = setup()
    if not amx_in_use():
        return report
    if not verify:
        return report._replace(reason=report.reason + '; requested, unverified')
    speedup = bfloat16_speedup()
    verified = speedup >= PROBE_THRESHOLD
    return report._replace(amx_verified=verified, reason='{}; probe: bfloat16 {:.2f}x float32, '
                           '{}'.format(report.reason, speedup, 'AMX in use' if verified else
                                       'AMX not in use (oneDNN ran before the import?)'))
