"""Drop-in attention cells for GluonNLP 0.10 model code (``gluonnlp.model.attention_cell``).

:class:`DotProductAttentionCell`, :class:`MLPAttentionCell` and :class:`MultiHeadAttentionCell`
take 0.10's constructor arguments, its call ``cell(query, key, value=None, mask=None) ->
(context, att_weights)`` on legacy ``mx.nd`` arrays (and symbols inside a hybridized legacy
model), and name their parameters as 0.10 does, so a 0.10 block's saved parameters load into a
block built from these cells (``load_parameters``). They are written in legacy operators (the numpy-mode
functions of :mod:`gluon_attention.core` need numpy shape semantics, which legacy blocks with
deferred shapes cannot run under), with the same masking rule as the core: masked scores
filled with a large negative value (-1e18; -1e4 for a float16 cell), softmax, then the weights
multiplied by the mask.

Shapes (0.10's): query (B, L_q, C_q), key (B, L_m, C_k), value (B, L_m, C_v) (None: the key),
mask (B, L_q, L_m) of 0/1 (1 = attend) or None; context (B, L_q, C_v) (multi-head: C_v = the
value units), att_weights (B, L_q, L_m) (multi-head: (B, K, L_q, L_m)).

Dtypes: every array of a call (the mask too) has the cell's dtype, float32 unless the cell was
cast (``cell.cast('float64')``, or ``'float16'``). float16 runs on a GPU only: MXNet 1.9's CPU
``batch_dot`` has no float16, so a float16 call on CPU arrays is refused up front with a
TypeError (cast the arrays and the cell to float32 there), as is a call whose arrays' dtype
differs from the cell's (MXNet would fail inside the graph).

Outputs equal 0.10's wherever 0.10's are finite. A fully masked row (a query that may attend
nothing) gets all-zero weights and a zero context here; 0.10 fills masked scores with -1e18 and
multiplies the softmax by the mask, which also gives zero for such a row in float32, so the two
agree; where 0.10 overflows (scores beyond the float range) it returns NaN and these cells
return finite values.

numpy-mode arrays (``mx.np``) and calls under ``npx.set_np()`` are refused with a TypeError:
these cells serve legacy models; numpy-mode code uses :class:`gluon_attention.MultiHeadAttentionCell`
and :class:`gluon_attention.DotProductAttention`.
"""
import math

import mxnet as mx
from mxnet.gluon import HybridBlock, nn

import numpy as onp

from .. import _checks

__all__ = ['DotProductAttentionCell', 'MLPAttentionCell', 'MultiHeadAttentionCell']


def _check_legacy_call(cell, arrays):
    """These cells run in legacy mode on legacy arrays of the cell's dtype (module docstring)."""
    block = type(cell).__name__
    if mx.util.is_np_array():
        _checks.fail_type('{} (GluonNLP 0.10 compatible) runs outside numpy mode; call it '
                          'outside npx.set_np() (or in an mx.util.np_array(False) scope), or '
                          'use gluon_attention.MultiHeadAttentionCell in numpy code'.format(block),
                          **{'mx.util.is_np_array()': True})
    for name, x in arrays.items():
        if isinstance(x, mx.np.ndarray):
            _checks.fail_type('{} takes legacy mx.nd arrays, as GluonNLP 0.10 does; convert with '
                              '.as_nd_ndarray()'.format(block), **{name: 'mxnet.numpy.ndarray'})
    dtype = onp.dtype(cell._dtype)   # pylint: disable=protected-access
    for name, x in arrays.items():
        if not isinstance(x, mx.nd.NDArray):
            continue                 # None, or a symbol inside a hybridized model
        if onp.dtype(x.dtype) != dtype:
            _checks.fail_type('{} is {}: query, key, value and mask must all be {} (or cast the '
                              'cell with cell.cast(dtype))'.format(block, dtype.name, dtype.name),
                              **{name + '.dtype': onp.dtype(x.dtype).name})
        if dtype == onp.float16 and x.context.device_type == 'cpu':
            _checks.fail_type('{} runs float16 on a GPU only (MXNet 1.9 has no float16 batch_dot '
                              'on CPU): use float32 arrays and cell on CPU'.format(block),
                              **{name + '.context': str(x.context)})


def _masked_weights(F, scores, mask, dropout, dtype):
    """Scores (N, L_q, L_m) and a 0/1 mask of their shape and dtype (or None) -> weights after
    dropout. Masked scores are replaced (a same-shape ``where`` with an array branch: a correct
    gradient), so a fully masked row is uniform before, and zero after, the product with the
    mask."""
    if mask is not None:
        fill = -1e4 if onp.dtype(dtype) == onp.float16 else -1e18
        scores = F.where(mask, scores, F.ones_like(scores) * fill)
    weights = F.softmax(scores, axis=-1)
    if mask is not None:
        weights = weights * mask
    return F.Dropout(weights, p=dropout) if dropout else weights


def _l2_normalize(F, x):
    return F.broadcast_div(x, F.norm(x, axis=-1, keepdims=True) + 1e-6)


