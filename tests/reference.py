"""float64 NumPy oracles for every public op of gluon_attention: forward and gradients.

Written from the documented semantics (README.md, CONTRIBUTING.md), independently of the
implementation.
Each ``*_vjp`` function takes the upstream gradients of the outputs and returns
the gradients of the inputs (analytic backward). ``numeric_grad`` is a float64
central-difference helper used to check the analytic backward itself.

Conventions: masks are 1 = attend, 0 = blocked. Dimension letters: B batch, K heads,
L_q / L_m query / memory length, C_k / C_v per-head sizes.
"""
import math

import numpy as np

LAYOUTS = ('NKT', 'NTK', 'TNK')


def f64(x):
    """float64 numpy copy of an mx.np / numpy array (None stays None)."""
    if x is None:
        return None
    if hasattr(x, 'asnumpy'):
        x = x.asnumpy()
    return np.asarray(x, dtype=np.float64)


def numeric_grad(fn, x, head, eps=1e-6):
    """d(sum(fn(x) * head))/dx by central differences in float64 (small x only)."""
    x = np.array(x, dtype=np.float64)
    grad = np.zeros_like(x)
    it = np.nditer(x, flags=['multi_index'])
    for _ in it:
        idx = it.multi_index
        old = x[idx]
        x[idx] = old + eps
        plus = np.sum(fn(x) * head)
        x[idx] = old - eps
        minus = np.sum(fn(x) * head)
        x[idx] = old
        grad[idx] = (plus - minus) / (2 * eps)
    return grad


def unbroadcast(grad, shape):
    """Sum ``grad`` down to ``shape`` (the reverse of NumPy broadcasting)."""
    while grad.ndim > len(shape):
        grad = grad.sum(axis=0)
    for axis, size in enumerate(shape):
        if size == 1 and grad.shape[axis] != 1:
            grad = grad.sum(axis=axis, keepdims=True)
    return grad


# ----------------------------------------------------------------------------- masks
def valid_length_to_mask(valid_length, length):
    """bool (B, T): t < valid_length[b]; (B, L_q) lengths give (B, L_q, T)."""
    vl = np.asarray(valid_length)
    return np.arange(length) < vl[..., None]


def gen_self_attn_mask(batch_size, length, valid_length=None, attn_type='full'):
    """bool (B, T, T); rows i >= vl and columns j >= vl blocked; causal: j <= i."""
    mask = np.ones((batch_size, length, length), dtype=bool)
    if valid_length is not None:
        keep = valid_length_to_mask(valid_length, length)
        mask = keep[:, :, None] & keep[:, None, :]
    if attn_type == 'causal':
        mask = mask & np.tril(np.ones((length, length), dtype=bool))[None]
    return mask


def gen_mem_attn_mask(batch_size, mem_length, mem_valid_length, query_length,
                      data_valid_length=None):
    """bool (B, L_q, L_m): (j < mem_vl[b]) and (i < data_vl[b])."""
    mem_keep = valid_length_to_mask(mem_valid_length, mem_length)[:, None, :]
    mask = np.broadcast_to(mem_keep, (batch_size, query_length, mem_length))
    if data_valid_length is not None:
        data_keep = valid_length_to_mask(data_valid_length, query_length)[:, :, None]
        mask = mask & data_keep
    return np.array(mask, dtype=bool)


def key_mask_from_valid_length(valid_length, query_length, mem_length):
    """(B, L_q, L_m) mask of a block's valid_length, (B,) or (B, L_q), on the key axis."""
    vl = np.asarray(valid_length)
    if vl.ndim == 1:
        vl = np.repeat(vl[:, None], query_length, axis=1)
    return np.arange(mem_length)[None, None, :] < vl[:, :, None]


# ----------------------------------------------------------------------------- softmax
def masked_softmax(score, mask=None, axis=-1, temperature=None):
    """Softmax of score / T over ``axis`` restricted to mask; masked and fully masked -> 0."""
    x = f64(score)
    t = 1.0 if temperature is None else float(temperature)
    keep = np.ones_like(x, dtype=bool) if mask is None else np.broadcast_to(
        f64(mask) != 0, x.shape)
    z = np.where(keep, x / t, -np.inf)
    zmax = np.max(z, axis=axis, keepdims=True)
    zmax = np.where(np.isfinite(zmax), zmax, 0.0)
    e = np.where(keep, np.exp(np.where(keep, z, 0.0) - zmax), 0.0)
    denom = e.sum(axis=axis, keepdims=True)
    return np.where(denom > 0, e / np.where(denom > 0, denom, 1.0), 0.0)


