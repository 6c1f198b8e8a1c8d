"""Attention blocks: thin HybridBlocks over the functional core.

Every block owns only its parameters and configuration; the steps score -> mask -> normalise ->
dropout -> read are written once (:func:`context_and_weights` and :func:`multi_head_dot_attn`).
Blocks are called positionally (MXNet 1.9.1 ``Block.__call__`` takes no keyword arguments), and a
hybridized block fixes its pattern of ``None`` inputs at its first call. Each block checks the
arrays of a call in ``check_inputs`` before any graph runs (:class:`~.base.CheckedBlock`).

Calls on arrays (hybridized too) raise ValueError before any graph runs for mismatched shapes,
B = 0 or L_m = 0 (MXNet graphs cannot reshape them), lengths outside [0, L_m] or masks that are
not 0/1, and TypeError for non-float inputs; L_q = 0 gives empty outputs.

``valid_length`` holds lengths, never a mask: a bool one is a TypeError, and a (B, L_q) one that
looks like a 0/1 padding mask (every value 0 or 1, L_m > 1, some row with more than one 1) a
ValueError; a padding mask (B, L_m), e.g. a Hugging Face ``attention_mask``, converts to lengths
with ``mask.sum(axis=-1)``.

Glossary: B batch, K heads, L_q query length, L_m memory length, C_q/C_k/C_v feature sizes.
float16 inputs on a CPU are computed in float32 and returned as float16.
"""
import mxnet as mx
from mxnet.gluon import nn

from .. import _checks

from . import backends as _backends, fused as _fused, layout as _layout
from ._ops import get_F, to_float32
from .base import Float32OnCPU, check_dense_inputs
from .functional import zero_unattended
from .kernels import Kernels, from_legacy
from .masking import length_mask
from .softmax import masked_softmax

__all__ = ['AdditiveAttention', 'DotProductAttention', 'MultiHeadAttentionCell',
           'MultiHeadAttention', 'context_and_weights']


def context_and_weights(scores, value, mask, dropout):
    """The shared read step: masked softmax over L_m, dropout, weighted sum of ``value``.

    scores (B, L_q, L_m), value (B, L_m, C_v), mask broadcastable to the scores or None.
    Returns ``(context (B, L_q, C_v), weights (B, L_q, L_m))``; weights are after dropout.
    """
    F = get_F(scores)
    weights = masked_softmax(scores, mask, axis=-1)
    if dropout:
        weights = F.npx.dropout(weights, p=dropout)
    return F.npx.batch_dot(weights, zero_unattended(value, mask)), weights


def _one_head(*tensors):
    """(B, L, C) -> (B, L, 1, C): one head in the NTK layout of the backends."""
    return [get_F(x).np.expand_dims(x, 2) for x in tensors]


class _BackendChoice:
    """An attention block whose backend (``kernels.attention``) is fixed when it is built, and
    whose weights are ``None`` with a backend that never holds them (a graph cannot output
    None); a 'chunked' block runs imperatively even when hybridized (it slices L_q)."""

    def _choose_backend(self, kernels, dropout, backend=None):
        # a deprecated backend='auto' keeps its meaning: the fused kernel where it runs
        kernels = from_legacy(type(self).__name__, kernels, backend=backend)
        # not self._backend: HybridBlock.hybridize(backend=...) owns that name
        resolved = kernels.resolve(attention_dropout=dropout, weights=backend is None)
        self._attention_backend = resolved.attention
        self._set_attention_matmul_dtype(resolved.matmul_dtype)

    def _set_attention_matmul_dtype(self, matmul_dtype):
        """The dtype of the fused kernel's forward products ('bfloat16': on AMX tiles where
        granted); :func:`gluon_attention.core.matmul.set_matmul_dtype` changes it with the
        dense products'."""
        self._attend = _backends._get_backend(  # pylint: disable=protected-access
            self._attention_backend, matmul_dtype)

    @property
    def backend(self):
        """The backend the block runs: 'composed', 'fused' or 'chunked' ('auto' resolved)."""
        return self._attention_backend

    def forward(self, query, *args):  # pylint: disable=arguments-differ
        out = super().forward(query, *args)
        if self._attention_backend == 'composed':
            return out
        return out, None

    def _run(self, *inputs):
        if self._attention_backend == 'chunked' and isinstance(inputs[0], mx.nd.NDArray):
            return self._run_imperatively(*inputs)      # it slices L_q: never a cached graph
        return super()._run(*inputs)

    def _check_backend_call(self, query, key, value, mask=None, edge_scores=None,
                            valid_length=None):
        """The backend's refusals of one call on per-head arrays in ``self._options``'s
        layout (a ``mask`` or ``edge_scores`` the backend cannot take, arrays off the CPU or
        not float32 for 'fused'), then the shape checks of per-head inputs."""
        options = self._options
        _backends.check_backend_call(self._attention_backend, query, mask, edge_scores,
                                     options['dropout'])
        checks = dict(valid_length=valid_length, scaled=options['scaled'],
                      query_head_units=options.get('query_head_units'),
                      layout=options['layout'])
        if self._attention_backend == 'fused':
            _fused.check_fused_inputs(*(to_float32(x) for x in (query, key, value)), **checks)
        else:
            _layout.check_per_head_inputs(query, key, value, mask=mask, edge_scores=edge_scores,
                                          **checks)