def _dense(units, use_bias, weight_initializer, bias_initializer, prefix):
    return nn.Dense(units, use_bias=use_bias, flatten=False, prefix=prefix,
                    weight_initializer=weight_initializer, bias_initializer=bias_initializer)


class _Cell(HybridBlock):
    """0.10's call ``(query, key, value=None, mask=None) -> (context, att_weights)``;
    subclasses give ``_scores`` (B, L_q, L_m) and ``_dropout``."""

    _dtype = onp.float32

    def cast(self, dtype):
        self._dtype = dtype
        super().cast(dtype)

    def __call__(self, query, key, value=None, mask=None):  # pylint: disable=arguments-differ
        _check_legacy_call(self, dict(query=query, key=key, value=value, mask=mask))
        return super().__call__(query, key, value, mask)

    def _scores(self, F, query, key):
        """The (N, L_q, L_m) scores: each cell of this module defines its own; the base cell
        has none to give."""
        raise TypeError('{} computes no attention scores of its own: use '
                        'DotProductAttentionCell, MultiHeadAttentionCell or MLPAttentionCell'
                        .format(type(self).__name__))

    def _compute_weight(self, F, query, key, mask=None):
        """Weights (N, L_q, L_m) after the mask and dropout."""
        return _masked_weights(F, self._scores(F, query, key), mask, self._dropout, self._dtype)

    def hybrid_forward(self, F, query, key, value=None, mask=None):  # pylint: disable=arguments-differ
        value = key if value is None else value
        weights = self._compute_weight(F, query, key, mask)
        return F.batch_dot(weights, value), weights       # (B, L_q, C_v), (B, L_q, L_m)


class DotProductAttentionCell(_Cell):
    """Dot-product attention (Luong et al., 2015; scaled: Vaswani et al., 2017), GluonNLP 0.10's
    arguments and parameter names.

    ``score = <W_q q + b_q, W_k k + b_k> / sqrt(units)`` with the projections when ``units`` is
    given (Luong style: the query projected only), L2-normalised first when ``normalized``.

    Parameters
    ----------
    units : int, optional
        Projection size of query and key (parameters ``_proj_query.*``, ``_proj_key.*``).
    luong_style : bool
        Project the query only (needs ``units`` equal to C_k).
    scaled : bool
        Divide the scores by sqrt of the (projected) query size.
    normalized : bool
        Cosine scores: query and key L2-normalised (eps 1e-6 added to the norm).
    use_bias : bool
        Biases in the projections.
    dropout : float
        Dropout on the weights (training only).
    weight_initializer, bias_initializer, prefix, params
        As 0.10's.

    Raises
    ------
    ValueError
        ``luong_style`` without ``units``.
    TypeError
        Called on numpy-mode arrays or in numpy mode, on arrays of another dtype than the
        cell's, or in float16 on CPU (module docstring).
    """

    def __init__(self, units=None, luong_style=False, scaled=True, normalized=False,
                 use_bias=True, dropout=0.0, weight_initializer=None, bias_initializer='zeros',
                 prefix=None, params=None):
        super().__init__(prefix=prefix, params=params)
        if luong_style and units is None:
            _checks.fail('luong_style=True needs units (the projected query size)', units=None)
        self._units, self._luong_style = units, luong_style
        self._scaled, self._normalized, self._dropout = scaled, normalized, dropout
        if units is not None:
            with self.name_scope():
                self._proj_query = _dense(units, use_bias, weight_initializer,
                                          bias_initializer, 'query_')
                if not luong_style:
                    self._proj_key = _dense(units, use_bias, weight_initializer,
                                            bias_initializer, 'key_')

    def _scores(self, F, query, key):
        if self._units is not None:
            query = self._proj_query(query)
            key = key if self._luong_style else self._proj_key(key)
        if self._normalized:
            query, key = _l2_normalize(F, query), _l2_normalize(F, key)
        if self._scaled:
            query = F.contrib.div_sqrt_dim(query)
        return F.batch_dot(query, key, transpose_b=True)


class _NormalizedScore(HybridBlock):
    """The weight-normalised score vector: ``x . (g v / ||v||)``; parameters ``g`` (1,) and
    ``v`` (1, units)."""

    def __init__(self, units, weight_initializer=None, prefix=None, params=None):
        super().__init__(prefix=prefix, params=params)
        self.g = self.params.get('g', shape=(1,), init=mx.init.Constant(1.0 / math.sqrt(units)))
        self.v = self.params.get('v', shape=(1, units), init=weight_initializer)

    def hybrid_forward(self, F, x, g, v):  # pylint: disable=arguments-differ
        weight = F.broadcast_mul(g, F.broadcast_div(v, F.norm(v, axis=-1, keepdims=True)))
        return F.FullyConnected(x, weight, no_bias=True, num_hidden=1, flatten=False)


