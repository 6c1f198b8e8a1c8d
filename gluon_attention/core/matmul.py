"""Dense layers whose matrix products may run in bfloat16 (CPU, oneDNN), for faster training.

With ``matmul_dtype='bfloat16'`` a product ``x @ weight.T + bias`` rounds its three float32
operands to bfloat16 (8 bits of mantissa, float32's exponent range; round to nearest even),
multiplies them with float32 accumulation (oneDNN's inner product; native on CPUs with
AVX512-BF16, such as AMD Zen 4 and Intel Cooper Lake and later), rounds the result to bfloat16
and returns it as float32. The backward pass does the same with the incoming gradient: the
gradients of ``x``, ``weight`` and ``bias`` are bfloat16 products returned as float32. The
parameters, their gradients' accumulation and the optimizer stay float32, and so does every
other operator (LayerNorm, GELU, softmax, attention): the usual mixed-precision recipe
(Kalamkar et al., 2019, "A Study of BFLOAT16 for Deep Learning Training"). On a 2-core AMD
Zen 4 (AVX512-BF16) the whole SQuAD training step runs 1.45x faster than in float32
(docs/squad.md, "bfloat16 products").

``'float32'`` (the default) is MXNet's own ``fully_connected``, exactly ``nn.Dense``.

:func:`bfloat16_problem` tells, once per process, whether the products run here: it runs one
small bfloat16 product and compares it with float32 (MXNet builds without oneDNN, or CPUs where
oneDNN has no bfloat16 inner product, fail it). :class:`Dense` keeps ``nn.Dense``'s parameter
names, so checkpoints load into either choice; :func:`set_matmul_dtype` changes the choice of
every such block under a model (e.g. float32 to evaluate a model trained in bfloat16).
"""
import functools
import warnings

import numpy as onp

import mxnet as mx
from mxnet.gluon import HybridBlock, nn

from .. import _checks
from ..hardware import AMX_FLAGS, amx_in_use, hardware
from ._ops import get_F

__all__ = ['MATMUL_DTYPES', 'BFLOAT16', 'check_matmul_dtype', 'amx_warning', 'warn_without_amx',
           'bfloat16_problem', 'require_matmul_dtype', 'fully_connected', 'MatmulChoice', 'Dense', 'set_matmul_dtype']

#: The ``matmul_dtype`` choices.
MATMUL_DTYPES = ('float32', 'bfloat16')
#: MXNet 1.x's bfloat16 (a structured NumPy dtype: NumPy has none).
BFLOAT16 = onp.dtype([('bfloat16', onp.uint16)])


def check_matmul_dtype(value):
    """``value`` if it is one of :data:`MATMUL_DTYPES`; ValueError otherwise. 'bfloat16' on a
    CPU that has AMX but runs without it warns once (:func:`warn_without_amx`)."""
    value = _checks.check_choice('matmul_dtype', value, MATMUL_DTYPES)
    if value == 'bfloat16':
        warn_without_amx()
    return value


def amx_warning(report):
    """The sentence :func:`warn_without_amx` warns with for ``report`` (a
    :class:`gluon_attention.hardware.HardwareReport`), or None: decided by the instruction sets
    in use (the CPU's flags and whether oneDNN was given AMX), not by timing."""
    if not all(f in report.cpu_flags for f in AMX_FLAGS) or amx_in_use():
        return None
    return ("matmul_dtype='bfloat16' on a CPU with AMX that runs without it ({}): oneDNN "
            'computes the bfloat16 products with AVX512-BF16 instructions instead, measured at '
            '0.4-0.8x the speed of float32 on such a CPU (with AMX: 1.0-3.1x). For AMX, import '
            'gluon_attention before any MXNet operator runs, with GA_AMX unset or 1; else keep '
            "matmul_dtype='float32'".format(report.reason))


