"""Fused residual + LayerNorm and bias + GELU: one pass over the rows instead of a chain of
operators, forward and backward (CPU, float32; bfloat16 data forward only).

Two operators of the fused kernel library (:mod:`gluon_attention.core.fused`; the same build,
the same instruction-set choice): ``ga_add_layer_norm`` computes ``LayerNorm(data + residual)``
over the last axis (Ba et al., 2016, biased variance as MXNet's ``LayerNorm``) and its backward
pass in one sweep each, recomputing the row statistics instead of storing them; ``ga_bias_gelu``
computes ``gelu(data + bias)``, the erf form of GELU (Hendrycks and Gimpel, 2016), with the
normal CDF from formula 7.1.26 of Abramowitz and Stegun (1964) (absolute error below 1.5e-7,
about one float32 rounding of the result).

bfloat16 (inference): ``data`` (and ``residual``) may be bfloat16 arrays (``BFLOAT16`` of
:mod:`gluon_attention.core.matmul`; legacy arrays through ``as_np_ndarray()``), with float32
``gamma``, ``beta`` and ``bias``: each row is widened to float32, computed as a float32 row is and
rounded to the nearest bfloat16 (ties to even; the AVX512-BF16 instruction where the CPU has
it, which takes subnormal float32 results as 0). The output is then bfloat16. There is no
backward pass for bfloat16 data (the operators refuse it; imperatively a call under
``autograd.record()`` is refused first).

In the composed form (``fused=False``; for the blocks ``Kernels(rowwise='composed')``) the same
functions and blocks are MXNet's own ``+``,
``layer_norm``, ``fully_connected`` and ``leaky_relu(act_type='gelu')``. :class:`ResidualLayerNorm`
and :class:`DenseGELU` have the parameters (and parameter names) of ``nn.LayerNorm`` and
``nn.Dense``, so checkpoints load into either form. A block's form is chosen when it is built
and never changes (``kernels``, a :class:`~gluon_attention.core.kernels.Kernels` whose
``rowwise`` field is resolved when the block is built): 'fused' needs the library (RuntimeError
otherwise), and a call of a fused block on arrays off the CPU raises ValueError naming the block
and ``rowwise='composed'``, the form to build for them.

Glossary: N rows (every axis but the last), D the last axis.
"""
import mxnet as mx
from mxnet.gluon import nn

from .. import _checks
from . import fused as _fused
from ._ops import get_F
from .kernels import Kernels, from_legacy
from .matmul import BFLOAT16, MatmulChoice, fully_connected

__all__ = ['add_layer_norm', 'bias_gelu', 'ResidualLayerNorm', 'DenseGELU', 'LAYER_NORM_OP',
           'BIAS_GELU_OP']

LAYER_NORM_OP, BIAS_GELU_OP = _fused.LIBRARY_OPS[1:]


def _dtype_name(dtype):
    return 'bfloat16' if dtype == BFLOAT16 else str(dtype)


def _check_rows(data, **vectors_and_same):
    """Imperative checks of the fused operators: mx.np arrays on a CPU, data (..., D) float32
    or bfloat16 with D >= 1 (bfloat16 not under ``autograd.record()``), the named vectors
    float32 (D,), ``residual`` data's shape and dtype."""
    if _checks.is_symbol(data):
        return
    for name, x in dict(data=data, **vectors_and_same).items():
        if x is None:
            continue
        want = {'data': 'float32 or bfloat16', 'residual': _dtype_name(data.dtype)}.get(
            name, 'float32')
        if not isinstance(x, mx.np.ndarray) or _dtype_name(x.dtype) not in want.split(' or ') \
                or x.ctx.device_type != 'cpu':
            _checks.fail_type('{} must be a {} mx.np array on a CPU for the fused '
                              'operator'.format(name, want), **{name: '{} {} on {}'.format(
                                  type(x).__name__, _dtype_name(getattr(x, 'dtype', None)),
                                  getattr(x, 'ctx', None))})
    if data.dtype == BFLOAT16 and mx.autograd.is_recording():
        _checks.fail('the fused operators have no backward pass for bfloat16 data: call them '
                     'outside autograd.record() or with float32 data', data='bfloat16')
    if data.ndim < 1 or data.shape[-1] < 1:
        _checks.fail('data must have a last axis D >= 1', **{'data.shape': data.shape})
    for name, x in vectors_and_same.items():
        want = data.shape if name == 'residual' else (data.shape[-1],)
        if x is not None and x.shape != want:
            _checks.fail('{} must have shape {}'.format(name, want), **{name + '.shape': x.shape})


