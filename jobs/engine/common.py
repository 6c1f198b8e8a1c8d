"""What every job and script shares, written once: the ``--ctx`` grammar, the seeding rule and
the atomic write. (The thread count is set by ``scripts/_threads.py`` before MXNet starts.)

A killed run must lose nothing and resume exactly: files are written to a temporary name in the
same folder, flushed to disk and renamed over the target (:func:`atomic_path`), and the random
state of a step is a function of ``(seed, step)`` only (:func:`seed_step`), since ``mx.random``
has no state that a checkpoint could save.
"""
import os
import re

import mxnet as mx
import numpy as onp

from gluon_attention import checks, hardware
from gluon_attention.files import atomic_path, atomic_write_json
from gluon_attention.hardware import amx_in_use

__all__ = ['CTX_FORMS', 'parse_ctx', 'parse_devices', 'seed_step', 'atomic_path',
           'atomic_write_json', 'products_record']

#: The accepted ``--ctx`` forms (comma-separated, no repeats).
CTX_FORMS = "'cpu', 'gpu', 'cpu(N)', 'gpu(N)', comma-separated without repeats (e.g. 'cpu(0),cpu(1)')"
_CTX_ITEM = re.compile(r'(cpu|gpu)(?:\((\d+)\))?')


def parse_ctx(text):
    """Parse a device list: ``'cpu'``, ``'gpu'``, ``'cpu(N)'``, ``'gpu(N)'``, comma-separated.

    Parameters
    ----------
    text : str
        Spaces are ignored; ``cpu``/``gpu`` mean device 0.

    Returns
    -------
    list of mx.Context

    Raises
    ------
    TypeError
        ``text`` is not a string.
    ValueError
        Any other form (``gpu0``, unbalanced parentheses, an empty item) or a repeated context
        (``cpu,cpu``: a data-parallel run cannot use the same device twice); the message names the
        accepted forms.
    """
    if not isinstance(text, str):
        checks.fail_type('ctx must be a string of the forms ' + CTX_FORMS, ctx=type(text).__name__)
    contexts = []
    for item in text.replace(' ', '').split(','):
        match = _CTX_ITEM.fullmatch(item)
        if not match:
            checks.fail('ctx must be ' + CTX_FORMS, ctx=text)
        contexts.append(mx.Context(match.group(1), int(match.group(2) or 0)))
    if len(set(contexts)) != len(contexts):
        checks.fail('ctx must be ' + CTX_FORMS + '; a context is repeated', ctx=text)
    return contexts


def parse_devices(text):
    """:func:`parse_ctx`, then check that every GPU named exists: the devices of ``--ctx``.

    Raises
    ------
    ValueError
        As :func:`parse_ctx`, or when a ``gpu(N)`` has N >= the GPUs this MXNet sees (0 on a
        CPU-only build): ``--ctx names a GPU but this MXNet sees 0 GPU(s). Received: ctx=...``.
    """
    contexts = parse_ctx(text)
    gpus = [c.device_id for c in contexts if c.device_type == 'gpu']
    if gpus and max(gpus) >= mx.context.num_gpus():
        checks.fail('--ctx names a GPU but this MXNet sees {} GPU(s)'.format(
            mx.context.num_gpus()), ctx=text)
    return contexts


def seed_step(seed, step):
    """Reseed ``mx.random`` for ``(seed, step)`` and return a NumPy generator for it.

    The one seeding rule of every job: the same ``(seed, step)`` gives the same dropout masks and
    shuffles whether the run went straight through or resumed from a checkpoint.
    """
    mx.random.seed((seed * 1000003 + step) % (2 ** 31 - 1))
    return onp.random.RandomState((seed * 7919 + step) % (2 ** 31 - 1))


def products_record(matmul_dtype):
    """How this process ran its dense products, for a run's metrics: ``matmul_dtype``, ``amx``
    (whether gluon_attention gave oneDNN AMX at import: the recorded decision, no timed probe)
    and ``amx_reason`` (why, one sentence)."""
    return {'matmul_dtype': matmul_dtype, 'amx': amx_in_use(),
            'amx_reason': hardware(verify=False).reason}