@functools.lru_cache(maxsize=None)
def warn_without_amx():
    """Warn (RuntimeWarning, once per process) when bfloat16 products would run without the
    AMX this CPU has (not granted, opted out with GA_AMX=0, a user's lower DNNL_MAX_CPU_ISA);
    returns the message or None. A oneDNN that ran before the import is not seen here:
    ``gluon_attention.hardware()`` tells it by timing."""
    message = amx_warning(hardware(verify=False))
    if message:
        warnings.warn(message, RuntimeWarning, stacklevel=4)
    return message


def _cast(F, x, dtype):
    return F.amp_cast(x.as_nd_ndarray(), dtype=dtype).as_np_ndarray()


@functools.lru_cache(maxsize=None)
def bfloat16_problem():
    """None when bfloat16 products run on this CPU, else why not (a sentence). Probed once per
    process: a (64, 64) x (64, 64) bfloat16 product must raise no error and agree with float32
    within 3e-2 of the largest entry."""
    rng = onp.random.RandomState(0)
    x, w = (rng.uniform(-1, 1, size=(64, 64)).astype('float32') for _ in range(2))
    try:
        out = fully_connected(mx.np.array(x, ctx=mx.cpu()), mx.np.array(w, ctx=mx.cpu()),
                              None, 64, 'bfloat16').asnumpy()
    except mx.base.MXNetError as err:
        return 'MXNet refused a bfloat16 product: {}'.format(str(err).splitlines()[0])
    error = float(abs(out - x @ w.T).max() / abs(x @ w.T).max())
    if error < 3e-2:
        return None
    return 'a bfloat16 product differs from float32 by {:.3g} of its largest entry'.format(error)


def require_matmul_dtype(matmul_dtype, contexts=None, cpu_features=None):
    """Check, before any work, that ``matmul_dtype`` products run on ``contexts`` (mxnet
    Contexts, or None for the current one); returns a line for the log: the choice and, for
    bfloat16, whether the CPU has AVX512-BF16 (without it oneDNN emulates the products, slower)
    by ``cpu_features``, the CPU's instruction sets as
    :func:`gluon_attention.core.fused.cpu_features` gives them (None: unknown).

    Raises
    ------
    ValueError
        An unknown choice; bfloat16 with a context that is not a CPU, or on a CPU or MXNet build
        without bfloat16 products (:func:`bfloat16_problem`).
    """
    matmul_dtype = check_matmul_dtype(matmul_dtype)
    if matmul_dtype == 'float32':
        return 'matmul dtype: float32'
    contexts = contexts if isinstance(contexts, (list, tuple)) else [contexts]
    contexts = [c or mx.current_context() for c in contexts]
    off_cpu = [str(c) for c in contexts if c.device_type != 'cpu']
    if off_cpu:
        _checks.fail("matmul_dtype='bfloat16' runs on CPUs only (oneDNN); use 'float32' on "
                     'other devices', contexts=off_cpu)
    problem = bfloat16_problem()
    if problem:
        _checks.fail("matmul_dtype='bfloat16' does not run here ({}); use 'float32'".format(
            problem), matmul_dtype=matmul_dtype)
    native = ('unknown' if cpu_features is None else 'yes' if 'avx512bf16' in cpu_features
              else 'no (emulated by oneDNN: slower)')
    return 'matmul dtype: bfloat16 (AVX512-BF16 on this CPU: {})'.format(native)