def _check_qkv(query, key, value, valid_length, scores_need_same_size=True, num_heads=1):
    """(B, L_q, C_q), (B, L_m, C_k), (B, L_m, C_v) arrays and (B,) or (B, L_q) lengths; the
    (B, K, L_q, L_m) scores of ``num_heads`` heads must be addressable by 32-bit indices."""
    for name, x in (('query', query), ('key', key), ('value', value)):
        _checks.check_rank(name, x, (3,))
    _checks.check_same_float_dtype(query=query, key=key, value=value)
    _checks.check_same_dim('query, key and value batch sizes', query=(query, 0), key=(key, 0),
                           value=(value, 0))
    _checks.check_same_dim('key and value lengths', key=(key, 1), value=(value, 1))
    if query.shape[2] != key.shape[2] and scores_need_same_size:
        _checks.fail('query and key must have the same feature size C',
                     **{'query.shape': query.shape, 'key.shape': key.shape})
    _checks.check_not_empty('the batch size B and the memory length L_m',
                            (query.shape[0], key.shape[1]),
                            **{'query.shape': query.shape, 'key.shape': key.shape})
    _checks.check_index_range(query.shape[0] * num_heads * query.shape[1] * key.shape[1])
    _checks.check_memory_lengths(valid_length, query.shape[0], query.shape[1], key.shape[1])


@mx.util.use_np
class DotProductAttention(_BackendChoice, Float32OnCPU):
    """Scaled dot-product attention (Luong et al. 2015; Vaswani et al. 2017), parameter-free.

    Parameters
    ----------
    dropout : float in [0, 1)
        Dropout on the attention weights (training mode only; 'composed' only).
    scaled : bool
        Divide the scores by sqrt(C), C the query's last dimension.
    kernels : Kernels
        Its ``attention`` field is the backend (:func:`gluon_attention.attention`), fixed
        here; 'auto' keeps 'composed', the backend that returns the weights. Default
        ``Kernels()``.

    Call ``(query (B, L_q, C), key (B, L_m, C), value (B, L_m, C_v), valid_length=None)`` where
    ``valid_length`` is integer (B,) or (B, L_q): keys at positions >= it are masked.
    Returns ``(context (B, L_q, C_v), weights (B, L_q, L_m))``, in the inputs' dtype; weights
    ``None`` with the 'fused' and 'chunked' backends. Raises as described in the module
    docstring, and as :class:`MultiHeadAttentionCell` for what its backend cannot serve.

    Equivalent computation::

        scores = query @ key.T / sqrt(C)
        weights = masked_softmax(scores, arange(L_m) < valid_length)
        context = dropout(weights) @ value
    """

    def __init__(self, dropout=0.0, scaled=True, kernels=Kernels(), **kwargs):
        super().__init__(**kwargs)
        self._choose_backend(kernels, _checks.check_probability('dropout', dropout))
        self._options = dict(dropout=dropout, scaled=_checks.check_bool('scaled', scaled),
                             layout='NTK')

    def check_inputs(self, query, key, value, valid_length=None):  # pylint: disable=arguments-differ
        _check_qkv(query, key, value, valid_length)
        if self._attention_backend == 'fused':           # its dtype and device
            self._check_backend_call(*_one_head(query, key, value), valid_length=valid_length)

    def hybrid_forward(self, F, query, key, value, valid_length=None):  # pylint: disable=arguments-differ
        context, weights = self._attend(*_one_head(query, key, value), None, None, valid_length,
                                        **self._options)              # (B, L_q, C_v)
        if weights is None:
            return context
        return context, F.np.squeeze(weights, 1)                     # (B, L_q, L_m)