def masked_softmax_vjp(weights, grad_out, axis=-1, temperature=None):
    """Gradient of the score given the forward ``weights`` (0 at masked positions)."""
    t = 1.0 if temperature is None else float(temperature)
    w, g = f64(weights), f64(grad_out)
    return w * (g - np.sum(g * w, axis=axis, keepdims=True)) / t


def masked_log_softmax(score, mask=None, axis=-1):
    """log of the masked softmax over unmasked entries; masked entries are -inf."""
    x = f64(score)
    keep = np.ones_like(x, dtype=bool) if mask is None else np.broadcast_to(
        f64(mask) != 0, x.shape)
    z = np.where(keep, x, -np.inf)
    zmax = np.max(z, axis=axis, keepdims=True)
    zmax = np.where(np.isfinite(zmax), zmax, 0.0)
    e = np.where(keep, np.exp(np.where(keep, z, 0.0) - zmax), 0.0)
    lse = np.log(np.where(e.sum(axis=axis, keepdims=True) > 0, e.sum(axis=axis, keepdims=True), 1.0))
    return np.where(keep, z - zmax - lse, -np.inf)


def masked_log_softmax_vjp(score, mask, grad_out, axis=-1):
    """Gradient: mask * (g - softmax * sum(g * mask)); 0 at masked positions and rows."""
    x = f64(score)
    keep = np.ones_like(x, dtype=bool) if mask is None else np.broadcast_to(
        f64(mask) != 0, x.shape)
    g = np.where(keep, f64(grad_out), 0.0)
    w = masked_softmax(x, keep, axis=axis)
    return np.where(keep, g - w * g.sum(axis=axis, keepdims=True), 0.0)


# ----------------------------------------------------------------------------- l2 / scores
def l2_normalize(data, axis=-1, eps=1e-6):
    """data / (||data||_2 + eps) along axis."""
    x = f64(data)
    return x / (np.linalg.norm(x, axis=axis, keepdims=True) + eps)


def l2_normalize_vjp(data, grad_out, axis=-1, eps=1e-6):
    """d/dx of x / (n + eps): g / (n + eps) - x * <g, x> / ((n + eps)^2 n)."""
    x, g = f64(data), f64(grad_out)
    n = np.linalg.norm(x, axis=axis, keepdims=True)
    dot = np.sum(g * x, axis=axis, keepdims=True)
    safe_n = np.where(n > 0, n, 1.0)
    return g / (n + eps) - x * dot / ((n + eps) ** 2 * safe_n)


def _tn_to_nt(x):
    """(T, B0, ..., C) -> (B0, ..., T, C)."""
    return np.moveaxis(x, 0, -2)


def dot_attn_score(query, key, scaled=True, normalized=False, eps=1e-6, layout='NT'):
    """Scores (B0, ..., L_q, L_m) = <q', k'> with q' normalised and/or divided by sqrt(C)."""
    q, k = f64(query), f64(key)
    if layout == 'TN':
        q, k = _tn_to_nt(q), _tn_to_nt(k)
    if normalized:
        q, k = l2_normalize(q, eps=eps), l2_normalize(k, eps=eps)
    if scaled:
        q = q / np.sqrt(q.shape[-1])
    return np.matmul(q, np.swapaxes(k, -1, -2))


def dot_attn_score_vjp(query, key, grad_out, scaled=True, normalized=False, eps=1e-6,
                       layout='NT'):
    """(grad_query, grad_key) in the input layout."""
    q0, k0, g = f64(query), f64(key), f64(grad_out)
    if layout == 'TN':
        q0, k0 = _tn_to_nt(q0), _tn_to_nt(k0)
    q, k = q0, k0
    if normalized:
        q, k = l2_normalize(q0, eps=eps), l2_normalize(k0, eps=eps)
    scale = 1.0 / np.sqrt(q0.shape[-1]) if scaled else 1.0
    gq = np.matmul(g, k) * scale
    gk = np.matmul(np.swapaxes(g, -1, -2), q * scale)
    if normalized:
        gq, gk = l2_normalize_vjp(q0, gq, eps=eps), l2_normalize_vjp(k0, gk, eps=eps)
    if layout == 'TN':
        gq, gk = np.moveaxis(gq, -2, 0), np.moveaxis(gk, -2, 0)
    return gq, gk


