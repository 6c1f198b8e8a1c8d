"""Query-chunked multi-head attention: long sequences without an L_q x L_m score tensor.

:func:`_chunked_dot_attn` (deprecated public name ``chunked_dot_attn``; use
:func:`gluon_attention.attention` with ``backend='chunked'``) runs the composed attention (the
``'composed'`` backend, without raw scores) on slices of ``chunk_size`` query positions and
concatenates the contexts, so the forward pass holds the weights of one chunk, (B, K, chunk_size, L_m), at a time; it is the
``'chunked'`` backend of :mod:`~gluon_attention.core.backends` with its arguments checked. Each
query row's softmax only involves its own row, so the result is the unchunked result (same
operators, same order of additions within a row).

Memory under autograd: MXNet 1.9.1 keeps every chunk's weights for the backward pass (no
checkpointing of imperative ops), so forward+backward memory is still O(B*K*L_q*L_m).
Recomputing the chunk in the backward pass instead would cost one more forward of the chunk
(about a third more time) and needs a custom ``autograd.Function`` per chunk whose backward
re-runs the forward under ``autograd.record`` -- not provided here.

For key-padding lengths on a CPU in float32, the ``'fused'`` backend computes the same context
without any L_q x L_m tensor in either pass (and faster); this function is for general masks,
float16 and GPUs.

Glossary: B batch, K heads, L_q query length, L_m memory length, C_k / C_v per-head sizes.
"""
from .. import _checks
from .._deprecated import module_getattr

from . import layout as _layout
from .backends import _attend_in_chunks

__all__ = []


def _check_chunked(query, key, value, mask_or_valid_length, chunk_size, scaled,
                   query_head_units, layout, **_):
    _layout.check_layout(layout)
    _checks.check_positive_int('chunk_size', chunk_size)
    if _checks.is_symbol(query):
        _checks.fail('chunked_dot_attn runs imperatively (it slices by L_q); use '
                     'multi_head_dot_attn inside a graph', query='Symbol')
    lengths = mask = None
    if mask_or_valid_length is not None and mask_or_valid_length.ndim == 1:
        lengths = mask_or_valid_length
    elif mask_or_valid_length is not None and mask_or_valid_length.ndim == 3:
        mask = mask_or_valid_length
    elif mask_or_valid_length is not None:
        _checks.fail('mask_or_valid_length must be a (B,) valid length or a (B, L_q, L_m) '
                     'mask', **{'mask_or_valid_length.shape': mask_or_valid_length.shape})
    _layout.check_per_head_inputs(query, key, value, layout, mask=mask, valid_length=lengths,
                                  query_head_units=query_head_units, scaled=scaled)


@_checks.validated_by(_check_chunked)
def _chunked_dot_attn(query, key, value, mask_or_valid_length=None, chunk_size=512,
                      scaled=True, normalized=False, eps=1e-6, query_head_units=None,
                      layout='NKT', synchronize=True):
    """Multi-head dot-product attention computed ``chunk_size`` query positions at a time.

    Parameters
    ----------
    query, key, value : float arrays in ``layout``, as in
        :func:`~gluon_attention.core.functional.multi_head_dot_attn`.
    mask_or_valid_length : int (B,) valid lengths of the memory, a 0/1 (B, L_q, L_m) mask
        (L_q may be 1), or None.
    chunk_size : int
        Query positions per chunk (the last chunk may be shorter).
    scaled, normalized, eps, query_head_units, layout
        As in :func:`~gluon_attention.core.functional.multi_head_dot_attn` (no dropout: inference
        and exact training use).
    synchronize : bool
        Wait for each chunk before issuing the next, so MXNet's asynchronous engine cannot
        allocate the buffers of several chunks at once (the memory bound needs it).

    Returns
    -------
    context : (B, L_q, K*C_v) for NKT/NTK, (L_q, B, K*C_v) for TNK; equal to the context of
        ``multi_head_dot_attn`` on the same inputs, forward and gradients (scores and weights
        are not returned: they are never held whole).

    Raises
    ------
    ValueError
        Inside a graph (chunking needs L_q), on a bad ``chunk_size``, mask or layout, and as
        :func:`~gluon_attention.core.functional.multi_head_dot_attn` on its inputs (B = 0 or
        L_m = 0 included; L_q = 0 gives an empty context).

    Peak memory of the forward pass: about 5 buffers of B*K*chunk_size*L_m elements instead of
    5 of B*K*L_q*L_m.
    """
    given = mask_or_valid_length
    lengths = given if given is not None and given.ndim == 1 else None          # (B,)
    mask = given if given is not None and given.ndim == 3 else None             # (B, ., L_m)
    return _attend_in_chunks(query, key, value, mask, lengths, chunk_size, synchronize,
                             scaled=scaled, normalized=normalized, eps=eps,
                             query_head_units=query_head_units, layout=layout)


__getattr__ = module_getattr(__name__, {
    'chunked_dot_attn': ("gluon_attention.attention(..., backend='chunked')",
                         lambda: _chunked_dot_attn)})
