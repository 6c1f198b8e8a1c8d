"""Post-norm Transformer encoder and a BERT-architecture backbone that loads BERT checkpoints.

Glossary: B batch, T sequence length (L_q = L_m = T in self-attention), K heads, D units
(model width), H hidden size of the feed-forward network, V vocabulary size.

The self-attention is this library's :class:`~gluon_attention.core.cells.MultiHeadAttentionCell`
(layout 'NTK', scaled; backend 'fused' or 'composed', chosen when the encoder is built). Lengths
enter once: :class:`TransformerEncoder` turns the (B,) ``valid_length`` into per-query memory
lengths (B, T), float32 (``valid_length`` for a valid query, 0 for a padded one: the lengths
form of :func:`~gluon_attention.core.masking.gen_self_attn_mask`), and every layer's attention
reads those, with no (B, T, T) mask built (the fused kernel reads them as they are; the composed
path's length-aware softmax broadcasts them over the heads). The layer layout follows BERT
(Devlin et al., 2019), itself the encoder of Vaswani et al. (2017) with GELU (Hendrycks and
Gimpel, 2016; the erf form) and the LayerNorm after each residual sum ("post-norm").

Inputs are checked once, by the block the user calls (imperatively or hybridized), before any
graph runs: B = 0 and T = 0 are refused (MXNet graphs cannot reshape them), and a T beyond
``max_length`` too (an embedding would clip the positions silently).
"""
import os

import mxnet as mx
import numpy as onp
from mxnet.gluon import nn

from .. import _checks
from ..core.base import CheckedBlock, Float32OnCPU
from ..core.cells import MultiHeadAttentionCell
from ..core.fused_rowwise import DenseGELU, ResidualLayerNorm
from ..core.kernels import Kernels, check_call, from_legacy
from ..core.matmul import Dense
from .checkpoint import load_bert_tensors, read_checkpoint

__all__ = ['TransformerEncoderLayer', 'TransformerEncoder', 'BertEncoder']

_ACTIVATIONS = ('gelu', 'relu')


def _weight_init():
    return mx.init.Normal(0.02)  # BERT's initializer_range


# How each encoder block is called (positionally), named in the errors of its calls.
_DATA_CALL = ('data', 'valid_length', 'mask')
_BERT_CALL = ('token_ids', 'token_types', 'valid_length', 'mask')


def _signature(arguments):
    return '({})'.format(', '.join(arguments))


def _require_lengths(block, arguments, valid_length):
    """The encoders' ``valid_length`` is required: None (or left out) is a TypeError naming the
    call's signature."""
    if valid_length is None:
        _checks.fail_type('{} is called {}: valid_length is required ({} may be None, '
                          'valid_length may not)'.format(block, _signature(arguments), ' and '.join(
                              a for a in arguments[1:] if a != 'valid_length')),
                          valid_length=None)


def _check_lengths_argument(block, arguments, valid_length, ranks):
    """``valid_length`` (at its place in ``arguments``, the call's signature) holds integer
    lengths of one of ``ranks``; a mask there is named as such (a bool one is a TypeError, as
    everywhere)."""
    if valid_length is None:
        return
    _checks.check_not_bool_lengths(valid_length)
    if valid_length.ndim not in ranks:
        _checks.fail('{} is called {}: its argument {}, valid_length, holds integer lengths of '
                     'shape {}; a (B, T, T) mask goes last, as mask'.format(
                         block, _signature(arguments), arguments.index('valid_length') + 1,
                         ' or '.join(('(B,)', '(B, T)')[r - 1] for r in ranks)),
                     valid_length='array of shape {}, dtype {}'.format(
                         valid_length.shape, onp.dtype(valid_length.dtype).name))


def _check_sequence(data, units, valid_length, mask=None):
    """data (B, T, D) float with D = ``units``, B, T >= 1; valid_length (B,) or (B, T) in
    [0, T]; a 0/1 mask broadcasting to (B, T, T)."""
    _checks.check_rank('data', data, (3,))
    _checks.check_float_tensor('data', data)
    if data.shape[-1] != units:
        _checks.fail('data must have the model width D={} on its last axis'.format(units),
                     **{'data.shape': data.shape})
    batch, length = data.shape[:2]
    _checks.check_not_empty('the batch size B and the sequence length T', (batch, length),
                            **{'data.shape': data.shape})
    _checks.check_mask(mask, (batch, length, length))
    _checks.check_memory_lengths(valid_length, batch, length, length)


