"""Small operator helpers shared by the core: the operator namespace of a tensor, a gradient
stop, the same-shape masked fill, and float16-on-CPU handling.

Everything here works on ``mx.np`` arrays and inside ``hybrid_forward`` (numpy-mode Symbols).
Imports nothing of the package, so every core module can use it.
"""
import functools

import mxnet as mx

__all__ = ['get_F', 'stop_gradient', 'masked_fill', 'float32_on_cpu', 'to_float32',
           'cast_nested', 'has_float16_on_cpu']


def get_F(x):
    """The operator namespace for ``x``: ``mx.sym`` inside a graph, ``mx.nd`` otherwise.

    Use ``F.np`` and ``F.npx`` on the result.
    """
    return mx.sym if isinstance(x, mx.sym.Symbol) else mx.nd


def stop_gradient(F, x):
    """``x`` with no gradient flowing back through it (numpy mode has no ``stop_gradient``).

    Uses the legacy ``BlockGrad`` operator, so it also works inside a graph.
    """
    return F.BlockGrad(x.as_nd_ndarray()).as_np_ndarray()


def masked_fill(F, x, keep, fill):
    """``x`` where ``keep`` is 1, ``fill`` elsewhere; all three of one shape and dtype.

    The legacy same-shape ``where``: no NaN in ``x`` at blocked positions leaks, and its
    gradient is correct (in MXNet 1.9.1 ``np.where`` with a Python scalar branch sends the
    gradient to the positions it did not select).
    """
    return F.where(keep.as_nd_ndarray(), x.as_nd_ndarray(), fill.as_nd_ndarray()).as_np_ndarray()


def has_float16_on_cpu(values):
    """Whether any of ``values`` is an imperative float16 array on a CPU."""
    return any(isinstance(v, mx.nd.NDArray) and v.dtype == 'float16'
               and v.ctx.device_type == 'cpu' for v in values)


def to_float32(x):
    """A float16 array as float32; anything else unchanged."""
    if isinstance(x, mx.nd.NDArray) and x.dtype == 'float16':
        return x.astype('float32')
    return x


def cast_nested(out, dtype):
    """Cast the float32 arrays of ``out`` (possibly nested in lists/tuples) to ``dtype``."""
    if isinstance(out, (list, tuple)):
        return type(out)(cast_nested(o, dtype) for o in out)
    if isinstance(out, mx.nd.NDArray) and out.dtype == 'float32':
        return out.astype(dtype)
    return out


def float32_on_cpu(func):
    """Decorator: run ``func`` in float32 when an imperative float16 input lives on a CPU
    (MXNet 1.9.1 has no float16 GEMM there).

    Outputs (arrays, possibly nested in lists/tuples) are cast back to float16.
    """
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        if not has_float16_on_cpu(list(args) + list(kwargs.values())):
            return func(*args, **kwargs)
        args = [to_float32(a) for a in args]
        kwargs = {k: to_float32(v) for k, v in kwargs.items()}
        return cast_nested(func(*args, **kwargs), 'float16')
    return wrapper
