"""Argument validation shared by every public entry point.

Every check raises ``ValueError`` (or ``TypeError`` for a wrong kind of object) whose message says
what was expected and ends with what was received, e.g.
``layout must be one of 'NKT', 'NTK', 'TNK'. Received: layout='NCHW'``.

Where checks run: once, at the public entry point, on arrays.

- A public function validates its arguments when a user calls it (:func:`validated_by`); a
  library function or block calling it inside an already checked call trusts its caller, so a
  ``valid_length`` travelling from ``BertEncoder`` to the softmax is copied to NumPy once.
- A block validates the arrays of a call in its ``forward`` (``CheckedBlock.check_inputs``),
  before a hybridized block's cached graph runs, so hybridized and imperative calls raise the
  same errors.
- Inside a symbolic graph nothing that needs values or shapes is checked: a library block used
  as a child of a user's own hybridized block sees symbols and is not checked (check the arrays
  before calling the user's block, or call the library block at the top).
"""
import contextlib
import functools
import inspect
import numbers
import threading

import mxnet as mx
import numpy as onp

__all__ = ['fail', 'fail_type', 'is_symbol', 'entry', 'validated_by', 'check_choice',
           'check_positive_int', 'check_probability', 'check_bool', 'check_rank',
           'check_same_dim', 'check_mask', 'check_valid_length', 'check_index_range',
           'check_float_tensor', 'check_np_array', 'check_axis', 'check_positive_real',
           'check_not_empty', 'check_memory_lengths', 'check_token_ids',
           'check_same_float_dtype', 'check_not_bool_lengths', 'check_text']

# Largest element count a score tensor may have: MXNet 1.9.1 CPU kernels index with int32 unless
# built with large-tensor support (the PyPI wheel is not).
MAX_ELEMENTS = 2 ** 31 - 1

_CALLS = threading.local()     # depth of the checked calls running in this thread


def _format(received):
    return ', '.join('{}={!r}'.format(k, v) for k, v in received.items())


def fail(expected, **received):
    """Raise ``ValueError('<expected>. Received: k=v, ...')``."""
    raise ValueError('{}. Received: {}'.format(expected, _format(received)))


def fail_type(expected, **received):
    """Raise ``TypeError('<expected>. Received: k=v, ...')``."""
    raise TypeError('{}. Received: {}'.format(expected, _format(received)))


def is_symbol(x):
    """True when ``x`` is a symbolic tensor (inside a hybridized graph)."""
    return isinstance(x, mx.sym.Symbol)


@contextlib.contextmanager
def entry():
    """Mark a checked public call for its duration; yields True for the outermost one.

    The outermost call validates its arguments; every checked call made inside it (a block's
    children run imperatively, functions calling functions) yields False and skips its checks.
    Per thread, and restored when the call raises.
    """
    depth = getattr(_CALLS, 'depth', 0)
    _CALLS.depth = depth + 1
    try:
        yield depth == 0
    finally:
        _CALLS.depth = depth


def validated_by(check):
    """Decorator of a public function: ``check(**arguments)`` runs before it (defaults filled
    in, by parameter name) when the call is the outermost checked call (see :func:`entry`).

    ``check`` receives every parameter by name (accept ``**_`` for those it ignores) and must
    return without looking at symbolic arguments.
    """
    def decorate(func):
        signature = inspect.signature(func)

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with entry() as outermost:
                if outermost:
                    bound = signature.bind(*args, **kwargs)
                    bound.apply_defaults()
                    check(**bound.arguments)
                return func(*args, **kwargs)
        return wrapper
    return decorate


def is_tensor(x):
    return isinstance(x, (mx.nd.NDArray, mx.sym.Symbol))


def check_np_array(name, x, of=''):
    """``x`` must be an ``mx.np`` (numpy-mode) array: a NumPy array, a list or a legacy ``mx.nd``
    array is a TypeError naming the conversion. ``of`` ends the expectation, e.g. ``' of token
    ids'``."""
    if not isinstance(x, mx.np.ndarray):
        fail_type('{} must be an mx.np array{} (numpy mode: convert a NumPy array with '
                  'mx.np.array, a legacy mx.nd array with .as_np_ndarray())'.format(name, of),
                  **{name: type(x).__name__})


def check_float_tensor(name, x):
    """``x`` must be an ``mx.np`` float array (float16/32/64)."""
    check_np_array(name, x)
    if x.dtype not in (onp.float16, onp.float32, onp.float64):
        fail_type('{} must be a float16, float32 or float64 array'.format(name),
                  **{name + '.dtype': onp.dtype(x.dtype).name})
    return x


def check_axis(name, axis, ndim):
    """An integer axis in [-ndim, ndim)."""
    if isinstance(axis, bool) or not isinstance(axis, numbers.Integral):
        fail_type('{} must be an integer'.format(name), **{name: axis})
    if not -ndim <= axis < ndim:
        fail('{} must lie in [{}, {}) for an array of rank {}'.format(name, -ndim, ndim, ndim),
             **{name: axis})
    return int(axis)