def _through_copy(F, x):
    """A copy of a (D,) parameter: MXNet 1.9.1's custom-operator interface does not tell an
    operator to add its gradients to an array with ``grad_req='add'`` (it overwrites them), so
    the gradients go through MXNet's own copy, which adds where asked."""
    return F.np.copy(x)


def _require_library():
    if not _fused.load():
        raise RuntimeError(_fused.load_error())


def add_layer_norm(data, gamma, beta, residual=None, eps=1e-5, fused=True):
    """``LayerNorm(data + residual)`` over the last axis, scaled by ``gamma``, shifted by ``beta``.

    Parameters
    ----------
    data : float32 or bfloat16 (..., D)
    gamma, beta : float32 (D,)
    residual : data's dtype and shape, or None (then ``LayerNorm(data)``)
    eps : float
        Added to the (biased) variance.
    fused : bool
        One ``ga_add_layer_norm`` operator (CPU; bfloat16 data: forward only, see the module
        docstring); False: MXNet's ``+`` and ``layer_norm``.

    Returns
    -------
    out : data's dtype (..., D)

    Notes
    -----
    Gradient accumulation (``grad_req='add'``) works for ``gamma`` and ``beta``; ``data`` and
    ``residual`` must not be such arrays themselves when ``fused`` (the operator overwrites
    their gradient, as MXNet 1.9.1's custom operators do): inside a network they are the
    outputs of other operators.

    Raises
    ------
    RuntimeError
        ``fused`` and the kernel library is not built or not loadable.
    TypeError, ValueError
        ``fused`` and (imperatively) inputs that are not CPU mx.np arrays of those dtypes and
        shapes (TypeError for the array or its dtype); bfloat16 data under
        ``autograd.record()`` (ValueError).
    """
    F = get_F(data)
    if not fused:
        summed = data if residual is None else data + residual
        return F.npx.layer_norm(summed, gamma=gamma, beta=beta, axis=-1, eps=eps)
    _require_library()
    _check_rows(data, gamma=gamma, beta=beta, residual=residual)
    gamma, beta = _through_copy(F, gamma), _through_copy(F, beta)
    inputs = [x.as_nd_ndarray() for x in (data, gamma, beta, residual) if x is not None]
    return getattr(F, LAYER_NORM_OP)(*inputs, eps=repr(float(eps)),
                                     residual=int(residual is not None)).as_np_ndarray()


def bias_gelu(data, bias, fused=True):
    """``gelu(data + bias)`` with the exact (erf) GELU, ``z * Phi(z)``.

    Parameters
    ----------
    data : float32 or bfloat16 (..., D)
    bias : float32 (D,)
    fused : bool
        One ``ga_bias_gelu`` operator (CPU; bfloat16 data: forward only); False: MXNet's ``+``
        and ``leaky_relu(act_type='gelu')``.

    Notes
    -----
    As in :func:`add_layer_norm`: ``bias`` may accumulate gradients, ``data`` may not.

    Returns
    -------
    out : data's dtype (..., D)

    Raises
    ------
    RuntimeError, TypeError, ValueError
        As :func:`add_layer_norm`.
    """
    F = get_F(data)
    if not fused:
        return F.npx.leaky_relu(data + bias, act_type='gelu')
    _require_library()
    _check_rows(data, bias=bias)
    return getattr(F, BIAS_GELU_OP)(data.as_nd_ndarray(),
                                    _through_copy(F, bias).as_nd_ndarray()).as_np_ndarray()


