"""gluon_attention: attention for Apache MXNet 1.9.1 Gluon (numpy interface).

Conventions (README.md): mask polarity 1 = attend / may be selected, 0 = blocked; dimension
letters B batch, K heads, L_q / L_m query / memory length, C_k / C_v per-head sizes, D units;
attention layouts NKT, NTK, TNK; sequence layouts NT, TN. Arguments are checked once, at the
call a user makes (see :mod:`gluon_attention._checks`).
"""
__version__ = '0.1.0'

from .hardware import hardware, setup as _setup_hardware; _setup_hardware()  # noqa: E702 AMX, first
from .core.masking import (gen_self_attn_mask, gen_mem_attn_mask, valid_length_to_mask,
                           combine_masks, mask_fill_like)
from .core.softmax import masked_softmax, masked_log_softmax
from .core.functional import (l2_normalize, dot_attn_score, multi_head_dot_attn,
                              select_vectors_by_position)
from .core.chunked import chunked_dot_attn
from .core.fused import fused_dot_attn
from . import fused   # the documented path gluon_attention.fused (available(), library_path())
from .compat.attend import attend, mask3d, fill_context_mask, dot
from .core.cells import (AdditiveAttention, DotProductAttention, MultiHeadAttentionCell,
                         MultiHeadAttention)
from .models.encoder import BertEncoder, TransformerEncoder, TransformerEncoderLayer
from .models.nli import Attend, Compare, Aggregate, DecomposableAttention
from .models.qa import ModelForQAConditional, QAInference, qa_loss, qa_loss_parts

fused.load()   # registers the fused kernel's operator when it is built
