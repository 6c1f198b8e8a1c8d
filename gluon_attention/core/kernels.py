"""The kernel choice: which attention implementation, which row-wise operators and which dtype
for the dense products a model runs, as one small frozen value handed to blocks when they are
built (as Flax hands ``attention_fn`` and ``dtype`` to a module).

- ``attention``: ``'composed'`` (MXNet operators: any device, dtype, mask, dropout),
  ``'fused'`` (the C++ kernel of :mod:`gluon_attention.core.fused`: CPU, float32, key padding as
  lengths only, no attention dropout, no weights returned), ``'chunked'`` (the composed operators
  a block of query rows at a time, imperatively only) or ``'auto'``.
- ``rowwise``: residual + LayerNorm and bias + GELU as the fused operators of
  :mod:`gluon_attention.core.fused_rowwise` (``'fused'``: CPU, float32), as MXNet's own
  operators (``'composed'``) or ``'auto'``.
- ``matmul_dtype``: ``'float32'`` or ``'bfloat16'`` products (:mod:`gluon_attention.core.matmul`;
  CPU only, on an MXNet build and CPU that run them); with ``attention='fused'`` also the
  kernel's forward products, on AMX tiles where granted.

:meth:`Kernels.resolve` is the one place where ``'auto'`` becomes a choice and where a choice
this process cannot serve is refused, each message naming the argument the user gave; it runs
once, where a model is built, and the blocks below receive the resolved value.
:func:`check_call` is the one place that refuses a call the resolved kernels cannot serve.
"""
import collections
import warnings

import mxnet as mx
import numpy as onp

from .. import _checks
from .._deprecated import caller_stacklevel

from . import fused_library as _fused
from .matmul import MATMUL_DTYPES, bfloat16_problem

__all__ = ['Kernels', 'ATTENTION', 'ROWWISE', 'check_call', 'from_legacy']

#: The ``attention`` choices ('auto' aside).
ATTENTION = ('composed', 'fused', 'chunked')
#: The ``rowwise`` choices ('auto' aside).
ROWWISE = ('composed', 'fused')


def _contexts(ctx):
    ctx = ctx if ctx is not None else mx.context.current_context()
    return list(ctx) if isinstance(ctx, (list, tuple)) else [ctx]


class Kernels(collections.namedtuple('Kernels', ('attention', 'rowwise', 'matmul_dtype'))):
    """How a model runs: its attention kernel, its row-wise kernels, its product dtype.

    Parameters
    ----------
    attention : {'auto', 'composed', 'fused', 'chunked'}
        The attention implementation (:func:`gluon_attention.attention`'s ``backend``).
        'auto' resolves to 'fused' when the kernel library is loadable, every context is a CPU,
        the attention dropout is 0 and the block does not return attention weights; to
        'composed' otherwise. It never picks 'chunked'.
    rowwise : {'auto', 'composed', 'fused'}
        Residual + LayerNorm and bias + GELU as one fused operator each. 'auto' resolves to
        'fused' when the kernel library is loadable and every context is a CPU.
    matmul_dtype : {'float32', 'bfloat16'}
        The dtype of the encoders' dense products (float32 accumulation and parameters), and,
        with ``attention='fused'``, of the fused kernel's two forward products on AMX tiles
        where this process can run them (:func:`gluon_attention.core.fused.amx_problem` is
        None; the float32 kernel elsewhere, so float32 is the only choice whose results do not
        depend on the CPU). The fused kernel's backward pass stays float32.

    Raises
    ------
    ValueError
        A value outside its choices (the message names the argument).

    Examples
    --------
    >>> Kernels(attention='composed').resolve()    # doctest: +SKIP
    Kernels(attention='composed', rowwise='fused', matmul_dtype='float32')
    """
    __slots__ = ()

    def __new__(cls, attention='auto', rowwise='auto', matmul_dtype='float32'):
        for name, value, choices in (('attention', attention, ('auto',) + ATTENTION),
                                     ('rowwise', rowwise, ('auto',) + ROWWISE),
                                     ('matmul_dtype', matmul_dtype, MATMUL_DTYPES)):
            if not isinstance(value, str):
                _checks.fail_type('{} must be one of {}'.format(
                    name, ', '.join(repr(c) for c in choices)), **{name: value})
            _checks.check_choice(name, value, choices)
        return super().__new__(cls, attention, rowwise, matmul_dtype)

    @property
    def resolved(self):
        """Whether no field is 'auto'."""
        return 'auto' not in (self.attention, self.rowwise)

    def resolve(self, ctx=None, attention_dropout=0.0, weights=False, like=None,
                serves=ATTENTION):
        """This choice with 'auto' resolved for ``ctx``, after refusing what cannot run there.

        Parameters
        ----------
        ctx : mxnet.Context or list of Context, optional
            Where the model runs; the current context by default.
        attention_dropout : float
            The dropout on the attention weights of the blocks built with it.
        weights : bool
            Whether the block returns the attention weights ('auto' then keeps 'composed',
            the backend that holds them).
        like : Kernels, optional
            A resolved choice (e.g. a backbone's) whose fields replace the 'auto' ones.
        serves : tuple of str
            The attention backends the block can run ('auto' picks among them).

        Returns
        -------
        Kernels
            With no 'auto' field.

        Raises
        ------
        ValueError
            ``attention`` not in ``serves``; 'fused' or 'chunked' with ``attention_dropout``
            > 0; 'fused'
            (``attention`` or ``rowwise``) or ``matmul_dtype='bfloat16'`` with a context that
            is not a CPU; 'bfloat16' where MXNet cannot run bfloat16 products.
        RuntimeError
            ``attention`` or ``rowwise`` 'fused' and the kernel library is not built or not
            loadable.
        """
        fusable = _fused.runs_on(ctx)
        attention, rowwise = self.attention, self.rowwise
        if like is not None:
            attention = like.attention if attention == 'auto' else attention
            rowwise = like.rowwise if rowwise == 'auto' else rowwise
        if attention == 'auto':
            attention = 'fused' if fusable and not attention_dropout and not weights \
                and 'fused' in serves else 'composed'
        if rowwise == 'auto':
            rowwise = 'fused' if fusable else 'composed'
        resolved = Kernels(attention, rowwise, self.matmul_dtype)
        resolved._refuse(ctx, attention_dropout, serves)
        return resolved

    def _refuse(self, ctx, attention_dropout, serves):
        """The construction-time refusals of :meth:`resolve` (see there)."""
        if self.attention not in serves:
            _checks.fail('this block runs attention {}'.format(' or '.join(
                repr(s) for s in serves)), attention=self.attention)
        if self.attention != 'composed' and attention_dropout:
            _checks.fail("attention='{}' has no attention dropout: use attention='composed' "
                         'or attention_dropout=0'.format(self.attention),
                         attention=self.attention, attention_dropout=attention_dropout)
        off_cpu = [str(c) for c in _contexts(ctx) if c.device_type != 'cpu']
        for name in ('attention', 'rowwise'):
            if getattr(self, name) != 'fused':
                continue
            if off_cpu:
                _checks.fail("{}='fused' runs on CPUs only: use {}='composed' (or 'auto') on "
                             'other devices'.format(name, name), **{name: 'fused',
                                                                    'ctx': off_cpu})
            if not _fused.available():
                raise RuntimeError("{}='fused': {}. Received: {}='fused'".format(
                    name, _fused.load_error(), name))
        if self.matmul_dtype == 'bfloat16':
            if off_cpu:
                _checks.fail("matmul_dtype='bfloat16' runs on CPUs only (oneDNN): use "
                             "'float32' on other devices", matmul_dtype='bfloat16',
                             ctx=off_cpu)
            problem = bfloat16_problem()
            if problem:
                _checks.fail("matmul_dtype='bfloat16' does not run here ({}): use "
                             "'float32'".format(problem), matmul_dtype='bfloat16')


