"""Small operator helpers shared by the core: the operator namespace of a tensor, a gradient
stop, the same-shape masked fill with its fill value and full-size mask terms (re-exported by
:mod:`~gluon_attention.core.masking`), and float16-on-CPU handling.

Everything here works on ``mx.np`` arrays and inside ``hybrid_forward`` (numpy-mode Symbols).
Imports nothing of the package, so every core module can use it.
"""
import functools

import mxnet as mx

__all__ = ['get_F', 'stop_gradient', 'masked_fill', 'mask_fill_like', 'broadcast_mask_terms',
           'float32_on_cpu', 'to_float32', 'cast_nested', 'has_float16_on_cpu']


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


def mask_fill_like(F, x):
    """The lowest finite value of ``x``'s dtype, shaped like ``x`` (shape- and dtype-free).

    -3.4028235e38 for float32, -65504 for float16 (so float16 never overflows to -inf),
    -1.8e308 for float64. Built as ``nan_to_num(full_like(x, -inf))``, which works inside a
    symbolic graph where the dtype is not known yet. Same fill as MXNet 2's ``masked_softmax``.
    """
    return F.np.nan_to_num(F.np.full_like(x, float('-inf')))


def broadcast_mask_terms(F, mask, x):
    """The two full-size masking terms for scores ``x``: ``(keep, fill)``, both shaped like ``x``,
    in ``x``'s dtype, and off the gradient path.

    ``keep`` is the 0/1 ``mask`` broadcast to ``x``; ``fill`` is 0 where ``mask`` is 1 and the
    lowest finite value of ``x``'s dtype where it is 0. ``mask`` (bool or 0/1, same rank as ``x``,
    each dimension equal or 1) is converted at its own small shape, then broadcast once.
    Shape- and dtype-free: the dtype comes from a one-element slice of ``x`` (empty ``x`` works).

    Why this form: in MXNet 1.9.1 a broadcasting binary op costs a slow reduction in its
    backward pass and ``np.where`` runs at a fraction of memory speed; the legacy same-shape
    ``where`` and a same-shape multiply by ``keep`` are the fastest exact masking measured.
    """
    lowest = mask_fill_like(F, F.np.sum(F.npx.reshape(x, (-1,))[0:1]))       # () in x's dtype
    mask = mask.astype('bool')
    keep = mask * F.np.ones_like(lowest)                                      # mask's shape
    fill = F.np.logical_not(mask) * lowest                                    # mask's shape
    x = x.as_nd_ndarray()
    keep = F.broadcast_like(keep.as_nd_ndarray(), x).as_np_ndarray()         # x's shape
    fill = F.broadcast_like(fill.as_nd_ndarray(), x).as_np_ndarray()         # x's shape
    return stop_gradient(F, keep), stop_gradient(F, fill)


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