@mx.util.use_np
class AdditiveAttention(Float32OnCPU):
    """Additive (MLP) attention of Bahdanau et al. (2015): ``v . tanh(W_q q + W_k k)``.

    Parameters
    ----------
    units : int
        Hidden size of the score MLP.
    dropout : float in [0, 1)
    kernels : Kernels
        Its ``attention`` field: 'composed' or 'auto' (the MLP score has no fused or chunked
        backend; others raise ValueError). Default ``Kernels()``.

    Children ``query_proj`` (Dense(units), no bias), ``key_proj`` (Dense(units), no bias),
    ``score_proj`` (Dense(1), no bias); input sizes are inferred at the first call.

    Call ``(query (B, L_q, C_q), key (B, L_m, C_k), value (B, L_m, C_v), valid_length=None)``.
    Returns ``(context (B, L_q, C_v), weights (B, L_q, L_m))``. Memory: O(B*L_q*L_m*units).
    Raises as described in the module docstring; also when C_q or C_k changes after the first
    call, or an input's dtype is not the parameters'.
    """

    def __init__(self, units, dropout=0.0, kernels=Kernels(), **kwargs):
        super().__init__(**kwargs)
        self._units = _checks.check_positive_int('units', units)
        self._dropout = _checks.check_probability('dropout', dropout)
        from_legacy(type(self).__name__, kernels).resolve(
            attention_dropout=self._dropout, weights=True, serves=('composed',))
        with self.name_scope():
            self.query_proj = nn.Dense(units, use_bias=False, flatten=False, prefix='query_')
            self.key_proj = nn.Dense(units, use_bias=False, flatten=False, prefix='key_')
            self.score_proj = nn.Dense(1, use_bias=False, flatten=False, prefix='score_')

    def check_inputs(self, query, key, value, valid_length=None):  # pylint: disable=arguments-differ
        _check_qkv(query, key, value, valid_length, scores_need_same_size=False)
        check_dense_inputs(('query', query, self.query_proj), ('key', key, self.key_proj))

    def hybrid_forward(self, F, query, key, value, valid_length=None):  # pylint: disable=arguments-differ
        features = F.np.tanh(F.np.expand_dims(self.query_proj(query), 2)      # (B, L_q, 1, H)
                             + F.np.expand_dims(self.key_proj(key), 1))       # (B, 1, L_m, H)
        scores = F.np.squeeze(self.score_proj(features), -1)                  # (B, L_q, L_m)
        mask = None if valid_length is None else length_mask(key, valid_length)
        return context_and_weights(scores, value, mask, self._dropout)