class _FusedChoice:
    """The ``rowwise`` kernel of the blocks below, chosen when a block is built (``kernels``
    resolved, the deprecated ``fused`` applied) and never changed. A call on arrays off the CPU
    with 'fused' raises ValueError; inside a parent's graph (symbols) the parent checks its
    own arrays."""

    def _choose(self, kernels, **legacy):
        kernels = from_legacy(type(self).__name__, kernels, **legacy).resolve()
        self._fused = kernels.rowwise == 'fused'
        return kernels

    @property
    def fused(self):
        """Whether the block runs the fused operator."""
        return self._fused

    def forward(self, x, *args):  # pylint: disable=arguments-differ
        if self._fused:
            _fused.refuse_off_cpu("{} built with rowwise='fused'".format(type(self).__name__),
                                  "build it with Kernels(rowwise='composed') for arrays on "
                                  'other devices',
                                  data=x)
        return super().forward(x, *args)


class ResidualLayerNorm(_FusedChoice, nn.LayerNorm):
    """``nn.LayerNorm`` over the last axis that adds an optional residual first:
    ``block(x, residual)`` is ``LayerNorm(x + residual)``, in one fused operator when ``fused``.

    Parameters
    ----------
    epsilon : float
    in_channels : int
        D (0: inferred).
    kernels : Kernels
        Its ``rowwise`` field: 'fused' runs :func:`add_layer_norm` fused, 'auto' when the
        library is loadable and the current context is a CPU (resolved here; RuntimeError for
        'fused' when the library is not available). Default ``Kernels()``.
    fused : bool, optional
        Deprecated (DeprecationWarning): ``kernels=Kernels(rowwise='fused' or 'composed')``.

    Inputs: data float32 (..., D); residual, data's shape, optional. Returns (..., D).
    The parameters are ``gamma`` and ``beta`` (D,), named as ``nn.LayerNorm``'s. Raises
    ValueError when fused and called on arrays off the CPU.
    """

    def __init__(self, epsilon=1e-5, in_channels=0, kernels=Kernels(), prefix=None,
                 params=None, fused=None):
        super().__init__(epsilon=epsilon, in_channels=in_channels, prefix=prefix, params=params)
        self._choose(kernels, fused=fused)

    def _alias(self):
        return 'layernorm'      # nn.LayerNorm's parameter names

    def hybrid_forward(self, F, data, residual=None, gamma=None,  # pylint: disable=arguments-differ
                       beta=None):
        if self._fused:
            return add_layer_norm(data, gamma, beta, residual, eps=self._epsilon)
        summed = data if residual is None else residual + data
        return F.npx.layer_norm(summed, gamma=gamma, beta=beta, axis=-1, eps=self._epsilon)


class DenseGELU(MatmulChoice, _FusedChoice, nn.Dense):
    """``nn.Dense(units, flatten=False)`` followed by the erf GELU; when ``fused`` the product
    runs without its bias and :func:`bias_gelu` adds it in the activation's pass.

    Parameters
    ----------
    units : int
    in_units : int
    kernels : Kernels
        ``rowwise`` as in :class:`ResidualLayerNorm`; ``matmul_dtype`` the product's dtype
        (:func:`~gluon_attention.core.matmul.fully_connected`); the GELU runs in float32.
    weight_initializer
        As ``nn.Dense``.
    fused, matmul_dtype : optional
        Deprecated (DeprecationWarning): the fields of ``kernels``.

    Inputs: x float32 (..., in_units). Returns (..., units); ValueError when ``fused`` or
    ``matmul_dtype='bfloat16'`` and called on arrays off the CPU. The parameters are ``weight``
    (units, in_units) and ``bias`` (units,), named as ``nn.Dense``'s.
    """

    def __init__(self, units, in_units=0, kernels=Kernels(), weight_initializer=None,
                 prefix=None, params=None, fused=None, matmul_dtype=None):
        super().__init__(units, flatten=False, in_units=in_units,
                         weight_initializer=weight_initializer, prefix=prefix, params=params)
        self._choose_matmul(self._choose(kernels, fused=fused,
                                         matmul_dtype=matmul_dtype).matmul_dtype)

    def _alias(self):
        return 'dense'          # nn.Dense's parameter names

    def hybrid_forward(self, F, x, weight, bias=None):  # pylint: disable=arguments-differ
        if self._fused:
            return bias_gelu(fully_connected(x, weight, None, self._units, self._matmul_dtype),
                             bias)
        out = fully_connected(x, weight, bias, self._units, self._matmul_dtype)
        return F.npx.leaky_relu(out, act_type='gelu')
