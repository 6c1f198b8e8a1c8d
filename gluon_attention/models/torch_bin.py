"""Reading a PyTorch ``pytorch_model.bin`` state dict without PyTorch.

``torch.save`` (since PyTorch 1.6) writes a zip archive: ``<name>/data.pkl``, a pickle of the
state dict whose tensors refer to storages by key, and ``<name>/data/<key>``, each storage's raw
little-endian bytes. The pickle is read with a restricted unpickler: only the classes a state
dict needs (``collections.OrderedDict``, the typed storages, ``torch._utils._rebuild_tensor_v2``
and ``_rebuild_parameter``) resolve; anything else is refused, so no code in the file runs.
bfloat16 storages become float32 (exact). The older non-zip format is not read.
"""
import collections
import pickle
import zipfile

import numpy as onp

from .. import _checks

__all__ = ['load_torch_bin']

_STORAGE_DTYPES = {'FloatStorage': onp.float32, 'DoubleStorage': onp.float64,
                   'HalfStorage': onp.float16, 'BFloat16Storage': 'bfloat16',
                   'LongStorage': onp.int64, 'IntStorage': onp.int32, 'ShortStorage': onp.int16,
                   'CharStorage': onp.int8, 'ByteStorage': onp.uint8, 'BoolStorage': onp.bool_}


def _rebuild_tensor(storage, offset, size, stride, *_):
    itemsize = storage.dtype.itemsize
    view = onp.lib.stride_tricks.as_strided(storage[offset:], shape=tuple(size),
                                            strides=tuple(s * itemsize for s in stride))
    return onp.array(view)


def _rebuild_parameter(data, *_):
    return data


class _StateDictUnpickler(pickle.Unpickler):
    """The restricted unpickler of the module docstring; ``storages(key, dtype)`` reads one."""

    def __init__(self, file, storages):
        super().__init__(file)
        self._storages = storages

    def find_class(self, module, name):
        if (module, name) == ('collections', 'OrderedDict'):
            return collections.OrderedDict
        if (module, name) == ('torch._utils', '_rebuild_tensor_v2'):
            return _rebuild_tensor
        if (module, name) == ('torch._utils', '_rebuild_parameter'):
            return _rebuild_parameter
        if module == 'torch' and name in _STORAGE_DTYPES:
            return _STORAGE_DTYPES[name]
        raise pickle.UnpicklingError('a state dict holds no {}.{}'.format(module, name))

    def persistent_load(self, pid):
        _, dtype, key = pid[:3]
        return self._storages(str(key), dtype)


def _reader(archive, prefix):
    def read(key, dtype):
        raw = archive.read('{}/data/{}'.format(prefix, key))
        if dtype == 'bfloat16':   # the high 16 bits of a float32
            return (onp.frombuffer(raw, '<u2').astype(onp.uint32) << 16).view(onp.float32)
        return onp.frombuffer(raw, onp.dtype(dtype).newbyteorder('<'))
    return read


def load_torch_bin(path):
    """The state dict of a ``torch.save`` zip file: name -> numpy array.

    Parameters
    ----------
    path : str or os.PathLike

    Returns
    -------
    dict of str -> numpy.ndarray

    Raises
    ------
    ValueError
        Not a zip archive of a state dict (e.g. the pre-1.6 format or a truncated file), or a
        pickle naming other classes than a state dict's.
    """
    try:
        with zipfile.ZipFile(str(path)) as archive:
            pickles = [n for n in archive.namelist() if n.endswith('/data.pkl')]
            if len(pickles) != 1:
                raise zipfile.BadZipFile('no single data.pkl')
            prefix = pickles[0][:-len('/data.pkl')]
            with archive.open(pickles[0]) as file:
                state = _StateDictUnpickler(file, _reader(archive, prefix)).load()
    except (zipfile.BadZipFile, pickle.UnpicklingError, KeyError, EOFError) as err:
        _checks.fail('{} must be a PyTorch state dict saved by torch.save ({})'.format(
            path, err), path=str(path))
    if not isinstance(state, dict):
        _checks.fail('{} must hold a state dict (name -> tensor)'.format(path),
                     path=str(path))
    return {name: value for name, value in state.items() if isinstance(value, onp.ndarray)}