@mx.util.use_np
class MultiHeadAttentionCell(_BackendChoice, Float32OnCPU):
    """Parameter-free multi-head dot-product attention over per-head inputs, by one of the
    attention backends (:mod:`gluon_attention.core.backends`), chosen when the cell is built.

    Parameters
    ----------
    query_units : int or None
        Total query size K*C_k; with ``num_heads`` it fixes the scale sqrt(C_k). Without it the
        scale comes from each call's query (its last dimension; inside a graph, from its shape).
    num_heads : int or None
        Required with ``query_units``, which it must divide.
    attention_dropout : float in [0, 1)
        Dropout on the weights, training mode only ('composed' only).
    scaled, normalized, eps, layout, use_einsum
        As in :func:`gluon_attention.multi_head_dot_attn` (``use_einsum``: 'composed' only).
    kernels : Kernels
        Its ``attention`` field is the implementation, fixed for the cell's life:
        ``'composed'`` (MXNet operators; any device, dtype, mask, edge scores, dropout),
        ``'fused'`` (the C++ kernel of :mod:`gluon_attention.fused`: CPU, float32,
        ``valid_length`` only, no L_q x L_m memory), ``'chunked'`` (the composed operators
        ``chunk_size`` query rows at a time; runs imperatively even when hybridized, so not
        inside another block's graph), or ``'auto'``, resolved here, once, by
        :meth:`gluon_attention.Kernels.resolve` (a cell returns weights, so 'auto' is
        'composed'; an encoder hands its cells its resolved choice). :attr:`backend` tells.
        With 'fused', ``matmul_dtype='bfloat16'`` runs the kernel's forward products in
        bfloat16 on AMX tiles where this process can
        (:func:`gluon_attention.core.fused.amx_problem` is None; float32 elsewhere); its
        backward pass stays float32.
        Default ``Kernels()``.
    chunk_size : int
        Query rows per chunk of the ``'chunked'`` backend.
    backend : {'composed', 'fused', 'chunked', 'auto'}, optional
        Deprecated (DeprecationWarning): ``kernels=Kernels(attention=...)``; 'auto' keeps its
        old meaning ('fused' where the kernel runs and ``attention_dropout`` is 0).

    Call ``(query, key, value, mask=None, edge_scores=None, valid_length=None)`` with per-head
    tensors in ``layout``: query (B, K, L_q, C_k) ``NKT`` | (B, L_q, K, C_k) ``NTK`` |
    (L_q, B, K, C_k) ``TNK``, key and value alike with L_m and C_v; ``mask`` 0/1 (B, L_q, L_m)
    (dimensions may be 1); ``edge_scores`` broadcastable to (B, K, L_q, L_m); ``valid_length``
    integer (B,) or (B, L_q) memory lengths (the length-aware softmax: no mask tensor), never a
    0/1 mask (see the module docstring).

    Returns ``(context, weights)`` with every backend: context (B, L_q, K*C_v) (NKT/NTK) or
    (L_q, B, K*C_v) (TNK) in the inputs' dtype; ``weights`` the (B, K, L_q, L_m) attention
    weights after dropout with ``'composed'``, ``None`` with ``'fused'`` and ``'chunked'``
    (never held whole).

    Raises
    ------
    ValueError
        At construction: a bad option, an unknown backend, ``attention_dropout`` > 0 with
        ``'fused'`` or ``'chunked'``. On a call the backend cannot serve (never a silent switch
        to another backend): a ``mask`` or ``edge_scores`` with ``'fused'`` (use 'composed'),
        ``edge_scores`` with ``'chunked'``, arrays off the CPU with ``'fused'``, a ``'chunked'``
        cell inside a graph; and as :func:`multi_head_dot_attn` on the arrays of each call.
    TypeError
        Non-float inputs; with ``'fused'``, inputs that are not float32 (float16 on a CPU is
        computed in float32).
    RuntimeError
        ``'fused'`` and the kernel library is not built.
    """

    def __init__(self, query_units=None, num_heads=None, attention_dropout=0.0, scaled=True,
                 normalized=False, eps=1e-6, layout='NTK', use_einsum=False, kernels=Kernels(),
                 chunk_size=512, backend=None, **kwargs):
        super().__init__(**kwargs)
        self._layout = _layout.check_layout(layout)
        query_head_units = None
        if query_units is not None:
            _checks.check_positive_int('query_units', query_units)
            if num_heads is None:
                _checks.fail('num_heads must be given with query_units',
                             query_units=query_units, num_heads=num_heads)
            _checks.check_positive_int('num_heads', num_heads)
            if query_units % num_heads:
                _checks.fail('query_units must be divisible by num_heads',
                             query_units=query_units, num_heads=num_heads)
            query_head_units = query_units // num_heads
        dropout = _checks.check_probability('attention_dropout', attention_dropout)
        self._choose_backend(kernels, dropout, backend)
        self._options = dict(dropout=dropout, scaled=_checks.check_bool('scaled', scaled),
                             normalized=_checks.check_bool('normalized', normalized), eps=eps,
                             query_head_units=query_head_units, layout=layout,
                             use_einsum=_checks.check_bool('use_einsum', use_einsum),
                             chunk_size=_checks.check_positive_int('chunk_size', chunk_size))

    @property
    def layout(self):
        """The attention layout, one of 'NKT', 'NTK', 'TNK'."""
        return self._layout

    def check_inputs(self, query, key, value, mask=None, edge_scores=None,  # pylint: disable=arguments-differ
                     valid_length=None):
        self._check_backend_call(query, key, value, mask, edge_scores, valid_length)

    def hybrid_forward(self, F, query, key, value, mask=None, edge_scores=None,  # pylint: disable=arguments-differ
                       valid_length=None):
        context, weights = self._attend(query, key, value, mask, edge_scores, valid_length,
                                        **self._options)
        return context if weights is None else (context, weights)