def check_positive_real(name, value, allow_none=False):
    """A finite real number > 0 (or None when allowed)."""
    if value is None and allow_none:
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        fail_type('{} must be a number'.format(name), **{name: value})
    if not 0 < value < float('inf'):
        fail('{} must be a finite number > 0'.format(name), **{name: value})
    return float(value)


def check_choice(name, value, choices):
    """``value`` must be one of ``choices``."""
    if value not in choices:
        fail('{} must be one of {}'.format(name, ', '.join(repr(c) for c in choices)),
             **{name: value})
    return value


def check_positive_int(name, value, allow_none=False):
    if value is None and allow_none:
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        fail('{} must be a positive integer'.format(name), **{name: value})
    return int(value)


def check_probability(name, value):
    """A dropout rate: a real number in [0, 1)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 <= value < 1:
        fail('{} must be a number in [0, 1)'.format(name), **{name: value})
    return float(value)


def check_bool(name, value):
    if not isinstance(value, (bool, onp.bool_)):
        fail_type('{} must be a bool'.format(name), **{name: value})
    return bool(value)


def check_rank(name, x, ranks):
    """Imperatively check that tensor ``x`` has one of the ranks in ``ranks``."""
    if x is None or is_symbol(x):
        return
    check_np_array(name, x)
    if x.ndim not in ranks:
        fail('{} must have rank {}'.format(name, ' or '.join(str(r) for r in ranks)),
             **{name + '.shape': x.shape})


def check_same_dim(what, **named):
    """Imperatively check that the given ``name=(tensor, axis)`` pairs agree in size."""
    sizes = {n: t.shape[a] for n, (t, a) in named.items() if t is not None and not is_symbol(t)}
    if len(set(sizes.values())) > 1:
        fail('{} must agree'.format(what),
             **{'{}.shape'.format(n): named[n][0].shape for n in sizes})


def check_mask(mask, scores_shape, name='mask'):
    """Imperatively check a 0/1 mask against the shape of the scores it masks.

    The mask must have the scores' rank, every dimension equal to the scores' or 1, and only the
    values 0 and 1 (bool, integer or float dtype).
    """
    if mask is None or is_symbol(mask):
        return
    if len(mask.shape) != len(scores_shape) or any(
            m not in (1, s) for m, s in zip(mask.shape, scores_shape)):
        fail('{} must have the rank of the scores {} with every dimension equal to theirs or 1'
             .format(name, tuple(scores_shape)), **{name + '.shape': mask.shape})
    if mask.dtype != onp.bool_ and mask.size:
        values = mask.asnumpy()
        if not onp.all((values == 0) | (values == 1)):
            bad = values[(values != 0) & (values != 1)].ravel()[0]
            fail('{} must hold only 0 and 1 (1 = attend, 0 = blocked; additive masks are not '
                 'accepted)'.format(name), **{'a ' + name + ' value': float(bad)})


# How a 0/1 padding mask becomes the lengths valid_length holds (named in every refusal of one).
MASK_TO_LENGTHS = ('a 0/1 padding mask (B, L_m), e.g. a Hugging Face attention_mask, converts '
                   'to lengths (B,) with mask.sum(axis=-1)')


def check_not_bool_lengths(valid_length, name='valid_length'):
    """Refuse a bool array given as lengths, whatever its shape (TypeError: it is a mask)."""
    if isinstance(valid_length, mx.nd.NDArray) and onp.dtype(valid_length.dtype) == onp.bool_:
        hint = ': ' + MASK_TO_LENGTHS if 'valid_length' in name else ''
        fail_type('{} must hold lengths (an integer, or integral float, array), not a bool '
                  'mask{}'.format(name, hint),
                  **{name + '.dtype': 'bool', name + '.shape': valid_length.shape})


def check_valid_length(valid_length, length, name='valid_length', batch_size=None):
    """Imperatively check integer lengths in [0, length] (float lengths must be integral); a
    bool array is refused whatever its shape (it is a mask, not lengths). Returns the lengths
    as a NumPy array (None for None or a symbol)."""
    if valid_length is None or is_symbol(valid_length):
        return None
    check_np_array(name, valid_length, ' of integer lengths')
    check_not_bool_lengths(valid_length, name)
    values = valid_length.asnumpy()
    if values.dtype.kind == 'f' and not onp.all(onp.isfinite(values) & (values == onp.round(values))):
        fail('{} must hold integers (a float array must have integral values)'.format(name),
             **{name: values.tolist()})
    if values.dtype.kind not in 'iuf':
        fail_type('{} must have an integer or float dtype'.format(name),
                  **{name + '.dtype': str(values.dtype)})
    if values.size and (values.min() < 0 or values.max() > length):
        fail('{} must lie in [0, {}]'.format(name, length), **{name: values.tolist()})
    if batch_size is not None and values.shape[:1] != (batch_size,):
        fail('{} must have batch size {} on axis 0'.format(name, batch_size),
             **{name + '.shape': values.shape})
    return values


def check_memory_lengths(valid_length, batch_size, query_length, memory_length):
    """Memory lengths of attention: integer (B,) or (B, L_q), values in [0, L_m].

    Per-query lengths (B, L_q) that look like a 0/1 padding mask are refused: every value 0 or
    1, L_m > 1 and some row holding more than one 1 (as lengths, those queries would all attend
    memory position 0 only, which a mask passed here by mistake would produce silently).
    """
    if valid_length is None or is_symbol(valid_length):
        return
    check_rank('valid_length', valid_length, (1, 2))
    if valid_length.shape not in ((batch_size,), (batch_size, query_length)):
        fail('valid_length must have shape (B,) or (B, L_q) = ({}, {})'.format(
            batch_size, query_length), **{'valid_length.shape': valid_length.shape})
    values = check_valid_length(valid_length, memory_length)
    if values.ndim == 2 and memory_length > 1 and values.size and onp.all(values <= 1):
        ones = (values == 1).sum(axis=1)
        if ones.max() > 1:
            row = int(onp.argmax(ones > 1))
            shown = values[row, :12].astype(onp.int64).tolist() + (
                ['...'] if values.shape[1] > 12 else [])
            fail('valid_length holds memory lengths, one per query when (B, L_q), not a 0/1 '
                 'padding mask: these values are all 0 or 1 with several 1s in a row, which '
                 'would let each of those queries attend memory position 0 only; {}'.format(
                     MASK_TO_LENGTHS),
                 **{'valid_length.shape': values.shape,
                    'valid_length[{}]'.format(row): shown})


def check_not_empty(what, sizes, **received):
    """Refuse a zero in ``sizes`` (e.g. the batch size B and the memory length L_m).

    MXNet 1.9.1's reshapes cannot infer a shape across a zero-size axis inside a graph, so a
    batch of 0 or a memory of length 0 would run imperatively but fail in a hybridized or
    exported graph; every path refuses them up front instead, with the same error.
    """
    if not all(sizes):
        fail('{} must be at least 1 (MXNet graphs cannot run on zero-size batch or memory '
             'axes)'.format(what), **received)


def check_text(text, name, where=''):
    """Refuse a str that cannot be encoded as UTF-8 (a lone UTF-16 surrogate, e.g. '\\ud800',
    or bytes a command line could not decode): tokenizers cannot take it. ``where`` (e.g. a
    file and question id) prefixes the message."""
    try:
        text.encode('utf-8')
    except UnicodeEncodeError as err:
        fail('{}{} must be Unicode text that can be encoded as UTF-8 (no lone surrogate)'.format(
            where + ': ' if where else '', name), **{name: '{} characters, a lone surrogate at '
                                                       'character {}'.format(len(text), err.start)})


def check_index_range(num_elements, what='the attention scores'):
    """Refuse tensors that 32-bit indexing cannot address, before any kernel runs."""
    if num_elements > MAX_ELEMENTS:
        fail('{} would have {} elements, more than the {} that MXNet 1.9.1 kernels can index; '
             'memory is O(B*K*L_q*L_m): split the batch or use chunked attention'.format(
                 what, num_elements, MAX_ELEMENTS), num_elements=num_elements)


def check_token_ids(name, ids, size):
    """Imperatively check token ids in [0, size): an integer array (float ids are refused, as an
    Embedding would truncate them silently, and so are ids outside the range it would clip)."""
    check_np_array(name, ids, ' of token ids')
    values = ids.asnumpy()
    if values.dtype.kind not in 'iu':
        fail_type('{} must be an integer array of token ids (int32; convert float ids with '
                  '.astype(\'int32\'))'.format(name), **{name + '.dtype': str(values.dtype)})
    if values.size and not 0 <= values.min() <= values.max() < size:
        fail('{}: token ids must lie in [0, {})'.format(name, size),
             **{'(min, max) of ' + name: (int(values.min()), int(values.max()))})


def check_same_float_dtype(**named):
    """The given ``name=array`` (None skipped) must be ``mx.np`` float arrays of one dtype
    (MXNet would fail with 'Incompatible attr' or silently mix precisions)."""
    present = {n: x for n, x in named.items() if x is not None and not is_symbol(x)}
    for name, x in present.items():
        check_float_tensor(name, x)
    dtypes = {n: onp.dtype(x.dtype).name for n, x in present.items()}
    if len(set(dtypes.values())) > 1:
        fail_type('{} must share one float dtype'.format(', '.join(present)),
                  **{n + '.dtype': d for n, d in dtypes.items()})
