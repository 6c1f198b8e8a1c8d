"""matmul_dtype='bfloat16' on a CPU that has AMX but runs without it warns once, saying why and
what it costs; it stays quiet where AMX is in use or absent, and for float32. The decision of
gluon_attention.hardware is replaced by reports of each case."""
import sys
import warnings

import pytest

from gluon_attention.core import matmul
from gluon_attention.hardware import AMX_ISA, HardwareReport

HW = sys.modules['gluon_attention.hardware']
AMX_CPU = ('avx512f', 'avx512_bf16', 'amx_tile', 'amx_bf16')


def report(flags, granted, isa, reason):
    return HardwareReport(flags, granted, granted, None, isa, reason)


@pytest.fixture
def decided(monkeypatch):
    """Install a report as this process's decision; the warn-once cache is cleared around."""
    def install(value):
        monkeypatch.setitem(HW._STATE, 'report', value)
        matmul.warn_without_amx.cache_clear()
    yield install
    matmul.warn_without_amx.cache_clear()


@pytest.mark.parametrize('reason', ['AMX off: GA_AMX=0', 'Linux refused the AMX tile permission: '
                                    'a Linux older than 5.16 (EINVAL)'])
def test_bfloat16_without_the_cpus_amx_warns_once(decided, reason):
    decided(report(AMX_CPU, False, None, reason))
    with pytest.warns(RuntimeWarning) as caught:
        assert matmul.check_matmul_dtype('bfloat16') == 'bfloat16'
        matmul.check_matmul_dtype('bfloat16')
        matmul.Dense(4, in_units=3, matmul_dtype='bfloat16')
    assert len(caught) == 1
    message = str(caught[0].message)
    assert reason in message and '0.4-0.8x' in message and 'AVX512-BF16' in message


@pytest.mark.parametrize('state, dtype', [
    (report(AMX_CPU, True, AMX_ISA, 'granted'), 'bfloat16'),            # AMX in use
    (report(('avx512f', 'avx512_bf16'), False, None, 'no AMX'), 'bfloat16'),  # Zen 4: no AMX
    (report(AMX_CPU, False, None, 'AMX off: GA_AMX=0'), 'float32'),
])
def test_quiet_where_amx_is_in_use_absent_or_not_needed(decided, state, dtype):
    decided(state)
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        matmul.check_matmul_dtype(dtype)
    assert matmul.amx_warning(state) is None or dtype == 'float32'
