"""Bad input of the jobs' shared pieces, in the style of ``test_bad_inputs.py``: (what is wrong,
call, exception type, message fragments)."""
import fcntl
import os

import pytest

from jobs.engine.run_lock import LOCK_NAME, hold_run_lock
from refusal import assert_refusal


def _held_elsewhere(folder):
    """Lock ``folder`` through a file of its own (as another process would), then ask for it."""
    os.makedirs(folder)
    handle = open(os.path.join(folder, LOCK_NAME), 'a+', encoding='utf-8')  # noqa: SIM115
    fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        return hold_run_lock(folder)
    finally:
        handle.close()


BAD = [
    ('hold_run_lock-folder-held-by-another-run', lambda: _held_elsewhere('busy'), ValueError,
     ['output_dir must not be in use: another run holds its lock', "output_dir='busy'"]),
]


@pytest.mark.parametrize('call,kind,fragments', [row[1:] for row in BAD],
                         ids=[row[0] for row in BAD])
def test_bad_input_raises_with_received(call, kind, fragments, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(Exception) as err:
        call()
    assert_refusal(err.value, kind, fragments)