# ----------------------------------------------------------------------------- multi-head
# axes taking each layout to (B, K, T, C), and back
_TO_NKT = {'NKT': (0, 1, 2, 3), 'NTK': (0, 2, 1, 3), 'TNK': (1, 2, 0, 3)}
_FROM_NKT = {'NKT': (0, 1, 2, 3), 'NTK': (0, 2, 1, 3), 'TNK': (2, 0, 1, 3)}


def to_nkt(x, layout):
    """A per-head tensor in ``layout`` -> (B, K, T, C)."""
    return f64(x).transpose(_TO_NKT[layout])


def from_nkt(x, layout):
    """(B, K, T, C) -> ``layout`` (inverse of to_nkt)."""
    return x.transpose(_FROM_NKT[layout])


def merge_heads(ctx, layout):
    """(B, K, L_q, C_v) -> (B, L_q, K*C_v) (NKT/NTK) or (L_q, B, K*C_v) (TNK), head-major."""
    b, k, lq, cv = ctx.shape
    out = ctx.transpose(0, 2, 1, 3).reshape(b, lq, k * cv)
    return out.transpose(1, 0, 2) if layout == 'TNK' else out


def split_heads_grad(grad_ctx, layout, num_heads):
    """Inverse of merge_heads for an upstream gradient."""
    g = f64(grad_ctx)
    if layout == 'TNK':
        g = g.transpose(1, 0, 2)
    b, lq, units = g.shape
    return g.reshape(b, lq, num_heads, units // num_heads).transpose(0, 2, 1, 3)


def _mhda_parts(query, key, value, mask, edge_scores, scaled, normalized, eps,
                query_head_units, layout):
    q0, k0, v = to_nkt(query, layout), to_nkt(key, layout), to_nkt(value, layout)
    q, k = q0, k0
    if normalized:
        q, k = l2_normalize(q0, eps=eps), l2_normalize(k0, eps=eps)
    scores = np.matmul(q, np.swapaxes(k, -1, -2))
    if edge_scores is not None:
        scores = scores + f64(edge_scores)
    temp = None
    if scaled:
        temp = np.sqrt(query_head_units if query_head_units is not None else q0.shape[-1])
    m = None if mask is None else (f64(mask) != 0)[:, None]
    weights = masked_softmax(scores, m, temperature=temp)
    return q0, k0, q, k, v, scores, weights, temp


def multi_head_dot_attn(query, key, value, mask=None, edge_scores=None, scaled=True,
                        normalized=False, eps=1e-6, query_head_units=None, layout='NKT'):
    """(context, scores, weights) in float64; scores raw (edge added, unscaled, unmasked)."""
    parts = _mhda_parts(query, key, value, mask, edge_scores, scaled, normalized, eps,
                        query_head_units, layout)
    _, _, _, _, v, scores, weights, _ = parts
    return merge_heads(np.matmul(weights, v), layout), scores, weights


def multi_head_dot_attn_vjp(query, key, value, grad_context, grad_scores=None,
                            grad_weights=None, mask=None, edge_scores=None, scaled=True,
                            normalized=False, eps=1e-6, query_head_units=None, layout='NKT'):
    """Gradients (query, key, value, edge_scores) of <ctx, g_c> + <scores, g_s> + <w, g_w>."""
    q0, k0, q, k, v, scores, w, temp = _mhda_parts(
        query, key, value, mask, edge_scores, scaled, normalized, eps, query_head_units, layout)
    gctx = split_heads_grad(grad_context, layout, q0.shape[1])
    gw = np.matmul(gctx, np.swapaxes(v, -1, -2))
    if grad_weights is not None:
        gw = gw + f64(grad_weights)
    gv = np.matmul(np.swapaxes(w, -1, -2), gctx)
    gs = masked_softmax_vjp(w, gw, temperature=temp)
    if grad_scores is not None:
        gs = gs + f64(grad_scores)
    ge = None if edge_scores is None else unbroadcast(gs, np.shape(f64(edge_scores)))
    gq = np.matmul(gs, k)
    gk = np.matmul(np.swapaxes(gs, -1, -2), q)
    if normalized:
        gq, gk = l2_normalize_vjp(q0, gq, eps=eps), l2_normalize_vjp(k0, gk, eps=eps)
    return from_nkt(gq, layout), from_nkt(gk, layout), from_nkt(gv, layout), ge


# ----------------------------------------------------------------------------- blocks
def dot_product_attention(query, key, value, valid_length=None, scaled=True):
    """DotProductAttention: (context (B, L_q, C_v), weights (B, L_q, L_m))."""
    q, k, v = f64(query), f64(key), f64(value)
    mask = None if valid_length is None else key_mask_from_valid_length(
        valid_length, q.shape[1], k.shape[1])
    scores = np.matmul(q, np.swapaxes(k, -1, -2))
    weights = masked_softmax(scores, mask, temperature=np.sqrt(q.shape[-1]) if scaled else None)
    return np.matmul(weights, v), weights


def dot_product_attention_vjp(query, key, value, grad_context, grad_weights=None,
                              valid_length=None, scaled=True):
    """Gradients (query, key, value)."""
    q, k, v = f64(query), f64(key), f64(value)
    _, w = dot_product_attention(q, k, v, valid_length, scaled)
    temp = np.sqrt(q.shape[-1]) if scaled else None
    g = f64(grad_context)
    gw = np.matmul(g, np.swapaxes(v, -1, -2))
    if grad_weights is not None:
        gw = gw + f64(grad_weights)
    gs = masked_softmax_vjp(w, gw, temperature=temp)
    return np.matmul(gs, k), np.matmul(np.swapaxes(gs, -1, -2), q), np.matmul(
        np.swapaxes(w, -1, -2), g)


def additive_attention(query, key, value, w_q, w_k, w_v, valid_length=None, b_q=None):
    """Bahdanau: score = w_v . tanh(W_q q + b_q + W_k k); returns (context, weights).

    w_q (H, C_q), w_k (H, C_k), w_v (1, H) in Dense (out, in) convention.
    """
    q, k, v = f64(query), f64(key), f64(value)
    qp = q @ f64(w_q).T + (0.0 if b_q is None else f64(b_q))
    kp = k @ f64(w_k).T
    feat = np.tanh(qp[:, :, None, :] + kp[:, None, :, :])       # (B, L_q, L_m, H)
    scores = feat @ f64(w_v)[0]                                  # (B, L_q, L_m)
    mask = None if valid_length is None else key_mask_from_valid_length(
        valid_length, q.shape[1], k.shape[1])
    weights = masked_softmax(scores, mask)
    return np.matmul(weights, v), weights


def additive_attention_vjp(query, key, value, w_q, w_k, w_v, grad_context, valid_length=None,
                           b_q=None):
    """Gradients dict: query, key, value, w_q, w_k, w_v."""
    q, k, v = f64(query), f64(key), f64(value)
    wq, wk, wv = f64(w_q), f64(w_k), f64(w_v)
    qp = q @ wq.T + (0.0 if b_q is None else f64(b_q))
    kp = k @ wk.T
    feat = np.tanh(qp[:, :, None, :] + kp[:, None, :, :])
    _, w = additive_attention(q, k, v, wq, wk, wv, valid_length, b_q)
    g = f64(grad_context)
    gw = np.matmul(g, np.swapaxes(v, -1, -2))
    gs = masked_softmax_vjp(w, gw)
    gfeat = gs[..., None] * wv[0]                                # (B, L_q, L_m, H)
    gpre = gfeat * (1.0 - feat ** 2)
    gqp, gkp = gpre.sum(axis=2), gpre.sum(axis=1)
    return dict(query=gqp @ wq, key=gkp @ wk, value=np.matmul(np.swapaxes(w, -1, -2), g),
                w_q=np.einsum('bih,bic->hc', gqp, q), w_k=np.einsum('bjh,bjc->hc', gkp, k),
                w_v=np.einsum('bijh,bij->h', feat, gs)[None])


def dense(x, weight, bias=None):
    """nn.Dense(flatten=False): x @ W^T + b."""
    out = f64(x) @ f64(weight).T
    return out if bias is None else out + f64(bias)


def multi_head_attention(query, key, value, num_heads, params, valid_length=None):
    """d2l MultiHeadAttention with given params dict: {q,k,v,o}_weight and optional _bias.

    Returns (out (B, L_q, units), weights (B, K, L_q, L_m)).
    """
    def proj(x, name):
        y = dense(x, params[name + '_weight'], params.get(name + '_bias'))
        b, t, units = y.shape
        return y.reshape(b, t, num_heads, units // num_heads).transpose(0, 2, 1, 3)

    q, k, v = proj(query, 'q'), proj(key, 'k'), proj(value, 'v')
    mask = None if valid_length is None else key_mask_from_valid_length(
        valid_length, q.shape[2], k.shape[2])
    ctx, _, weights = multi_head_dot_attn(q, k, v, mask=mask, scaled=True, layout='NKT')
    return dense(ctx, params['o_weight'], params.get('o_bias')), weights


# ----------------------------------------------------------------------------- compat attend
def sizes_mask(batch_size, n_q, n_c, sizes):
    """(B, M, N) 0/1: column j valid when j < sizes[b]."""
    return (np.arange(n_c)[None, None, :] < np.asarray(sizes)[:, None, None]) * np.ones(
        (batch_size, n_q, 1))


def attend(query, context, value=None, score='dot', normalize='softmax', context_sizes=None,
           context_mask=None):
    """The PyTorch-style attend; returns (weight, output). Fully masked softmax rows give zeros."""
    q, c = f64(query), f64(context)
    v = c if value is None else f64(value)
    s = q @ np.swapaxes(c, 1, 2) if score == 'dot' else f64(score(q, c))
    b, m, n = s.shape
    if normalize == 'softmax':
        if context_mask is not None:
            keep = np.isfinite(f64(context_mask))
            s = np.where(keep, s + np.where(keep, f64(context_mask), 0.0), -np.inf)
        elif context_sizes is not None:
            keep = sizes_mask(b, m, n, context_sizes) != 0
        else:
            keep = np.ones_like(s, dtype=bool)
        w = masked_softmax(s, keep)
    else:
        w = 1.0 / (1.0 + np.exp(-s)) if normalize == 'sigmoid' else s
        if context_mask is not None:
            w = f64(context_mask) * w
        elif context_sizes is not None:
            w = sizes_mask(b, m, n, context_sizes) * w
    return w, w @ v


def mask3d(value, sizes):
    """value with rows [i, sizes[i]:, :] set to 0."""
    x = f64(value).copy()
    for i, size in enumerate(sizes):
        x[i, size:, :] = 0.0
    return x


def fill_context_mask(shape, sizes, v_mask, v_unmask):
    """(B, M, N) filled with v_unmask, and v_mask at [i, :, sizes[i]:]."""
    out = np.full(shape, float(v_unmask))
    for i, size in enumerate(sizes):
        out[i, :, size:] = v_mask
    return out


# ----------------------------------------------------------------------------- gather
def select_vectors_by_position(data, positions):
    """out[i, j, ...] = data[i, positions[i, j], ...]."""
    x = f64(data)
    pos = np.asarray(positions).astype(np.int64)
    return x[np.arange(x.shape[0])[:, None], pos]


def select_vectors_by_position_vjp(data_shape, positions, grad_out):
    """Scatter-add of grad_out into a zero array shaped like data."""
    grad = np.zeros(data_shape)
    pos = np.asarray(positions).astype(np.int64)
    g = f64(grad_out)
    for i in range(pos.shape[0]):
        for j in range(pos.shape[1]):
            grad[i, pos[i, j]] += g[i, j]
    return grad


# ----------------------------------------------------------------------------- row-wise
def layer_norm(x, gamma, beta, eps=1e-5):
    """LayerNorm over the last axis (biased variance), float64."""
    x = np.asarray(x, np.float64)
    mean = x.mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(x.var(-1, keepdims=True) + eps) * gamma + beta


def layer_norm_vjp(x, gamma, grad_out, eps=1e-5):
    """(dx, dgamma, dbeta) of ``layer_norm`` for the output gradient ``grad_out``."""
    x = np.asarray(x, np.float64)
    rstd = 1.0 / np.sqrt(x.var(-1, keepdims=True) + eps)
    xhat = (x - x.mean(-1, keepdims=True)) * rstd
    g = grad_out * gamma
    dx = rstd * (g - g.mean(-1, keepdims=True) - xhat * (g * xhat).mean(-1, keepdims=True))
    rows = tuple(range(x.ndim - 1))
    return dx, (grad_out * xhat).sum(rows), grad_out.sum(rows)


_ERF = np.vectorize(math.erf)


def gelu(z):
    """The erf GELU z Phi(z), float64."""
    z = np.asarray(z, np.float64)
    return z * 0.5 * (1.0 + _ERF(z / math.sqrt(2.0)))


def gelu_vjp(z, grad_out):
    """d gelu / dz * grad_out: Phi(z) + z phi(z)."""
    z = np.asarray(z, np.float64)
    pdf = np.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)
    return grad_out * (0.5 * (1.0 + _ERF(z / math.sqrt(2.0))) + z * pdf)