def check_call(block, kernels, data, mask=None, weight=None):
    """Refuse a call on arrays that the resolved ``kernels`` of ``block`` (a name) cannot serve:
    arrays off the CPU with a fused kernel or bfloat16 products, a ``mask`` with the fused
    attention, parameters (``weight``, one of the block's) cast from float32 with either."""
    fused = [name for name in ('attention', 'rowwise') if getattr(kernels, name) == 'fused']
    special = fused + (['matmul_dtype'] if kernels.matmul_dtype != 'float32' else [])
    if not special:
        return
    built = '{} built with {}'.format(block, ', '.join(
        "{}='{}'".format(name, getattr(kernels, name)) for name in special))
    if weight is not None and onp.dtype(weight.dtype) != onp.float32:
        _checks.fail_type(built + ' keeps float32 parameters',
                          **{'parameters dtype': onp.dtype(weight.dtype).name})
    _fused.refuse_off_cpu(built, "build it with Kernels({}) for arrays on other devices".format(
        ', '.join("{}='{}'".format(name, 'float32' if name == 'matmul_dtype' else 'composed')
                  for name in special)), data=data)
    if kernels.attention == 'fused' and mask is not None:
        _checks.fail(built + " takes key padding as valid_length only, no mask: build it with "
                     "Kernels(attention='composed') for a mask",
                     mask='array of shape {}'.format(mask.shape))


def _legacy_choice(name, value, fused_name='fused'):
    """An old boolean-or-'auto' keyword -> a Kernels field value ('auto', 'fused', 'composed');
    the errors name the old keyword."""
    if isinstance(value, str) and value == 'auto':
        return 'auto'
    return fused_name if _checks.check_bool(name, value) else 'composed'


_LEGACY = {'backend': 'kernels=Kernels(attention=...)',
           'fused_attention': 'kernels=Kernels(attention=...)',
           'fused_rowwise': 'kernels=Kernels(rowwise=...)',
           'fused': 'kernels=Kernels(rowwise=...)',
           'matmul_dtype': 'kernels=Kernels(matmul_dtype=...)'}


def from_legacy(owner, kernels=None, **legacy):
    """``kernels`` (None: ``Kernels()``) with the deprecated keywords of ``owner`` (a name)
    that were given (not None) applied over it, each with a DeprecationWarning naming its
    replacement: ``backend`` (a name or 'auto'), ``fused_attention`` and ``fused_rowwise``
    / ``fused`` (bool or 'auto'), ``matmul_dtype``. Bad values raise as the old keywords did,
    naming them; ``kernels`` of another type is a TypeError."""
    if kernels is None:
        kernels = Kernels()
    elif not isinstance(kernels, Kernels):
        _checks.fail_type('kernels must be a gluon_attention.Kernels',
                          kernels=type(kernels).__name__)
    fields = kernels._asdict()
    for name, value in legacy.items():
        if value is None:
            continue
        warnings.warn('{}({}=...) is deprecated and will be removed in the next release: use '
                      '{}'.format(owner, name, _LEGACY[name]), DeprecationWarning,
                      stacklevel=caller_stacklevel())
        if name == 'backend':
            fields['attention'] = _checks.check_choice('backend', value, ('auto',) + ATTENTION)
        elif name == 'fused_attention':
            fields['attention'] = _legacy_choice(name, value)
        elif name in ('fused_rowwise', 'fused'):
            fields['rowwise'] = _legacy_choice(name, value)
        else:
            fields['matmul_dtype'] = _checks.check_choice(name, value, MATMUL_DTYPES)
    return Kernels(**fields)