class MLPAttentionCell(_Cell):
    """Additive (MLP) attention (Bahdanau et al., 2015), GluonNLP 0.10's arguments and names.

    ``score = w . act(W_q q + b_q + W_k k)`` (``_query_mid_layer``, ``_key_mid_layer``,
    ``_attention_score``); ``normalized``: ``w = g v / ||v||`` (Salimans and Kingma, 2016;
    parameters ``_attention_score.g``, ``_attention_score.v``).

    Parameters
    ----------
    units : int
        Hidden size of the MLP.
    act : Block
        Its activation (default tanh).
    normalized : bool
        Weight-normalised score vector (above).
    dropout : float
        Rate of the dropout applied to the attention weights while training.
    weight_initializer, bias_initializer, prefix, params
        Initializers of the three layers; block prefix and shared parameters.

    Raises
    ------
    TypeError
        Called on numpy-mode arrays or in numpy mode, on arrays of another dtype than the
        cell's, or in float16 on CPU (module docstring).
    """

    def __init__(self, units, act=None, normalized=False, dropout=0.0, weight_initializer=None,
                 bias_initializer='zeros', prefix=None, params=None):
        super().__init__(prefix=prefix, params=params)
        units = _checks.check_positive_int('units', units)
        self._dropout = dropout
        with self.name_scope():
            self._act = act if act is not None else nn.Activation('tanh')
            self._query_mid_layer = _dense(units, True, weight_initializer, bias_initializer,
                                           'query_')
            self._key_mid_layer = _dense(units, False, weight_initializer, None, 'key_')
            self._attention_score = (
                _NormalizedScore(units, weight_initializer, prefix='score_') if normalized else
                nn.Dense(1, in_units=units, use_bias=False, flatten=False, prefix='score_',
                         weight_initializer=weight_initializer))

    def _scores(self, F, query, key):
        hidden = F.broadcast_add(F.expand_dims(self._query_mid_layer(query), axis=2),
                                 F.expand_dims(self._key_mid_layer(key), axis=1))  # B, Lq, Lm, U
        return F.reshape(self._attention_score(self._act(hidden)), shape=(0, 0, 0))


class MultiHeadAttentionCell(_Cell):
    """Multi-head attention (Vaswani et al., 2017) over a base cell, GluonNLP 0.10's arguments
    and names (``proj_query``, ``proj_key``, ``proj_value``, ``_base_cell``).

    Parameters
    ----------
    base_cell : DotProductAttentionCell or MLPAttentionCell
        The cell of every head (of this module).
    query_units, key_units, value_units : int
        Projection sizes; each divisible by ``num_heads``.
    num_heads : int
        K.
    use_bias, weight_initializer, bias_initializer, prefix, params
        As 0.10's.

    Returns ``(context (B, L_q, value_units), att_weights (B, K, L_q, L_m))``.

    Raises
    ------
    ValueError
        A projection size not divisible by ``num_heads``.
    TypeError
        A base cell from elsewhere; a call on numpy-mode arrays or in numpy mode, on arrays of
        another dtype than the cell's, or in float16 on CPU (module docstring).
    """

    def __init__(self, base_cell, query_units, key_units, value_units, num_heads, use_bias=True,
                 weight_initializer=None, bias_initializer='zeros', prefix=None, params=None):
        super().__init__(prefix=prefix, params=params)
        if not isinstance(base_cell, _Cell):
            _checks.fail_type('base_cell must be a cell of gluon_attention.compat.gluonnlp',
                              base_cell=type(base_cell).__name__)
        self._base_cell, self._num_heads = base_cell, num_heads
        for name, units in (('query', query_units), ('key', key_units), ('value', value_units)):
            if units % num_heads:
                _checks.fail('{}_units must be divisible by num_heads'.format(name),
                             **{name + '_units': units, 'num_heads': num_heads})
            with self.name_scope():
                setattr(self, 'proj_' + name, _dense(units, use_bias, weight_initializer,
                                                     bias_initializer, name + '_'))

    def _heads(self, F, name, x):
        """(B, L, units) -> (B * K, L, units / K)."""
        x = F.reshape(getattr(self, 'proj_' + name)(x), shape=(0, 0, self._num_heads, -1))
        return F.reshape(F.transpose(x, axes=(0, 2, 1, 3)), shape=(-1, 0, 0), reverse=True)

    def _compute_weight(self, F, query, key, mask=None):
        if mask is not None:   # (B, L_q, L_m) -> (B * K, L_q, L_m)
            mask = F.reshape(F.broadcast_axis(F.expand_dims(mask, axis=1), axis=1,
                                              size=self._num_heads), shape=(-1, 0, 0),
                             reverse=True)
        weights = self._base_cell._compute_weight(  # pylint: disable=protected-access
            F, self._heads(F, 'query', query), self._heads(F, 'key', key), mask)
        return F.reshape(weights, shape=(-1, self._num_heads, 0, 0), reverse=True)

    def hybrid_forward(self, F, query, key, value=None, mask=None):  # pylint: disable=arguments-differ
        value = key if value is None else value
        weights = self._compute_weight(F, query, key, mask)           # (B, K, L_q, L_m)
        context = F.batch_dot(F.reshape(weights, shape=(-1, 0, 0), reverse=True),
                              self._heads(F, 'value', value))         # (B * K, L_q, C_v / K)
        context = F.transpose(F.reshape(context, shape=(-1, self._num_heads, 0, 0),
                                        reverse=True), axes=(0, 2, 1, 3))
        return F.reshape(context, shape=(0, 0, -1)), weights