def _first_layer(block):
    return block if isinstance(block, TransformerEncoderLayer) else block.layers[0]


class _KernelChoice:
    """The resolved :class:`~gluon_attention.core.kernels.Kernels` of an encoder block, fixed
    when it is built (``self._kernels``; the product dtype read from the layers, which
    ``set_matmul_dtype`` may change), and the checks of a call ``(data, valid_length, mask)``."""

    @property
    def kernels(self):
        """The resolved kernel choice the block runs (no 'auto' field)."""
        return self._kernels._replace(matmul_dtype=_first_layer(self).attn_query.matmul_dtype)

    @property
    def fused_attention(self):
        """Whether the self-attention runs the fused kernel (``kernels.attention == 'fused'``)."""
        return self._kernels.attention == 'fused'

    @property
    def fused_rowwise(self):
        """Whether residual + LayerNorm and bias + GELU run the fused operators
        (``kernels.rowwise == 'fused'``)."""
        return self._kernels.rowwise == 'fused'

    @property
    def matmul_dtype(self):
        """The dtype of the dense products, 'float32' or 'bfloat16' (see
        :mod:`gluon_attention.core.matmul`; changed with ``set_matmul_dtype``)."""
        return self.kernels.matmul_dtype

    def _check_call(self, data, valid_length, mask, ranks, layer):
        """``layer``: the (first) TransformerEncoderLayer, whose parameters ``data`` meets."""
        _check_lengths_argument(type(self).__name__, _DATA_CALL, valid_length, ranks)
        check_call(type(self).__name__, self.kernels, data, mask, layer.attn_query.weight)
        _check_sequence(data, layer._units, valid_length, mask)
        dtype, got = onp.dtype(layer.attn_query.weight.dtype), onp.dtype(data.dtype)
        if got != dtype and not (got == onp.float16 and dtype == onp.float32
                                 and data.ctx.device_type == 'cpu'):
            _checks.fail_type('{} takes data of its parameters\' dtype {} (float16 data on a '
                              'CPU is computed in float32)'.format(type(self).__name__,
                                                                   dtype.name),
                              **{'data.dtype': got.name})


def _kernels(owner, kernels, attention_dropout, ctx=None, **legacy):
    """``kernels`` with the deprecated keywords applied, resolved once for ``ctx``."""
    return from_legacy(owner, kernels, **legacy).resolve(ctx, attention_dropout)