@mx.util.use_np
class MultiHeadAttention(_BackendChoice, Float32OnCPU):
    """Multi-head attention with query/key/value/output projections (Vaswani et al. 2017).

    Parameters
    ----------
    units : int
        D, the projected size; split into ``num_heads`` heads of D/K each.
    num_heads : int
        K; must divide ``units``.
    dropout : float in [0, 1)
        Dropout on the attention weights.
    use_bias : bool
        Bias in the four projections.
    kernels : Kernels
        Its ``attention`` field is the backend of the attention cell, as in
        :class:`MultiHeadAttentionCell` ('auto' keeps 'composed'). Default ``Kernels()``.

    Call ``(query (B, L_q, C_q), key (B, L_m, C_k), value (B, L_m, C_v), valid_length=None)``,
    ``valid_length`` integer (B,) or (B, L_q) masking memory positions. Returns
    ``(output (B, L_q, units), weights (B, K, L_q, L_m))``, weights ``None`` with the 'fused'
    and 'chunked' backends. Raises as described in the
    module docstring; also when a feature size changes after the first call, or an input's dtype
    is not the parameters'.
    """

    def __init__(self, units, num_heads, dropout=0.0, use_bias=False, kernels=Kernels(),
                 **kwargs):
        super().__init__(**kwargs)
        _checks.check_positive_int('units', units)
        _checks.check_positive_int('num_heads', num_heads)
        if units % num_heads:
            _checks.fail('units must be divisible by num_heads', units=units,
                         num_heads=num_heads)
        self._choose_backend(kernels, _checks.check_probability('dropout', dropout))
        self._num_heads, self._head_units = num_heads, units // num_heads
        with self.name_scope():
            self.query_proj = nn.Dense(units, use_bias=use_bias, flatten=False, prefix='query_')
            self.key_proj = nn.Dense(units, use_bias=use_bias, flatten=False, prefix='key_')
            self.value_proj = nn.Dense(units, use_bias=use_bias, flatten=False, prefix='value_')
            self.out_proj = nn.Dense(units, use_bias=use_bias, flatten=False, prefix='out_')
            self.attention = MultiHeadAttentionCell(units, num_heads, dropout, layout='NTK',
                                                    kernels=Kernels(self._attention_backend))

    def check_inputs(self, query, key, value, valid_length=None):  # pylint: disable=arguments-differ
        _check_qkv(query, key, value, valid_length, scores_need_same_size=False,
                   num_heads=self._num_heads)
        check_dense_inputs(('query', query, self.query_proj), ('key', key, self.key_proj),
                           ('value', value, self.value_proj))
        if self._attention_backend == 'fused':
            _fused.refuse_off_cpu("the fused kernel (backend 'fused')", "build it with "
                                  "Kernels(attention='composed') for arrays on other devices",
                                  query=query)

    def hybrid_forward(self, F, query, key, value, valid_length=None):  # pylint: disable=arguments-differ
        heads = (-2, -2, self._num_heads, self._head_units)                   # (B, L, K, D/K)
        query = F.npx.reshape(self.query_proj(query), heads)
        key_heads = F.npx.reshape(self.key_proj(key), heads)
        value = F.npx.reshape(self.value_proj(value), heads)
        context, weights = self.attention(query, key_heads, value, None, None,
                                          valid_length)                        # (B, L_q, D)
        if weights is None:
            return self.out_proj(context)
        return self.out_proj(context), weights
