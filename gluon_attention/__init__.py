"""gluon_attention: attention for Apache MXNet 1.9.1 Gluon (numpy interface).

Conventions (README.md): mask polarity 1 = attend / may be selected, 0 = blocked; dimension
letters B batch, K heads, L_q / L_m query / memory length, C_k / C_v per-head sizes, D units;
attention layouts NKT, NTK, TNK; sequence layouts NT, TN. Arguments are checked once, at the
call a user makes (see :mod:`gluon_attention._checks`).

The public API is :data:`__all__`; everything else is reached through its module. Importing the
package does two things besides defining names: it decides whether this process runs MXNet's
oneDNN with Intel AMX (:func:`hardware`; before oneDNN's first primitive, ``GA_AMX=0`` opts out)
and it registers the fused operators when they are built (so exported graphs naming them load).
"""
__version__ = '0.1.0'

from .hardware import hardware, setup as _setup_hardware; _setup_hardware()  # noqa: E702 AMX, first
from ._deprecated import module_getattr as _module_getattr
from .core.backends import attention
from .core.functional import multi_head_dot_attn
from .core.softmax import masked_softmax, masked_log_softmax
from .core.masking import gen_self_attn_mask, gen_mem_attn_mask, valid_length_to_mask, combine_masks
from .core.cells import (DotProductAttention, AdditiveAttention, MultiHeadAttentionCell,
                         MultiHeadAttention)
from .core.kernels import Kernels
from .core.matmul import set_matmul_dtype
from .core.fused_rowwise import ResidualLayerNorm
from .compat.attend import attend
from .models.encoder import TransformerEncoderLayer, TransformerEncoder, BertEncoder
from .models.nli import DecomposableAttention
from .models.qa import ModelForQAConditional, QAInference, qa_loss, qa_loss_parts
from . import fused   # the documented path gluon_attention.fused (available(), library_path())
from .compat import attend as _attend
from .core import chunked as _chunked, functional as _functional, masking as _masking
from .core import fused as _fused
from .models import nli as _nli

__all__ = [
    # attention functions
    'attention', 'multi_head_dot_attn', 'attend',
    # the softmax family and the mask builders
    'masked_softmax', 'masked_log_softmax', 'gen_self_attn_mask', 'gen_mem_attn_mask',
    'valid_length_to_mask', 'combine_masks',
    # attention blocks
    'DotProductAttention', 'AdditiveAttention', 'MultiHeadAttentionCell', 'MultiHeadAttention',
    # encoders and their kernel choice
    'TransformerEncoderLayer', 'TransformerEncoder', 'BertEncoder', 'ResidualLayerNorm',
    'Kernels', 'set_matmul_dtype',
    # task blocks
    'DecomposableAttention', 'ModelForQAConditional', 'QAInference', 'qa_loss',
    'qa_loss_parts', 'QAPredictor',
    # what this process runs on (the AMX decision made at import)
    'hardware',
]

_DEPRECATED = {   # old top-level name: (replacement, where it lives)
    'mask_fill_like': ('gluon_attention.core.masking.mask_fill_like',
                       lambda: _masking.mask_fill_like),
    'l2_normalize': ('gluon_attention.core.functional.l2_normalize',
                     lambda: _functional.l2_normalize),
    'dot_attn_score': ('gluon_attention.core.functional.dot_attn_score',
                       lambda: _functional.dot_attn_score),
    'select_vectors_by_position': ('gluon_attention.core.functional.select_vectors_by_position',
                                   lambda: _functional.select_vectors_by_position),
    'chunked_dot_attn': ("gluon_attention.attention(..., backend='chunked')",
                         lambda: _chunked._chunked_dot_attn),
    'fused_dot_attn': ("gluon_attention.attention(..., backend='fused')",
                       lambda: _fused._fused_dot_attn),
    'mask3d': ('gluon_attention.compat.attend.mask3d', lambda: _attend.mask3d),
    'fill_context_mask': ('gluon_attention.compat.attend.fill_context_mask',
                          lambda: _attend.fill_context_mask),
    'dot': ('gluon_attention.compat.attend.dot', lambda: _attend.dot),
    'Attend': ('gluon_attention.models.nli.Attend', lambda: _nli.Attend),
    'Compare': ('gluon_attention.models.nli.Compare', lambda: _nli.Compare),
    'Aggregate': ('gluon_attention.models.nli.Aggregate', lambda: _nli.Aggregate),
}
_deprecated_getattr = _module_getattr(__name__, _DEPRECATED)


def __getattr__(name):
    """``QAPredictor``, imported when first used (it needs the tokenizer package); the
    deprecated top-level names (DeprecationWarning)."""
    if name == 'QAPredictor':
        from .pipelines.predictor import QAPredictor   # pylint: disable=import-outside-toplevel
        return QAPredictor
    return _deprecated_getattr(name)


fused.load()   # registers the fused kernel's operator when it is built