@mx.util.use_np
class TransformerEncoderLayer(_KernelChoice, Float32OnCPU):
    """One post-norm Transformer encoder layer (BERT layout).

    Equivalent computation, with ``mha`` the scaled multi-head attention::

        q, k, v = attn_query(x), attn_key(x), attn_value(x)        # (B, T, D) each
        a = attn_ln(x + dropout(attn_proj(mha(q, k, v, valid_length, mask))))  # (B, T, D)
        y = ffn_ln(a + dropout(ffn_2(gelu(ffn_1(a)))))             # (B, T, D)

    Parameters
    ----------
    units : int
        D, the model width; must be divisible by ``num_heads``.
    hidden_size : int
        H, the width of the feed-forward network.
    num_heads : int
        K, the number of attention heads (each of size D / K).
    dropout : float
        Dropout rate on the attention output and on the feed-forward output, in [0, 1).
    attention_dropout : float
        Dropout rate on the attention weights, in [0, 1).
    layer_norm_eps : float
        Epsilon of both LayerNorms.
    activation : {'gelu', 'relu'}
        Feed-forward activation; 'gelu' is the exact (erf) GELU.
    kernels : Kernels
        The kernel choice (:class:`gluon_attention.Kernels`), resolved here for the current
        context unless already resolved: ``attention`` for the self-attention ('fused': CPU,
        float32, no attention dropout, ``valid_length`` only, no ``mask``), ``rowwise`` for
        each residual sum + LayerNorm and ``ffn_1``'s bias + GELU (the same parameters),
        ``matmul_dtype`` for the six dense products (operands and results rounded to bfloat16,
        float32 accumulation and parameters; CPU only), and, with ``attention='fused'``, for
        the attention kernel's forward products on AMX tiles where this process can
        (:func:`gluon_attention.core.fused.amx_problem`; its backward pass stays float32);
        everything else runs in float32. Fixed when the layer is built. Default ``Kernels()``.
    fused_attention, fused_rowwise, matmul_dtype
        Deprecated (DeprecationWarning): the fields of ``kernels`` (True is 'fused', False
        'composed').

    Notes
    -----
    Inputs, positional (the order of every encoder block): ``(data, valid_length, mask)``.

    data : float32 (B, T, D)
        The input sequences.
    valid_length : int (B,) or (B, T), optional
        Memory lengths (the fast path for key padding; see
        :func:`gluon_attention.multi_head_dot_attn`, which also says which 0/1 (B, T) arrays are
        refused as masks given in place of lengths). With ``mask``, both apply.
    mask : bool or 0/1 (B, T, T), optional
        Self-attention mask, 1 = attend (see :func:`gluon_attention.gen_self_attn_mask`).

    Returns
    -------
    out : float32 (B, T, D)

    Raises
    ------
    ValueError
        On a non-positive size, ``units`` not divisible by ``num_heads``, a rate outside [0, 1)
        or an unknown ``activation``; when called on arrays, on data that is not (B, T, D) with
        B, T >= 1, a mask or ``valid_length`` of the wrong shape or values (a mask given as the
        second argument is named as such), or a call the fused kernels cannot serve (arrays
        off the CPU; a mask with ``attention='fused'``).
    TypeError
        A bool ``valid_length``, or data of another dtype than the parameters' (float16 data
        on a CPU runs in float32).
    """

    def __init__(self, units, hidden_size, num_heads, dropout=0.1, attention_dropout=0.1,
                 layer_norm_eps=1e-12, activation='gelu', kernels=Kernels(), prefix=None,
                 params=None, fused_attention=None, fused_rowwise=None, matmul_dtype=None):
        super().__init__(prefix=prefix, params=params)
        units = _checks.check_positive_int('units', units)
        hidden_size = _checks.check_positive_int('hidden_size', hidden_size)
        self._num_heads = _checks.check_positive_int('num_heads', num_heads)
        if units % num_heads:
            _checks.fail('units must be divisible by num_heads', units=units, num_heads=num_heads)
        dropout = _checks.check_probability('dropout', dropout)
        attention_dropout = _checks.check_probability('attention_dropout', attention_dropout)
        self._activation = _checks.check_choice('activation', activation, _ACTIVATIONS)
        self._kernels = kernels = _kernels(
            type(self).__name__, kernels, attention_dropout, fused_attention=fused_attention,
            fused_rowwise=fused_rowwise, matmul_dtype=matmul_dtype)

        def dense(out_units, in_units):
            return Dense(out_units, in_units=in_units, matmul_dtype=kernels.matmul_dtype,
                         weight_initializer=_weight_init())

        self._units = units
        with self.name_scope():
            self.attn_query = dense(units, units)
            self.attn_key = dense(units, units)
            self.attn_value = dense(units, units)
            self.attention_cell = MultiHeadAttentionCell(
                query_units=units, num_heads=num_heads, attention_dropout=attention_dropout,
                scaled=True, layout='NTK', kernels=kernels)
            self.attn_proj = dense(units, units)
            self.attn_dropout = nn.Dropout(dropout)
            self.attn_ln = ResidualLayerNorm(layer_norm_eps, units, kernels=kernels)
            self.ffn_1 = (DenseGELU(hidden_size, units, kernels=kernels,
                                    weight_initializer=_weight_init())
                          if self._activation == 'gelu' else dense(hidden_size, units))
            self.ffn_2 = dense(units, hidden_size)
            self.ffn_dropout = nn.Dropout(dropout)
            self.ffn_ln = ResidualLayerNorm(layer_norm_eps, units, kernels=kernels)

    def _split_heads(self, F, x):
        return F.npx.reshape(x, (-2, -2, self._num_heads, -1))  # (B, T, D) -> (B, T, K, D/K)

    def check_inputs(self, data, valid_length=None, mask=None):  # pylint: disable=arguments-differ
        self._check_call(data, valid_length, mask, (1, 2), self)

    def hybrid_forward(self, F, data, valid_length=None, mask=None):  # pylint: disable=arguments-differ
        query = self._split_heads(F, self.attn_query(data))    # (B, T, K, D/K)
        key = self._split_heads(F, self.attn_key(data))        # (B, T, K, D/K)
        value = self._split_heads(F, self.attn_value(data))    # (B, T, K, D/K)
        context = self.attention_cell(query, key, value, mask, None, valid_length)[0]  # (B, T, D)
        out = self.attn_ln(self.attn_dropout(self.attn_proj(context)), data)  # LN(data + ...)
        hidden = self.ffn_1(out)                                # (B, T, H), GELU included
        if self._activation == 'relu':
            hidden = F.npx.relu(hidden)
        return self.ffn_ln(self.ffn_dropout(self.ffn_2(hidden)), out)          # (B, T, D)


