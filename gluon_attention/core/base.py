"""Base classes of the library's blocks (checks at the entry, float16 inputs on a CPU) and the
check shared by blocks with input projections.

A :class:`CheckedBlock` validates the arrays of a call in ``forward``, before a hybridized
block's cached graph runs, and only at the outermost checked call (its children, and the
functions they call, trust it: see :mod:`gluon_attention._checks`). A child inside a user's
own hybridized block receives symbols and is not checked. A call with an empty input array
(e.g. L_q = 0) runs imperatively even when the block is hybridized, and returns empty outputs
of the right shapes.
"""
import functools
import inspect

import mxnet as mx
import numpy as onp
from mxnet.gluon import HybridBlock

from .. import _checks

from ._ops import cast_nested, has_float16_on_cpu, to_float32

__all__ = ['CheckedBlock', 'Float32OnCPU', 'check_dense_inputs']


class CheckedBlock(HybridBlock):
    """A HybridBlock whose :meth:`check_inputs` validates each call's arrays once.

    Subclasses override :meth:`check_inputs` (same positional arguments as ``hybrid_forward``
    without ``F``); it runs when the block is called on arrays (imperatively or hybridized)
    and no checked call encloses this one.
    """

    def check_inputs(self, *inputs):
        """Validate the arrays of one call; raise ValueError/TypeError (default: accept)."""

    def forward(self, x, *args):  # pylint: disable=arguments-differ
        with _checks.entry() as outermost:
            if outermost and not _checks.is_tensor(x):
                _checks.fail_type('{} must be called on mx.np arrays (symbols inside a graph)'
                                  .format(type(self).__name__),
                                  **{'first input': type(x).__name__})
            if outermost and isinstance(x, mx.nd.NDArray):
                _check_arity(type(self), 1 + len(args))
                self.check_inputs(x, *args)
            return self._run(x, *args)

    def _run(self, *inputs):
        if any(isinstance(a, mx.nd.NDArray) and a.size == 0 for a in inputs):
            return self._run_imperatively(*inputs)
        return super().forward(*inputs)

    def _run_imperatively(self, *inputs):
        """One call without the cached graph: MXNet 1.9.1 graphs fail on zero-size
        intermediates (legacy ``broadcast_like``; oneDNN ``FullyConnected`` without
        ``static_alloc``), so a call with an empty input (L_q = 0) runs imperatively."""
        ctx = inputs[0].ctx
        with ctx:
            params = {k: v.data(ctx) for k, v in self._reg_params.items()}
            return self.hybrid_forward(mx.nd, *inputs, **params)


@functools.lru_cache(maxsize=None)
def _required_inputs(cls):
    """Names of the arguments ``cls.check_inputs`` needs (no default), in order."""
    params = list(inspect.signature(cls.check_inputs).parameters.values())[1:]   # minus self
    return tuple(p.name for p in params
                 if p.kind == p.POSITIONAL_OR_KEYWORD and p.default is p.empty)


def _check_arity(cls, count):
    """A call with fewer arrays than the block needs is a TypeError naming the missing ones
    (instead of Python's error about ``check_inputs``)."""
    required = _required_inputs(cls)
    if count < len(required):
        _checks.fail_type('{} must be called with ({}) positionally; missing {}'.format(
            cls.__name__, ', '.join(required), ', '.join(required[count:])),
            **{'number of inputs': count})


class Float32OnCPU(CheckedBlock):
    """A :class:`CheckedBlock` that runs float16 inputs on a CPU in float32 (MXNet 1.9.1 has no
    float16 GEMM there) and returns its float outputs as float16. Checks see the inputs as
    given."""

    def _run(self, *inputs):
        if not has_float16_on_cpu(inputs):
            return super()._run(*inputs)
        return cast_nested(super()._run(*[to_float32(a) for a in inputs]), 'float16')


def check_dense_inputs(*named):
    """``(name, x, dense)`` triples: ``x`` keeps the feature size of the first call and has the
    parameters' dtype (float16 on a CPU is accepted: it runs in float32)."""
    for name, x, proj in named:
        in_units = proj.weight.shape[1]
        if in_units > 0 and x.shape[-1] != in_units:
            _checks.fail('{} must keep the feature size C of the first call'.format(name),
                         **{name + '.shape': x.shape, 'expected C': in_units})
        dtype, got = onp.dtype(proj.weight.dtype), onp.dtype(x.dtype)
        if got != dtype and not (got == onp.float16 and dtype == onp.float32
                                 and x.ctx.device_type == 'cpu'):
            _checks.fail_type('{} must have the parameters\' dtype {} (cast the block with '
                              '.cast() to change it)'.format(name, dtype.name),
                              **{name + '.dtype': got.name})