def fully_connected(x, weight, bias, num_hidden, matmul_dtype='float32'):
    """``x @ weight.T + bias`` over the last axis of ``x``, its product in ``matmul_dtype``.

    Parameters
    ----------
    x : float32 (..., C)
    weight : float32 (num_hidden, C)
    bias : float32 (num_hidden,) or None
    num_hidden : int
    matmul_dtype : 'float32' or 'bfloat16'
        See the module docstring: bfloat16 operands and result, float32 accumulation.

    Returns
    -------
    out : float32 (..., num_hidden)

    Notes
    -----
    ``weight`` and ``bias`` may accumulate gradients (``grad_req='add'``); in bfloat16 ``x``
    may not be such an array itself (MXNet 1.9.1's ``amp_cast`` overwrites nothing there: its
    gradient stays as it was): inside a network it is the output of another operator.
    """
    F = get_F(x)
    if matmul_dtype == 'float32':
        return F.npx.fully_connected(x, weight, bias, no_bias=bias is None,
                                     num_hidden=num_hidden, flatten=False)
    # weight and bias through MXNet's copy first: amp_cast's backward ignores grad_req='add'
    # (it leaves the gradient untouched), which the training engine sets on every parameter
    operands = [_cast(F, a if a is x else F.np.copy(a), BFLOAT16)
                for a in (x, weight, bias) if a is not None]
    out = F.npx.fully_connected(*operands, no_bias=bias is None, num_hidden=num_hidden,
                                flatten=False)
    return _cast(F, out, 'float32')


class MatmulChoice:
    """The ``matmul_dtype`` of a dense block; a call on arrays off the CPU with 'bfloat16'
    raises ValueError (inside a parent's graph the parent checks its own arrays)."""

    def _choose_matmul(self, matmul_dtype):
        self._matmul_dtype = check_matmul_dtype(matmul_dtype)

    @property
    def matmul_dtype(self):
        """'float32' or 'bfloat16' (changed with :func:`set_matmul_dtype`)."""
        return self._matmul_dtype

    def forward(self, x, *args):  # pylint: disable=arguments-differ
        if self._matmul_dtype != 'float32' and isinstance(x, mx.nd.NDArray) and \
                x.ctx.device_type != 'cpu':
            _checks.fail("{} with matmul_dtype='bfloat16' runs on CPUs only; set it to "
                         "'float32' for arrays on other devices".format(type(self).__name__),
                         **{'x.ctx': x.ctx})
        return super().forward(x, *args)


class Dense(MatmulChoice, nn.Dense):
    """``nn.Dense(units, flatten=False, in_units=...)`` whose product runs in ``matmul_dtype``
    (:func:`fully_connected`); the parameters ``weight`` (units, in_units) and ``bias``
    (units,) are float32 and named as ``nn.Dense``'s.

    Inputs: x float32 (..., in_units). Returns float32 (..., units). Raises ValueError for an
    unknown ``matmul_dtype``, and for 'bfloat16' called on arrays off the CPU.
    """

    def __init__(self, units, in_units=0, matmul_dtype='float32', weight_initializer=None,
                 prefix=None, params=None):
        super().__init__(units, flatten=False, in_units=in_units,
                         weight_initializer=weight_initializer, prefix=prefix, params=params)
        self._choose_matmul(matmul_dtype)

    def _alias(self):
        return 'dense'          # nn.Dense's parameter names

    def hybrid_forward(self, F, x, weight, bias=None):  # pylint: disable=arguments-differ
        return fully_connected(x, weight, bias, self._units, self._matmul_dtype)


def set_matmul_dtype(block, matmul_dtype):
    """Set ``matmul_dtype`` on every dense block under ``block`` (itself included) that has one,
    and on the attention blocks (the fused kernel's forward products; not counted), and clear
    the cached graphs so that the next call rebuilds them; returns how many dense blocks
    changed. Raises ValueError for an unknown choice."""
    matmul_dtype = check_matmul_dtype(matmul_dtype)
    changed, attention = [], []

    def visit(child):
        if isinstance(child, MatmulChoice) and child.matmul_dtype != matmul_dtype:
            child._matmul_dtype = matmul_dtype  # pylint: disable=protected-access
            changed.append(child)
        elif hasattr(child, '_set_attention_matmul_dtype'):    # cells.py's attention blocks
            child._set_attention_matmul_dtype(matmul_dtype)  # pylint: disable=protected-access
            attention.append(child)
    block.apply(visit)
    if changed or attention:
        block.apply(lambda b: b._clear_cached_op()  # pylint: disable=protected-access
                    if isinstance(b, HybridBlock) else None)
    return len(changed)