@mx.util.use_np
class TransformerEncoder(_KernelChoice, Float32OnCPU):
    """A stack of ``num_layers`` :class:`TransformerEncoderLayer` sharing one set of lengths.

    Parameters
    ----------
    num_layers : int
        Number of layers.
    units, hidden_size, num_heads, dropout, attention_dropout, layer_norm_eps, activation
        As in :class:`TransformerEncoderLayer`.
    kernels : Kernels
        As in :class:`TransformerEncoderLayer`, for every layer: resolved once, here, for the
        current context (:meth:`gluon_attention.Kernels.resolve`: 'auto' attention is 'fused'
        when the kernel is built, ``attention_dropout`` is 0 and the context is a CPU), and
        handed to the layers resolved; the choice never changes (see Raises).
    fused_attention, fused_rowwise, matmul_dtype
        Deprecated: the fields of ``kernels``.

    Notes
    -----
    Inputs, positional: ``(data, valid_length, mask)``.

    data : float32 (B, T, D)
        The input sequences.
    valid_length : int32 (B,), required
        Valid positions per sequence, in [0, T]; positions at or beyond it are neither attended
        to nor meaningful in the output (a padded query row attends nothing: its context is zero).
        Turned once into the per-query lengths every layer reads (module docstring).
    mask : bool or 0/1 (B, T, T), optional
        A self-attention mask applied with the lengths (1 = attend); composed attention only.

    Returns
    -------
    out : float32 (B, T, D)

    Raises
    ------
    ValueError
        Called on arrays: data that is not (B, T, D) with B, T >= 1, lengths that are not (B,)
        or outside [0, T] (a mask given as the second argument is named as such), a bad mask;
        with a fused kernel chosen, arrays off the CPU or a mask (build with
        ``Kernels(attention='composed', rowwise='composed')`` for them); as
        :meth:`gluon_attention.Kernels.resolve` for a choice it cannot serve here.
    TypeError
        A missing ``valid_length``, a bool one, or data of another dtype than the parameters'
        (float16 data on a CPU runs in float32).
    """

    def __init__(self, num_layers, units, hidden_size, num_heads, dropout=0.1,
                 attention_dropout=0.1, layer_norm_eps=1e-12, activation='gelu',
                 kernels=Kernels(), prefix=None, params=None, fused_attention=None,
                 fused_rowwise=None, matmul_dtype=None):
        super().__init__(prefix=prefix, params=params)
        num_layers = _checks.check_positive_int('num_layers', num_layers)
        self._kernels = _kernels(type(self).__name__, kernels, attention_dropout,
                                 fused_attention=fused_attention, fused_rowwise=fused_rowwise,
                                 matmul_dtype=matmul_dtype)
        with self.name_scope():
            self.layers = nn.HybridSequential()
            for _ in range(num_layers):
                self.layers.add(TransformerEncoderLayer(
                    units, hidden_size, num_heads, dropout=dropout,
                    attention_dropout=attention_dropout, layer_norm_eps=layer_norm_eps,
                    activation=activation, kernels=self._kernels))

    def check_inputs(self, data, valid_length=None, mask=None):  # pylint: disable=arguments-differ
        _require_lengths(type(self).__name__, _DATA_CALL, valid_length)
        self._check_call(data, valid_length, mask, (1,), self.layers[0])

    def hybrid_forward(self, F, data, valid_length, mask=None):  # pylint: disable=arguments-differ
        # The one length representation of the layers: per-query memory lengths (B, T),
        # valid_length for a valid query, 0 for a padded one (gen_self_attn_mask as lengths).
        length = F.npx.reshape(valid_length.astype('float32'), (-2, 1))          # (B, 1)
        steps = F.npx.arange_like(data, axis=1)                                  # (T,)
        query_lengths = (F.np.expand_dims(steps, 0) < length) * length           # (B, T)
        for i in range(len(self.layers)):
            data = self.layers[i](data, query_lengths, mask)                     # (B, T, D)
        return data


