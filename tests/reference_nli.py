"""float64 NumPy oracle of the padding-masked decomposable-attention alignment (Attend).

Written from the semantics of Parikh et al. (2016) plus masks on both sides, independently of
gluon_attention. ``attend_forward`` returns the outputs and a cache; ``attend_vjp`` maps upstream
gradients of (beta, alpha) to gradients of A, B and the parameters of f (analytic backward).

f is a stack of ReLU Dense layers given as [(W (H_out, H_in), b (H_out,)), ...] (dropout is the
identity at inference). Shapes: A (B, L_A, C), B (B, L_B, C), lengths (B,).
"""
import numpy as np


def relu_mlp(x, layers):
    """f(x) and the activations [x, h1, h2, ...] for the backward pass."""
    acts = [x]
    for weight, bias in layers:
        acts.append(np.maximum(acts[-1] @ weight.T + bias, 0.0))
    return acts[-1], acts


def relu_mlp_vjp(acts, layers, grad):
    """Gradients (d input, [(d W, d b), ...]) of ``relu_mlp`` given d output."""
    param_grads = []
    for (weight, _), x_in, x_out in reversed(list(zip(layers, acts[:-1], acts[1:]))):
        grad = grad * (x_out > 0)
        flat_grad, flat_in = grad.reshape(-1, grad.shape[-1]), x_in.reshape(-1, x_in.shape[-1])
        param_grads.append((flat_grad.T @ flat_in, flat_grad.sum(0)))
        grad = grad @ weight
    return grad, param_grads[::-1]


def masked_softmax(x, mask, axis):
    """Softmax over ``axis`` restricted to mask == 1; fully masked slices give zeros."""
    x = np.where(mask, x, -np.inf)
    top = np.max(x, axis=axis, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    e = np.where(mask, np.exp(x - top), 0.0)
    total = e.sum(axis=axis, keepdims=True)
    return e / np.where(total > 0, total, 1.0)


def softmax_vjp(w, grad, axis):
    return w * (grad - (grad * w).sum(axis=axis, keepdims=True))


def pair_mask(valid_length_A, valid_length_B, L_A, L_B):
    """(B, L_A, L_B) bool: i < vl_A[b] and j < vl_B[b]."""
    rows = np.arange(L_A)[None, :, None] < np.asarray(valid_length_A)[:, None, None]
    cols = np.arange(L_B)[None, None, :] < np.asarray(valid_length_B)[:, None, None]
    return rows & cols


def attend_forward(A, B, valid_length_A, valid_length_B, layers):
    """(beta (B, L_A, C), alpha (B, L_B, C), cache)."""
    A, B = np.asarray(A, np.float64), np.asarray(B, np.float64)
    f_A, acts_A = relu_mlp(A, layers)
    f_B, acts_B = relu_mlp(B, layers)
    scores = f_A @ f_B.transpose(0, 2, 1)                         # (B, L_A, L_B)
    mask = pair_mask(valid_length_A, valid_length_B, A.shape[1], B.shape[1])
    w_b = masked_softmax(scores, mask, axis=2)                    # over B's positions
    w_a = masked_softmax(scores, mask, axis=1)                    # over A's positions
    beta = w_b @ B
    alpha = w_a.transpose(0, 2, 1) @ A
    cache = dict(A=A, B=B, f_A=f_A, f_B=f_B, acts_A=acts_A, acts_B=acts_B, w_b=w_b, w_a=w_a,
                 layers=layers)
    return beta, alpha, cache


def attend_vjp(cache, grad_beta, grad_alpha):
    """(d A, d B, [(d W, d b) per layer]) for upstream gradients of beta and alpha."""
    c = cache
    grad_A = c['w_a'] @ grad_alpha
    grad_B = c['w_b'].transpose(0, 2, 1) @ grad_beta
    grad_w_b = grad_beta @ c['B'].transpose(0, 2, 1)              # (B, L_A, L_B)
    grad_w_a = c['A'] @ grad_alpha.transpose(0, 2, 1)             # (B, L_A, L_B)
    grad_scores = softmax_vjp(c['w_b'], grad_w_b, 2) + softmax_vjp(c['w_a'], grad_w_a, 1)
    grad_f_A = grad_scores @ c['f_B']
    grad_f_B = grad_scores.transpose(0, 2, 1) @ c['f_A']
    d_A, params_A = relu_mlp_vjp(c['acts_A'], c['layers'], grad_f_A)
    d_B, params_B = relu_mlp_vjp(c['acts_B'], c['layers'], grad_f_B)
    params = [(wa + wb, ba + bb) for (wa, ba), (wb, bb) in zip(params_A, params_B)]
    return grad_A + d_A, grad_B + d_B, params
