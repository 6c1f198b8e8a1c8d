"""Files written whole or not at all: a killed process leaves the previous file (or none),
never a half-written one.

:func:`atomic_path` yields a temporary name in the target's folder; what is written there is
flushed to disk and renamed over the target (``os.replace``, atomic on POSIX file systems).
The export (:mod:`gluon_attention.export`) and the jobs write every output through it.
"""
import contextlib
import json
import os

__all__ = ['atomic_path', 'atomic_write_json', 'write_safetensors']


@contextlib.contextmanager
def atomic_path(path):
    """Yield a temporary path beside ``path``; on success it is synced and renamed over ``path``.

    Whatever the block writes there (``save_parameters``, ``numpy.savez``, plain ``open``) appears
    at ``path`` whole or not at all; on an exception the temporary file is removed.
    """
    path = os.fspath(path)
    tmp = '{}.tmp{}{}'.format(path, os.getpid(), os.path.splitext(path)[1])
    try:
        yield tmp
        with open(tmp, 'rb+') as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def atomic_write_json(path, obj):
    """Write ``obj`` as indented, key-sorted UTF-8 JSON to ``path`` atomically."""
    with atomic_path(path) as tmp:
        with open(tmp, 'w', encoding='utf-8') as handle:
            json.dump(obj, handle, indent=2, sort_keys=True, ensure_ascii=False)


def write_safetensors(path, tensors, metadata=None):
    """Write ``tensors`` (name -> NumPy array) as a safetensors file at ``path``, atomically.

    The bytes are written with ``open``, so the file gets the mode of every other output
    (0666 less the umask, 0644 under the usual 022); ``safetensors.numpy.save_file`` creates
    its files 0600. Needs the ``safetensors`` package (the callers ``require`` it).
    """
    from safetensors.numpy import save  # pylint: disable=import-outside-toplevel
    data = save(tensors, metadata=metadata)
    with atomic_path(path) as tmp:
        with open(tmp, 'wb') as handle:
            handle.write(data)