@mx.util.use_np
class BertEncoder(CheckedBlock):
    """BERT-architecture backbone: embeddings, LayerNorm, dropout, post-norm Transformer.

    Loads standard BERT checkpoints exactly (:meth:`from_pretrained`); the default is
    all-MiniLM-L6-v2 (6 layers, D=384, K=12, H=1536). Shape-free: a hybridized or exported graph
    runs at any B and any T <= ``max_length``.

    Equivalent computation::

        x = word_embed(token_ids) + token_type_embed(token_types) + position_embed(arange(T))
        #   (no token_type_embed when num_token_types=0)
        x = dropout(embed_ln(x))                                       # (B, T, D)
        return encoder(x, valid_length, mask)                          # (B, T, D)

    Parameters
    ----------
    vocab_size : int
        V, the number of word ids.
    units : int
        D, the model width.
    hidden_size : int
        H, the feed-forward width.
    num_layers : int
        Number of Transformer layers.
    num_heads : int
        K, attention heads; must divide ``units``.
    max_length : int
        Number of learned positions; T may not exceed it (checked on every call on arrays,
        hybridized too; only an exported graph, which runs without this class, reads clipped
        positions when given longer inputs).
    num_token_types : int
        Number of segment (token type) ids; 0: no token type embedding (RoBERTa, DistilBERT),
        and ``token_types`` must then be None or all zeros.
    dropout, attention_dropout : float
        Dropout rates of the embeddings and layers, and of the attention weights, in [0, 1).
    layer_norm_eps : float
        Epsilon of every LayerNorm (BERT 1e-12; RoBERTa, DistilBERT, ERNIE 1e-5).
    activation : {'gelu', 'relu'}
        The feed-forward activation (ERNIE: 'relu'); 'gelu' is the exact (erf) GELU.
    kernels : Kernels
        As in :class:`TransformerEncoder` (``rowwise`` also for the embeddings' LayerNorm;
        'auto' attention: the fused kernel on CPU when it is built and ``attention_dropout`` is
        0, as when fine-tuning with ``attention_dropout=0``), resolved once, here, for the
        current context (:meth:`from_pretrained` resolves it for its ``ctx``).
        ``matmul_dtype='bfloat16'`` runs the layers' dense products in bfloat16 (a faster
        fine-tuning step on CPUs with AVX512-BF16); the embeddings, LayerNorms, attention and
        parameters stay float32. Not part of ``config``.
    fused_attention, fused_rowwise, matmul_dtype
        Deprecated: the fields of ``kernels``.

    Notes
    -----
    Inputs, positional: ``(token_ids, token_types, valid_length, mask)``.

    token_ids : int32 (B, T)
        Word ids in [0, V).
    token_types : int32 (B, T) or None
        Segment ids in [0, num_token_types); ``None`` means all zeros (one segment).
    valid_length : int32 (B,), required
        Number of valid tokens per row, in [0, T]; positions at or beyond it are padding. A
        Hugging Face ``attention_mask`` converts with ``attention_mask.sum(axis=-1)``.
    mask : bool or 0/1 (B, T, T), optional
        As in :class:`TransformerEncoder` (composed attention only).

    Returns
    -------
    hidden : float32 (B, T, D)
        Last hidden states. Only positions below ``valid_length`` are meaningful.

    Attributes
    ----------
    config : dict
        The constructor arguments above (e.g. ``config['units']`` for a head on top).

    Raises
    ------
    ValueError
        On an invalid configuration, or (on arrays, before any graph runs) on inputs of the
        wrong rank, with different shapes, with non-integer or out-of-range ids, with B = 0,
        T = 0 or T > ``max_length``, or on a ``valid_length`` outside [0, T] or not (B,) (a mask
        given there is named as such); as :class:`TransformerEncoder` for a call the fused
        kernels cannot serve (arrays off the CPU, a mask).
    TypeError
        On arrays that are not mx.np arrays, float token ids, a missing or bool
        ``valid_length``, or parameters cast from float32 with a fused kernel chosen.
    """

    def __init__(self, vocab_size, units=384, hidden_size=1536, num_layers=6, num_heads=12,
                 max_length=512, num_token_types=2, dropout=0.1, attention_dropout=0.1,
                 layer_norm_eps=1e-12, activation='gelu', kernels=Kernels(), prefix=None,
                 params=None, fused_attention=None, fused_rowwise=None, matmul_dtype=None):
        super().__init__(prefix=prefix, params=params)
        vocab_size = _checks.check_positive_int('vocab_size', vocab_size)
        units = _checks.check_positive_int('units', units)
        self._max_length = _checks.check_positive_int('max_length', max_length)
        if num_token_types != 0:
            num_token_types = _checks.check_positive_int('num_token_types', num_token_types)
        self.config = dict(vocab_size=vocab_size, units=units, hidden_size=hidden_size,
                           num_layers=num_layers, num_heads=num_heads, max_length=max_length,
                           num_token_types=num_token_types, dropout=dropout,
                           attention_dropout=attention_dropout, layer_norm_eps=layer_norm_eps,
                           activation=activation)
        kernels = _kernels(type(self).__name__, kernels, attention_dropout,
                           fused_attention=fused_attention, fused_rowwise=fused_rowwise,
                           matmul_dtype=matmul_dtype)
        with self.name_scope():
            self.word_embed = nn.Embedding(vocab_size, units, weight_initializer=_weight_init())
            self.position_embed = nn.Embedding(max_length, units,
                                               weight_initializer=_weight_init())
            if num_token_types:
                self.token_type_embed = nn.Embedding(num_token_types, units,
                                                     weight_initializer=_weight_init())
            self.embed_ln = ResidualLayerNorm(layer_norm_eps, units, kernels=kernels)
            self.embed_dropout = nn.Dropout(_checks.check_probability('dropout', dropout))
            self.encoder = TransformerEncoder(
                num_layers, units, hidden_size, num_heads, dropout=dropout,
                attention_dropout=attention_dropout, layer_norm_eps=layer_norm_eps,
                activation=activation, kernels=kernels)

    def forward(self, token_ids, *args):  # pylint: disable=arguments-differ
        if args and args[0] is None and isinstance(token_ids, mx.nd.NDArray):
            args = (mx.np.zeros_like(token_ids),) + tuple(args[1:])   # one segment: type 0
        return super().forward(token_ids, *args)

    @property
    def kernels(self):
        """The resolved kernel choice (:class:`gluon_attention.Kernels`) the encoder runs."""
        return self.encoder.kernels

    @property
    def fused_attention(self):
        """Whether the self-attention runs the fused kernel (fixed at construction)."""
        return self.encoder.fused_attention

    @property
    def fused_rowwise(self):
        """Whether the LayerNorms and GELUs run the fused operators (fixed at construction)."""
        return self.encoder.fused_rowwise

    @property
    def matmul_dtype(self):
        """The dtype of the layers' dense products ('float32' or 'bfloat16')."""
        return self.encoder.matmul_dtype

    def check_inputs(self, token_ids, token_types=None, valid_length=None, mask=None):  # pylint: disable=arguments-differ
        _require_lengths(type(self).__name__, _BERT_CALL, valid_length)
        _check_lengths_argument(type(self).__name__, _BERT_CALL, valid_length, (1,))
        check_call(type(self).__name__, self.kernels, token_ids, mask, self.word_embed.weight)
        for name, x in (('token_ids', token_ids), ('token_types', token_types)):
            _checks.check_rank(name, x, (2,))
        if token_ids.shape != token_types.shape:
            _checks.fail('token_ids and token_types must have the same shape (B, T)',
                         **{'token_ids.shape': token_ids.shape,
                            'token_types.shape': token_types.shape})
        _checks.check_token_ids('token_ids', token_ids, self.config['vocab_size'])
        _checks.check_token_ids('token_types', token_types,
                                max(self.config['num_token_types'], 1))  # 0 types: zeros only
        _checks.check_not_empty('the batch size B and the sequence length T', token_ids.shape,
                                **{'token_ids.shape': token_ids.shape})
        if token_ids.shape[1] > self._max_length:
            _checks.fail('the sequence length T must be at most max_length={}'.format(
                self._max_length), **{'token_ids.shape': token_ids.shape})
        _checks.check_valid_length(valid_length, token_ids.shape[1],
                                   batch_size=token_ids.shape[0])
        _checks.check_mask(mask, token_ids.shape + token_ids.shape[1:])

    def hybrid_forward(self, F, token_ids, token_types,  # pylint: disable=arguments-differ
                       valid_length, mask=None):
        positions = F.npx.arange_like(token_ids, axis=1)                 # (T,) token_ids' dtype
        if self.config['num_token_types']:
            data = self.word_embed(token_ids) + self.token_type_embed(token_types)  # (B, T, D)
        else:  # all zeros (checked); used, as every input of a graph must be
            data = self.word_embed(token_ids) + F.np.expand_dims(token_types, -1) * 0
        data = data + F.np.expand_dims(self.position_embed(positions), axis=0)   # (B, T, D)
        data = self.embed_dropout(self.embed_ln(data))                   # (B, T, D)
        return self.encoder(data, valid_length, mask)                    # (B, T, D)

    @classmethod
    def from_pretrained(cls, path=None, ctx=None, **overrides):
        """Build a BertEncoder from a BERT checkpoint folder and load its weights exactly.

        Parameters
        ----------
        path : str or os.PathLike, optional
            Folder holding ``config.json`` (a BERT config with ``hidden_act='gelu'``) and
            ``model.safetensors`` (standard BERT tensor names, with or without a ``bert.``
            prefix). ``None`` means the default pretrained encoder
            (:func:`gluon_attention._resources.default_model_dir`, all-MiniLM-L6-v2).
        ctx : mxnet.Context or list of Context, optional
            Where the parameters live; the current context by default.
        **overrides
            ``dropout`` and/or ``attention_dropout`` replacing the config's rates (fine-tuning
            recipes often change them; the weights are unaffected), ``kernels`` (default
            ``Kernels()``, resolved for ``ctx``), and the deprecated ``fused_attention``,
            ``fused_rowwise`` and ``matmul_dtype``.

        Returns
        -------
        BertEncoder
            Initialised with the checkpoint's weights; the pooler, ``position_ids`` and, in a
            ``bert.``-prefixed checkpoint, task heads outside ``bert.`` are ignored.

        Raises
        ------
        ModuleNotFoundError
            ``path`` is None and the default model package is not installed.
        FileNotFoundError
            The folder, ``config.json`` or ``model.safetensors`` is missing.
        TypeError
            ``path`` or ``ctx`` of the wrong type.
        ValueError
            An unsupported config, an unreadable (e.g. truncated) weights file, or a missing,
            unexpected or mis-shaped tensor.
        """
        if path is not None and not isinstance(path, (str, os.PathLike)):
            _checks.fail_type('path must be a folder (str or os.PathLike) or None',
                              path=type(path).__name__)
        contexts = ctx if isinstance(ctx, (list, tuple)) else [ctx]
        if not all(c is None or isinstance(c, mx.Context) for c in contexts):
            _checks.fail_type('ctx must be an mxnet Context (e.g. mx.cpu()), a list of them, '
                              'or None', ctx=ctx)
        config, tensors, source = read_checkpoint(path)
        legacy = {k: overrides.pop(k) for k in ('fused_attention', 'fused_rowwise',
                                                'matmul_dtype') if k in overrides}
        unknown = set(overrides) - {'dropout', 'attention_dropout', 'kernels'}
        if unknown:
            _checks.fail('from_pretrained overrides only dropout, attention_dropout and '
                         'kernels',
                         overrides=sorted(unknown))
        config.update(overrides)
        config['kernels'] = _kernels('BertEncoder.from_pretrained', config.get('kernels'),
                                     config['attention_dropout'], ctx, **legacy)
        with contexts[0] or mx.current_context():   # the layers check it where they run
            block = cls(**config)
        block.initialize(ctx=ctx)
        load_bert_tensors(block, tensors, source)
        return block

