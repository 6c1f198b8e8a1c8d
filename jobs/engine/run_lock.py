"""One train run per output folder: an advisory lock (``fcntl.flock``) on ``<folder>/.run.lock``,
held for the life of the run (:func:`release_run_locks` when it returns, else until the process
ends).

Two runs writing one folder at the same time would both write its checkpoints, model and export
and log every step twice; the second is refused at once instead. The operating system drops the
lock when its process ends, however it ends (a SIGKILLed run leaves no lock behind), so a killed
run resumes as before. The workers of one distributed job (``DMLC_ROLE`` set by the launcher)
share the folder: they take the lock shared, which still refuses a single-process run beside
them (and them beside one); two distributed jobs on one folder are not told apart.
"""
import fcntl
import os

from gluon_attention import checks

__all__ = ['LOCK_NAME', 'hold_run_lock', 'release_run_locks']

#: The lock file's name in the output folder (its content is the holder's process id).
LOCK_NAME = '.run.lock'

_HELD = {}      # absolute folder -> (the open lock file, whether locking created the folder, shared)


def hold_run_lock(folder):
    """Create ``folder`` if needed and lock it for this process until it ends.

    Parameters
    ----------
    folder : str
        The run's output folder.

    Returns
    -------
    str
        The lock file's path. Calling again for the same folder in the same process is a no-op.

    Raises
    ------
    ValueError
        Another process holds the folder's lock (another run writes there now).
    """
    key = os.path.abspath(folder)
    if key in _HELD:
        return _HELD[key][0].name
    created = not os.path.isdir(folder)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, LOCK_NAME)
    handle = open(path, 'a+', encoding='utf-8')  # pylint: disable=consider-using-with
    shared = 'DMLC_ROLE' in os.environ
    try:
        fcntl.flock(handle.fileno(), (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or 'unknown'
        handle.close()
        checks.fail('output_dir must not be in use: another run holds its lock {} (process {}); '
                    'wait for it to end or choose another output folder'.format(path, holder),
                    output_dir=folder)
    if not shared:
        handle.truncate(0)
        handle.write(str(os.getpid()))
        handle.flush()
    _HELD[key] = handle, created, shared
    return path


def release_run_locks():
    """Release every lock this process holds (a run that returned; another may start there). An
    exclusive lock's file is removed while still held, so a finished or refused run leaves its
    folder as it found it; a folder the lock created that holds nothing else is removed."""
    while _HELD:
        folder, (handle, created, shared) = _HELD.popitem()
        if not shared:
            os.remove(handle.name)
        handle.close()
        left = os.listdir(folder)
        if created and left in ([], [LOCK_NAME]):
            if left:                                    # a shared lock's file
                os.remove(handle.name)
            os.rmdir(folder)
