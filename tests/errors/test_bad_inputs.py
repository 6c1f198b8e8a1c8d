"""Bad input across the public API: one table of (what is wrong, call, exception type, message
fragments). Each call raises exactly that type (never a raw MXNetError), its message says
``Received:`` and contains every fragment (usually the offending name=value).

Calls that read or write files run in a fresh temporary working folder, so paths are relative.
"""
import json
from pathlib import Path

import mxnet as mx
import numpy as onp
import pytest
from mxnet import np
from mxnet.gluon import HybridBlock, nn

from block_utils import initialized, ints, rand
import gluon_attention as ga
from gluon_attention.data import snli, squad
from gluon_attention.data.squad_decode import best_span, decode_predictions
from gluon_attention.compat.attend import dot, fill_context_mask, mask3d
from gluon_attention.core.functional import (dot_attn_score, l2_normalize,
                                             select_vectors_by_position)
from gluon_attention.core import fused, fused_adamw
from gluon_attention.core.matmul import require_matmul_dtype
from gluon_attention.export import export_and_check, export_block, import_block, load
from gluon_attention.models.encoder import BertEncoder
from gluon_attention.models.nli import Aggregate, Attend, Compare, DecomposableAttention
from gluon_attention.models.qa import ModelForQAConditional, QAInference, qa_loss
from jobs.engine import checkpoints, common
from jobs.engine.distributed import DataParallel
from jobs.engine.loop import train_steps
from refusal import assert_refusal


@mx.util.use_np
class _Backbone(HybridBlock):
    """(tokens, token_types, valid_length) -> (B, T, 6) embeddings for the QA head."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.word = nn.Embedding(20, 6)

    def hybrid_forward(self, F, tokens, token_types, valid_length):
        scale = F.np.expand_dims(F.np.expand_dims(valid_length.astype('float32'), -1), -1)
        return self.word(tokens) + self.word(token_types) + 0.0 * scale


def _qa():
    return initialized(ModelForQAConditional(_Backbone(), units=4))


def _mha(*args, hybridize=False):
    block = initialized(ga.MultiHeadAttention(6, 2))
    if hybridize:
        block.hybridize(static_alloc=True)
    return block(*args)


def _mha_after_first_call(query):
    block = initialized(ga.MultiHeadAttention(6, 2))
    block(rand(2, 3, 4), rand(2, 5, 4), rand(2, 5, 4))
    return block(query, rand(2, 5, 4), rand(2, 5, 4))


def _bert():
    return initialized(BertEncoder(vocab_size=10, units=8, hidden_size=8, num_layers=1,
                                   num_heads=2))


def _file(name, text):
    Path(name).write_text(text, encoding='utf-8')
    return name


def _squad_json(answer_start=0, impossible=False):
    qa = {'id': 'q1', 'question': 'What?', 'is_impossible': impossible,
          'answers': [{'text': 'Alpha', 'answer_start': answer_start}]}
    return json.dumps({'data': [{'title': 'T', 'paragraphs': [
        {'context': 'Alpha beta gamma.', 'qas': [qa]}]}]})


def _attend_after_first_call(A):
    block = initialized(Attend(4))
    block(Q, K, ints([3, 3]), ints([5, 5]))
    return block(A, rand(2, 5, A.shape[-1]), ints([3, 3]), ints([5, 5]))


def _nli(hybridize=False):
    block = initialized(DecomposableAttention(100, 8, 8))
    if hybridize:
        block.hybridize()
    return block


def _engine(**options):
    """DataParallel over an initialised Dense layer with ``options``."""
    net = nn.Dense(2, in_units=3)
    net.initialize()
    return DataParallel(net.collect_params(), **options)


def _dpa(*args):
    return ga.DotProductAttention()(*args)


def _additive(*args):
    return initialized(ga.AdditiveAttention(4))(*args)



def _called_dense():
    """A hybridized Dense(2) called once on a (1, 3) float32 array: ready to export."""
    dense = nn.Dense(2)
    dense.initialize()
    dense.hybridize()
    dense(np.ones((1, 3)))
    return dense


def _exported_dense():
    """:func:`_called_dense` exported (input 'x', float32) and loaded back."""
    export_block(_called_dense(), 'dense', ['x'], ['float32'])
    return load('dense')


Q, K, V = rand(2, 3, 4), rand(2, 5, 4), rand(2, 5, 6)
Q4, K4, V4 = rand(2, 3, 3, 4), rand(2, 3, 5, 4), rand(2, 3, 5, 6)
S = rand(2, 3, 5)
HUGE = np.zeros((1, 1, 70000, 1))                            # 70000 x 70000 scores: > 2**31
EMB, PMASK = rand(2, 5, 6), np.array(onp.array([[1, 0, 1, 1, 0]] * 2), dtype='float32')
LOGP, ANS = np.log(np.full((2, 5), 0.2)), np.log(np.full((2, 2), 0.5))
BAD = [
    # ------------------------------------------------------------ masked softmax
    ('masked_softmax-mask-rank-below-scores',
     lambda: ga.masked_softmax(Q, np.ones((2, 4), dtype=bool)), ValueError, ['(2, 4)']),
    ('masked_softmax-mask-rank-above-scores',
     lambda: ga.masked_softmax(S, np.ones((2, 1, 1, 5), dtype=bool)), ValueError,
     ['(2, 3, 5)', 'mask.shape=(2, 1, 1, 5)']),
    ('masked_softmax-mask-transposed', lambda: ga.masked_softmax(S, np.ones((2, 5, 3))),
     ValueError, ['(2, 3, 5)', 'mask.shape=(2, 5, 3)']),
    ('masked_softmax-mask-one-half', lambda: ga.masked_softmax(Q, np.full((2, 3, 4), 0.5)),
     ValueError, ['0.5']),
    ('masked_softmax-mask-additive-minus-inf',
     lambda: ga.masked_softmax(Q, np.full((2, 3, 4), -onp.inf)), ValueError, ['-inf']),
    ('masked_log_softmax-mask-two', lambda: ga.masked_log_softmax(Q, np.full((2, 3, 4), 2.0)),
     ValueError, ['2.0']),
    ('masked_softmax-mask-numpy-array', lambda: ga.masked_softmax(Q, onp.ones((2, 3, 4))),
     TypeError, ['ndarray']),
    ('masked_softmax-scores-int32', lambda: ga.masked_softmax(ints([[1, 2]])), TypeError,
     ['int32']),
    ('masked_softmax-scores-numpy-array', lambda: ga.masked_softmax(onp.zeros((2, 3))),
     TypeError, ['ndarray']),
    ('masked_softmax-axis-out-of-range', lambda: ga.masked_softmax(Q, axis=5), ValueError,
     ['axis=5']),
    ('masked_softmax-axis-float', lambda: ga.masked_softmax(Q, axis=1.5), TypeError, ['1.5']),
    ('masked_log_softmax-axis-below-range', lambda: ga.masked_log_softmax(Q, axis=-4),
     ValueError, ['-4']),
    ('masked_softmax-temperature-zero', lambda: ga.masked_softmax(Q, temperature=0), ValueError,
     ['temperature=0']),
    ('masked_softmax-temperature-nan', lambda: ga.masked_softmax(Q, temperature=float('nan')),
     ValueError, ['nan']),
    ('masked_softmax-temperature-string', lambda: ga.masked_softmax(Q, temperature='hot'),
     TypeError, ['hot']),
    # ------------------------------------------------------------ multi_head_dot_attn, scores
    ('multi_head_dot_attn-layout-unknown',
     lambda: ga.multi_head_dot_attn(Q4, K4, V4, layout='NCHW'), ValueError, ['NCHW']),
    ('multi_head_dot_attn-batch-mismatch',
     lambda: ga.multi_head_dot_attn(Q4, rand(3, 3, 5, 4), rand(3, 3, 5, 6)), ValueError,
     ['(3, 3, 5, 4)']),
    ('multi_head_dot_attn-query-rank-3', lambda: ga.multi_head_dot_attn(Q, K, V), ValueError,
     ['(2, 3, 4)']),
    ('multi_head_dot_attn-mask-rank-4',
     lambda: ga.multi_head_dot_attn(Q4, K4, V4, np.ones((2, 1, 3, 5))), ValueError,
     ['(2, 1, 3, 5)']),
    ('multi_head_dot_attn-mask-wrong-key-length',
     lambda: ga.multi_head_dot_attn(Q4, K4, V4, np.ones((2, 3, 4))), ValueError, ['(2, 3, 4)']),
    ('multi_head_dot_attn-mask-one-half',
     lambda: ga.multi_head_dot_attn(Q4, K4, V4, np.full((2, 3, 5), 0.5)), ValueError, ['0.5']),
    ('multi_head_dot_attn-edge-scores-wrong-shape',
     lambda: ga.multi_head_dot_attn(Q4, K4, V4, None, rand(2, 3, 3, 4)), ValueError,
     ['(2, 3, 3, 4)']),
    ('multi_head_dot_attn-dropout-one', lambda: ga.multi_head_dot_attn(Q4, K4, V4, dropout=1.0),
     ValueError, ['1.0']),
    ('multi_head_dot_attn-scaled-with-empty-key-features',
     lambda: ga.multi_head_dot_attn(Q4[..., :0], K4[..., :0], V4), ValueError, ['=0']),
    ('multi_head_dot_attn-scores-beyond-int32',
     lambda: ga.multi_head_dot_attn(HUGE, HUGE, HUGE), ValueError, ['num_elements=4900000000']),
    ('multi_head_dot_attn-query-float64-key-float32',
     lambda: ga.multi_head_dot_attn(Q4.astype('float64'), K4, V4), TypeError,
     ["query.dtype='float64'", "key.dtype='float32'"]),
    ('multi_head_dot_attn-query-float16-key-float32',
     lambda: ga.multi_head_dot_attn(Q4.astype('float16'), K4, V4), TypeError,
     ["query.dtype='float16'"]),
    ('multi_head_dot_attn-edge-scores-float64',
     lambda: ga.multi_head_dot_attn(Q4, K4, V4, None, np.zeros((2, 3, 3, 5), dtype='float64')),
     TypeError, ["edge_scores.dtype='float64'"]),
    ('multi_head_dot_attn-edge-scores-numpy-array',
     lambda: ga.multi_head_dot_attn(Q4, K4, V4, None, onp.zeros((2, 3, 3, 5))), TypeError,
     ["edge_scores='ndarray'"]),
    ('multi_head_dot_attn-edge-scores-int32',
     lambda: ga.multi_head_dot_attn(Q4, K4, V4, None, np.zeros((2, 3, 3, 5), dtype='int32')),
     TypeError, ["edge_scores.dtype='int32'"]),
    ('dot_attn_score-query-float64-key-float32',
     lambda: dot_attn_score(np.ones((2, 3, 4), dtype='float64'), np.ones((2, 5, 4))),
     TypeError, ["query.dtype='float64'", "key.dtype='float32'"]),
    ('l2_normalize-eps-negative', lambda: l2_normalize(Q, -1, -1.0), ValueError,
     ['eps=-1.0']),
    ('l2_normalize-eps-zero', lambda: l2_normalize(Q, eps=0), ValueError, ['eps=0']),
    ('l2_normalize-data-int32', lambda: l2_normalize(ints([[1, 2]])), TypeError,
     ["data.dtype='int32'"]),
    ('l2_normalize-axis-out-of-range', lambda: l2_normalize(Q, axis=3), ValueError,
     ['axis=3']),
    ('dot_attn_score-layout-unknown', lambda: dot_attn_score(Q, K, layout='NCT'),
     ValueError, ['NCT']),
    ('dot_attn_score-batch-mismatch', lambda: dot_attn_score(Q, rand(3, 5, 4)), ValueError,
     ['(3, 5, 4)']),
    ('dot_attn_score-feature-mismatch', lambda: dot_attn_score(Q, rand(2, 5, 3)),
     ValueError, ['(2, 5, 3)']),
    ('dot_attn_score-tn-query-rank-4',
     lambda: dot_attn_score(rand(3, 2, 2, 4), rand(5, 2, 2, 4), layout='TN'), ValueError,
     ['(3, 2, 2, 4)']),
    ('select_vectors_by_position-batch-mismatch',
     lambda: select_vectors_by_position(Q, ints([[0, 3]])), ValueError, ['(1, 2)']),
    ('select_vectors_by_position-position-out-of-range',
     lambda: select_vectors_by_position(Q, ints([[0, 3], [1, 1]])), ValueError,
     ['[[0, 3], [1, 1]]']),
    ('select_vectors_by_position-positions-rank-1',
     lambda: select_vectors_by_position(Q, ints([0, 1])), ValueError, ['(2,)']),
    # ------------------------------------------------------------ mask builders
    ('gen_self_attn_mask-layout-unknown', lambda: ga.gen_self_attn_mask(Q, layout='NTC'),
     ValueError, ['NTC']),
    ('gen_self_attn_mask-attn_type-unknown',
     lambda: ga.gen_self_attn_mask(Q, attn_type='banana'), ValueError, ['banana']),
    ('gen_self_attn_mask-valid_length-above-length',
     lambda: ga.gen_self_attn_mask(Q, ints([4, 1])), ValueError, ['[4, 1]']),
    ('gen_self_attn_mask-valid_length-numpy-array',
     lambda: ga.gen_self_attn_mask(Q, onp.array([1, 2])), TypeError, ['ndarray']),
    ('gen_self_attn_mask-valid_length-batch-mismatch',
     lambda: ga.gen_self_attn_mask(Q, ints([1, 2, 3])), ValueError, ['(3,)']),
    ('gen_mem_attn_mask-layout-unknown',
     lambda: ga.gen_mem_attn_mask(K, ints([5, 5]), Q, layout='XY'), ValueError, ['XY']),
    ('gen_mem_attn_mask-mem_valid_length-above-length',
     lambda: ga.gen_mem_attn_mask(K, ints([6, 1]), Q), ValueError, ['[6, 1]']),
    ('gen_mem_attn_mask-data_valid_length-above-length',
     lambda: ga.gen_mem_attn_mask(K, ints([5, 1]), Q, ints([1, 4])), ValueError,
     ['[1, 4]']),
    ('gen_mem_attn_mask-mem_valid_length-rank-2',
     lambda: ga.gen_mem_attn_mask(K, ints([[5], [1]]), Q), ValueError, ['(2, 1)']),
    ('gen_mem_attn_mask-batch-mismatch',
     lambda: ga.gen_mem_attn_mask(K, ints([5, 1]), Q[:1]), ValueError,
     ['mem.shape=(2, 5, 4)', 'data.shape=(1, 3, 4)']),
    ('gen_mem_attn_mask-mem_valid_length-bool',
     lambda: ga.gen_mem_attn_mask(K, np.ones((2,), dtype=bool), Q), TypeError, ['bool']),
    ('combine_masks-shapes-do-not-broadcast',
     lambda: ga.combine_masks(np.ones((2, 3)), np.zeros((2, 4))), ValueError,
     ['shapes=[(2, 3), (2, 4)]']),
    ('combine_masks-value-two', lambda: ga.combine_masks(np.full((2, 3), 2.0)), ValueError,
     ['2.0']),
    ('combine_masks-no-mask', lambda: ga.combine_masks(), ValueError, ['num_masks=0']),
    # ------------------------------------------------------------ attention blocks
    ('DotProductAttention-batch-mismatch', lambda: _dpa(Q, rand(3, 5, 4), rand(3, 5, 6)),
     ValueError, ['(3, 5, 4)']),
    ('DotProductAttention-key-value-length-mismatch', lambda: _dpa(Q, K, rand(2, 4, 6)),
     ValueError, ['(2, 4, 6)']),
    ('DotProductAttention-feature-mismatch', lambda: _dpa(Q, rand(2, 5, 3), V), ValueError,
     ['(2, 5, 3)']),
    ('DotProductAttention-query-rank-4', lambda: _dpa(Q4, K4, V4), ValueError,
     ['(2, 3, 3, 4)']),
    ('DotProductAttention-valid_length-batch-mismatch', lambda: _dpa(Q, K, V, ints([5, 5, 5])),
     ValueError, ['(3,)']),
    ('DotProductAttention-valid_length-rank-3',
     lambda: _dpa(Q, K, V, ints(onp.ones((2, 3, 1)))), ValueError, ['(2, 3, 1)']),
    ('DotProductAttention-valid_length-above-length', lambda: _dpa(Q, K, V, ints([6, 1])),
     ValueError, ['[6, 1]']),
    ('DotProductAttention-valid_length-negative', lambda: _dpa(Q, K, V, ints([-1, 1])),
     ValueError, ['[-1, 1]']),
    ('DotProductAttention-query-float64-key-float32',
     lambda: _dpa(Q.astype('float64'), K, V, ints([5, 5])), TypeError,
     ["query.dtype='float64'", "value.dtype='float32'"]),
    ('DotProductAttention-valid_length-fractional',
     lambda: _dpa(Q, K, V, np.array([2.5, 1.0])), ValueError, ['2.5']),
    ('DotProductAttention-valid_length-bool',
     lambda: _dpa(Q, K, V, np.ones((2,), dtype=bool)), TypeError, ['bool']),
    ('DotProductAttention-scores-beyond-int32', lambda: _dpa(HUGE[0], HUGE[0], HUGE[0]),
     ValueError, ['4900000000']),
    ('DotProductAttention-dropout-one', lambda: ga.DotProductAttention(dropout=1.0),
     ValueError, ['1.0']),
    ('DotProductAttention-dropout-negative', lambda: ga.DotProductAttention(dropout=-0.1),
     ValueError, ['-0.1']),
    ('DotProductAttention-scaled-string', lambda: ga.DotProductAttention(scaled='yes'),
     TypeError, ["'yes'"]),
    ('AdditiveAttention-units-zero', lambda: ga.AdditiveAttention(0), ValueError,
     ['units=0']),
    ('AdditiveAttention-dropout-above-one', lambda: ga.AdditiveAttention(4, dropout=1.5),
     ValueError, ['1.5']),
    ('AdditiveAttention-batch-mismatch', lambda: _additive(Q, rand(3, 5, 4), rand(3, 5, 6)),
     ValueError, ['(3, 5, 4)']),
    ('AdditiveAttention-valid_length-above-length', lambda: _additive(Q, K, V, ints([6, 1])),
     ValueError, ['[6, 1]']),
    ('MultiHeadAttentionCell-layout-unknown',
     lambda: ga.MultiHeadAttentionCell(layout='NCHW'), ValueError, ['NCHW']),
    ('MultiHeadAttentionCell-units-not-divisible-by-heads',
     lambda: ga.MultiHeadAttentionCell(query_units=10, num_heads=3), ValueError, ['10']),
    ('MultiHeadAttentionCell-query_units-without-num_heads',
     lambda: ga.MultiHeadAttentionCell(query_units=12), ValueError, ['num_heads=None']),
    ('MultiHeadAttentionCell-num_heads-zero',
     lambda: ga.MultiHeadAttentionCell(query_units=12, num_heads=0), ValueError,
     ['num_heads=0']),
    ('MultiHeadAttentionCell-attention_dropout-one',
     lambda: ga.MultiHeadAttentionCell(attention_dropout=1.0), ValueError, ['1.0']),
    ('MultiHeadAttentionCell-use_einsum-int', lambda: ga.MultiHeadAttentionCell(use_einsum=1),
     TypeError, ['1']),
    ('MultiHeadAttentionCell-mask-rank-2', lambda: ga.MultiHeadAttentionCell(layout='NKT')(
        Q4, K4, V4, np.ones((2, 5)), None), ValueError, ['(2, 5)']),
    ('MultiHeadAttentionCell-valid_length-legacy-nd', lambda: ga.MultiHeadAttentionCell(
        layout='NKT')(Q4, K4, V4, None, None, mx.nd.array([5, 2])), TypeError,
     ['valid_length must be an mx.np array (numpy mode', 'as_np_ndarray',
      "valid_length='NDArray'"]),
    ('MultiHeadAttentionCell-valid_length-numpy', lambda: ga.MultiHeadAttentionCell(
        layout='NKT')(Q4, K4, V4, None, None, onp.array([5, 2])), TypeError,
     ['valid_length must be an mx.np array', 'mx.np.array', "valid_length='ndarray'"]),
    ('MultiHeadAttention-units-not-divisible-by-heads', lambda: ga.MultiHeadAttention(10, 3),
     ValueError, ['10']),
    ('MultiHeadAttention-units-zero', lambda: ga.MultiHeadAttention(0, 3), ValueError, ['0']),
    ('MultiHeadAttention-dropout-one', lambda: ga.MultiHeadAttention(6, 2, dropout=1.0),
     ValueError, ['dropout=1.0']),
    ('MultiHeadAttention-dropout-two', lambda: ga.MultiHeadAttention(6, 2, dropout=2),
     ValueError, ['2']),
    ('MultiHeadAttention-batch-mismatch', lambda: _mha(Q, rand(3, 5, 4), rand(3, 5, 6)),
     ValueError, ['(3, 5, 4)']),
    ('MultiHeadAttention-hybridized-batch-mismatch',
     lambda: _mha(Q, rand(3, 5, 4), rand(3, 5, 4), hybridize=True), ValueError, ['(3, 5, 4)']),
    ('MultiHeadAttention-valid_length-above-length', lambda: _mha(Q, K, V, ints([1, 9])),
     ValueError, ['[1, 9]']),
    ('MultiHeadAttention-query-float64', lambda: _mha(Q.astype('float64'), K, K), TypeError,
     ['float64']),
    ('MultiHeadAttention-feature-size-changed', lambda: _mha_after_first_call(rand(2, 3, 5)),
     ValueError, ['(2, 3, 5)']),
    # ------------------------------------------------------------ compat attend
    ('attend-batch-mismatch', lambda: ga.attend(Q, rand(3, 5, 4)), ValueError,
     ['(3, 5, 4)']),
    ('attend-dot-feature-mismatch', lambda: ga.attend(Q, rand(2, 5, 3)), ValueError,
     ['(2, 5, 3)']),
    ('attend-normalize-unknown', lambda: ga.attend(Q, K, normalize='relu'), ValueError,
     ['relu']),
    ('attend-score-unknown', lambda: ga.attend(Q, K, score='cosine'), ValueError,
     ['cosine']),
    ('attend-context_sizes-batch-mismatch', lambda: ga.attend(Q, K, context_sizes=[1, 2, 3]),
     ValueError, ['[1, 2, 3]']),
    ('attend-context_sizes-above-context-length',
     lambda: ga.attend(Q, K, context_sizes=[6, 2]), ValueError, ['[0, 5]', '[6, 2]']),
    ('attend-context_sizes-negative', lambda: ga.attend(Q, K, context_sizes=[-1, 2]),
     ValueError, ['[-1, 2]']),
    ('attend-context_sizes-fractional', lambda: ga.attend(Q, K, context_sizes=[1.5, 2]),
     TypeError, ['1.5']),
    ('attend-int32-arrays', lambda: ga.attend(Q.astype('int32'), K.astype('int32')), TypeError,
     ['query must be a float16, float32 or float64 array', "query.dtype='int32'"]),
    ('attend-int32-value', lambda: ga.attend(Q, K, V.astype('int32')), TypeError,
     ['value must be a float16, float32 or float64 array', "value.dtype='int32'"]),
    ('attend-mixed-float-dtypes', lambda: ga.attend(Q, K.astype('float64')), TypeError,
     ['query, context must share one float dtype', "context.dtype='float64'"]),
    ('attend-legacy-nd-query', lambda: ga.attend(Q.as_nd_ndarray(), K), TypeError,
     ['query must be an mx.np array', "query='NDArray'"]),
    ('mask3d-sizes-not-a-list', lambda: mask3d(V, 3), TypeError, ['3']),
    ('mask3d-sizes-negative', lambda: mask3d(V, [2, -1]), ValueError, ['-1']),
    ('fill_context_mask-mask-rank-2',
     lambda: fill_context_mask(np.zeros((2, 3)), [1, 2], 0, 1), ValueError, ['(2, 3)']),
    ('dot-rank-2', lambda: dot(rand(2, 3), rand(2, 3)), ValueError, ['(2, 3)']),
    # ------------------------------------------------------------ encoder
    ('BertEncoder-no-positions',
     lambda: _bert()(ints(onp.zeros((2, 0))), ints(onp.zeros((2, 0))), ints([0, 0])),
     ValueError, ['(2, 0)']),
    ('BertEncoder.from_pretrained-ctx-string', lambda: BertEncoder.from_pretrained(None, 'cpu'),
     TypeError, ["'cpu'"]),
    ('BertEncoder.from_pretrained-path-int', lambda: BertEncoder.from_pretrained(42), TypeError,
     ['int']),
    ('BertEncoder-matmul_dtype-float16',
     lambda: BertEncoder(vocab_size=10, units=8, hidden_size=8, num_layers=1, num_heads=2,
                         matmul_dtype='float16'), ValueError, ["'float16'", 'bfloat16']),
    ('BertEncoder.from_pretrained-matmul_dtype-bf16',
     lambda: BertEncoder.from_pretrained(None, matmul_dtype='bf16'), ValueError, ["'bf16'"]),
    # ------------------------------------------------------------ the kernel choice
    ('Kernels-attention-unknown', lambda: ga.Kernels(attention='flash'), ValueError,
     ["attention must be one of 'auto', 'composed', 'fused', 'chunked'", "attention='flash'"]),
    ('Kernels-rowwise-chunked', lambda: ga.Kernels(rowwise='chunked'), ValueError,
     ["rowwise must be one of 'auto', 'composed', 'fused'", "rowwise='chunked'"]),
    ('Kernels-matmul_dtype-float16', lambda: ga.Kernels(matmul_dtype='float16'), ValueError,
     ["matmul_dtype must be one of 'float32', 'bfloat16'", "matmul_dtype='float16'"]),
    ('Kernels-attention-bool', lambda: ga.Kernels(attention=True), TypeError,
     ['attention must be one of', 'attention=True']),
    ('Kernels-attention-fused-with-dropout',
     lambda: ga.Kernels(attention='fused').resolve(mx.cpu(), 0.1), ValueError,
     ["attention='fused' has no attention dropout", 'attention_dropout=0.1']),
    ('Kernels-attention-chunked-with-dropout',
     lambda: ga.Kernels(attention='chunked').resolve(mx.cpu(), 0.1), ValueError,
     ["attention='chunked' has no attention dropout", 'attention_dropout=0.1']),
    ('Kernels-attention-fused-on-gpu',
     lambda: ga.Kernels(attention='fused').resolve(mx.gpu(0)), ValueError,
     ["attention='fused' runs on CPUs only", "attention='composed'", 'gpu(0)']),
    ('Kernels-rowwise-fused-on-gpu',
     lambda: ga.Kernels(rowwise='fused').resolve([mx.cpu(), mx.gpu(0)]), ValueError,
     ["rowwise='fused' runs on CPUs only", "rowwise='composed'", 'gpu(0)']),
    ('Kernels-bfloat16-on-gpu',
     lambda: ga.Kernels(matmul_dtype='bfloat16').resolve(mx.gpu(0)), ValueError,
     ["matmul_dtype='bfloat16' runs on CPUs only", 'gpu(0)']),
    ('TransformerEncoder-kernels-string',
     lambda: ga.TransformerEncoder(1, 8, 16, 2, kernels='fused'), TypeError,
     ['kernels must be a gluon_attention.Kernels', 'str']),
    ('TransformerEncoder-fused_rowwise-yes',
     lambda: ga.TransformerEncoder(1, 8, 16, 2, fused_rowwise='yes'), TypeError,
     ["fused_rowwise='yes'"]),
    ('MultiHeadAttentionCell-backend-flash',
     lambda: ga.MultiHeadAttentionCell(backend='flash'), ValueError,
     ["backend must be one of", "backend='flash'"]),
    ('attention-backend-auto', lambda: ga.attention(Q4, K4, V4, backend='auto'), ValueError,
     ["backend must be one of 'composed', 'fused', 'chunked'", "backend='auto'"]),
    ('fused_dot_attn-matmul_dtype-float16',
     lambda: fused._fused_dot_attn(Q4, K4, V4, matmul_dtype='float16'), ValueError,
     ["matmul_dtype must be one of 'float32', 'bfloat16'", "matmul_dtype='float16'"]),
    ('AdditiveAttention-attention-fused',
     lambda: ga.AdditiveAttention(4, kernels=ga.Kernels('fused')), ValueError,
     ["this block runs attention 'composed'", "attention='fused'"]),
    ('DotProductAttention-fused-with-dropout',
     lambda: ga.DotProductAttention(0.1, kernels=ga.Kernels('fused')), ValueError,
     ["attention='fused' has no attention dropout"]),
    ('QAPredictor-bfloat16-on-gpu',
     lambda: ga.QAPredictor.from_folder('no-folder', ctx=mx.gpu(0),
                                        kernels=ga.Kernels(matmul_dtype='bfloat16')),
     ValueError, ["matmul_dtype='bfloat16' runs on CPUs only", 'gpu(0)']),
    ('QAPredictor-kernels-string',
     lambda: ga.QAPredictor.from_folder('no-folder', kernels='bfloat16'), TypeError,
     ['kernels must be a gluon_attention.Kernels', "kernels='str'"]),
    ('require_matmul_dtype-bfloat16-on-gpu',
     lambda: require_matmul_dtype('bfloat16', [mx.gpu(0)]), ValueError,
     ['CPUs only', 'gpu(0)']),
    ('BertEncoder-valid_length-missing',
     lambda: _bert()(ints([[1, 2]]), ints([[0, 0]])), TypeError, ['valid_length=None']),
    ('BertEncoder-token_ids-out-of-range',
     lambda: _bert()(ints([[1, 12]]), None, ints([2])), ValueError,
     ['[0, 10)', '(1, 12)']),
    ('TransformerEncoder-valid_length-missing',
     lambda: initialized(ga.TransformerEncoder(1, 8, 8, 2))(rand(1, 3, 8)), TypeError,
     ['valid_length=None']),
    # the encoder blocks take (data, valid_length, mask): a mask in second place is named
    ('TransformerEncoderLayer-mask-as-second-argument',
     lambda: initialized(ga.TransformerEncoderLayer(8, 8, 2))(
         rand(2, 3, 8), ga.gen_self_attn_mask(rand(2, 3, 8), ints([3, 1]))), TypeError,
     ['not a bool mask', 'mask.sum(axis=-1)', "valid_length.shape=(2, 3, 3)"]),
    ('TransformerEncoder-mask-as-second-argument',
     lambda: initialized(ga.TransformerEncoder(1, 8, 8, 2))(rand(2, 3, 8), np.ones((2, 3, 3))),
     ValueError, ['TransformerEncoder is called (data, valid_length, mask): its argument 2, '
                  'valid_length, holds integer lengths of shape (B,); a (B, T, T) mask goes '
                  'last', "shape (2, 3, 3), dtype float32"]),
    ('BertEncoder-per-query-lengths',
     lambda: _bert()(ints([[1, 2]]), None, ints([[2, 1]])), ValueError,
     ['BertEncoder is called (token_ids, token_types, valid_length, mask): its argument 3',
      'shape (1, 2), dtype int32']),
    ('BertEncoder-token_ids-only',
     lambda: _bert()(ints([[1, 2]])), TypeError,
     ['BertEncoder is called (token_ids, token_types, valid_length, mask): valid_length is '
      'required (token_types and mask may be None', 'valid_length=None']),
    ('TransformerEncoder-data-only',
     lambda: initialized(ga.TransformerEncoder(1, 8, 8, 2))(rand(1, 3, 8)), TypeError,
     ['TransformerEncoder is called (data, valid_length, mask): valid_length is required '
      '(mask may be None']),
    ('TransformerEncoderLayer-lengths-as-mask',
     lambda: initialized(ga.TransformerEncoderLayer(8, 8, 2))(rand(2, 3, 8), None, ints([3, 1])),
     ValueError, ['mask', '(2,)']),
    # ------------------------------------------------------------ QA head
    ('ModelForQAConditional-units-zero', lambda: ModelForQAConditional(_Backbone(), units=0),
     ValueError, ['units=0']),
    ('ModelForQAConditional-dropout-one',
     lambda: ModelForQAConditional(_Backbone(), dropout=1.0), ValueError, ['1.0']),
    ('QAInference-start_top_n-zero', lambda: QAInference(_qa(), start_top_n=0), ValueError,
     ['start_top_n=0']),
    ('QA-p_mask-wrong-length', lambda: _qa().get_start_logits(EMB, np.ones((2, 6))),
     ValueError, ['(2, 6)']),
    ('QA-p_mask-rank-1', lambda: _qa().get_answerable_logits(EMB, np.ones((5,))), ValueError,
     ['(5,)']),
    ('QA-p_mask-two', lambda: _qa().get_start_logits(EMB, np.full((2, 5), 2.0)), ValueError,
     ['2.0']),
    ('QA-start-position-out-of-range',
     lambda: _qa().get_end_logits(EMB, ints([[5], [0]]), PMASK), ValueError, ['5']),
    ('qa_loss-start_position-out-of-range',
     lambda: qa_loss(LOGP, LOGP, ANS, ints([5, 0]), ints([0, 0]), ints([0, 0])), ValueError,
     ['start_position']),
    ('qa_loss-end_position-negative',
     lambda: qa_loss(LOGP, LOGP, ANS, ints([1, 0]), ints([-1, 0]), ints([0, 0])), ValueError,
     ['end_position']),
    ('qa_loss-is_impossible-two',
     lambda: qa_loss(LOGP, LOGP, ANS, ints([1, 0]), ints([1, 0]), ints([2, 0])), ValueError,
     ['is_impossible']),
    ('qa_loss-batch-mismatch',
     lambda: qa_loss(LOGP, LOGP, ANS, ints([1, 0, 0]), ints([1, 0]), ints([0, 0])), ValueError,
     ['start_position']),
    # ------------------------------------------------------------ NLI blocks
    ('Attend-num_hiddens-zero', lambda: Attend(0), ValueError, ['num_hiddens=0']),
    ('Attend-dropout-one', lambda: Attend(4, dropout=1.0), ValueError, ['1.0']),
    ('Compare-num_hiddens-fractional', lambda: Compare(2.5), ValueError, ['2.5']),
    ('Aggregate-num_outputs-zero', lambda: Aggregate(4, 0), ValueError, ['num_outputs=0']),
    ('DecomposableAttention-vocab_size-zero', lambda: DecomposableAttention(0), ValueError,
     ['vocab_size=0']),
    ('Attend-batch-mismatch', lambda: initialized(Attend(4))(
        Q, rand(3, 5, 4), ints([3, 3]), ints([5, 5, 5])), ValueError, ['(3, 5, 4)']),
    ('Attend-valid_length-above-length',
     lambda: initialized(Attend(4))(Q, K, ints([4, 3]), ints([5, 5])), ValueError, ['[4, 3]']),
    ('Attend-valid_length-missing',
     lambda: initialized(Attend(4))(Q, K, None, ints([5, 5])), TypeError, ['None']),
    ('Attend-feature-size-changed', lambda: _attend_after_first_call(rand(2, 3, 6)),
     ValueError, ['(2, 3, 6)', 'expected C=4']),
    ('Attend-feature-sizes-differ',
     lambda: initialized(Attend(4))(Q, rand(2, 5, 6), ints([3, 3]), ints([5, 5])),
     ValueError, ['(2, 5, 6)']),
    ('DecomposableAttention-without-lengths', lambda: _nli()(ints([[1, 2]]), ints([[1, 2]])),
     TypeError, ['DecomposableAttention must be called with (premise, hypothesis, '
                 'premise_valid_length, hypothesis_valid_length)',
                 'missing premise_valid_length, hypothesis_valid_length',
                 'number of inputs=2']),
    ('DecomposableAttention-hybridized-without-hypothesis_valid_length',
     lambda: _nli(hybridize=True)(ints([[1, 2]]), ints([[1, 2]]), ints([2])), TypeError,
     ['missing hypothesis_valid_length', 'number of inputs=3']),
    ('DecomposableAttention-premise_valid_length-above-length',
     lambda: _nli()(ints([[1, 2]]), ints([[1, 2]]), ints([3]), ints([2])), ValueError,
     ['premise_valid_length must lie in [0, 2]', 'premise_valid_length=[3]']),
    ('DecomposableAttention-token-id-above-vocab',
     lambda: _nli()(ints([[1, 2, 150]]), ints([[1, 2]]), ints([3]), ints([2])), ValueError,
     ['token ids must lie in [0, 100)', '(1, 150)']),
    ('DecomposableAttention-token-id-negative',
     lambda: _nli()(ints([[1, 2]]), ints([[-5, 2]]), ints([2]), ints([2])), ValueError,
     ['[0, 100)', '(-5, 2)']),
    ('DecomposableAttention-token-id-fractional',
     lambda: _nli()(np.array([[1.0, 2.5]]), ints([[1, 2]]), ints([2]), ints([2])), TypeError,
     ["premise must be an integer array of token ids", "premise.dtype='float32'"]),
    ('DecomposableAttention-token-id-float-whole',
     lambda: _nli()(ints([[1, 2]]), np.array([[1.0, 2.0]]), ints([2]), ints([2])), TypeError,
     ["hypothesis must be an integer array of token ids", ".astype('int32')",
      "hypothesis.dtype='float32'"]),
    ('DecomposableAttention-hybridized-token-id-float',
     lambda: _nli(hybridize=True)(ints([[1, 2]]), np.array([[1.0, 2.0]]), ints([2]), ints([2])),
     TypeError, ["hypothesis.dtype='float32'"]),
    ('DecomposableAttention-hybridized-token-id-above-vocab',
     lambda: _nli(hybridize=True)(ints([[1, 100]]), ints([[1, 2]]), ints([2]), ints([2])),
     ValueError, ['(1, 100)']),
    ('DecomposableAttention-valid_length-rank-2',
     lambda: initialized(DecomposableAttention(9, 4, 4))(
         ints([[1, 2]]), ints([[1, 2, 3]]), ints([[2]]), ints([3])), ValueError, ['(1, 1)']),
    # ------------------------------------------------------------ data readers and decoding
    ('read_squad-missing-file', lambda: squad.read_squad('nope.json'), ValueError,
     ['nope.json']),
    ('read_squad-invalid-json', lambda: squad.read_squad(_file('bad.json', '{"data": [')),
     ValueError, ['error=']),
    ('read_squad-question-without-text', lambda: squad.read_squad(_file('nokey.json', json.dumps(
        {'data': [{'title': 'T', 'paragraphs': [{'context': 'c', 'qas': [{'id': 'x'}]}]}]}))),
     ValueError, ['keys=']),
    ('read_squad-question-lone-surrogate', lambda: squad.read_squad(_file('surrogate.json', (
        '{"data": [{"title": "T", "paragraphs": [{"context": "c", "qas": [{"id": "x", '
        '"question": "Who \\ud800 ruled?", "answers": [], "is_impossible": true}]}]}]}'))),
     ValueError, ["question id='x': question must be Unicode text",
                  'lone surrogate at character 4']),
    ('read_squad-answer_start-off-text',
     lambda: squad.read_squad(_file('offset.json', _squad_json(3))), ValueError,
     ['answer_start=3']),
    ('read_squad-impossible-with-answer',
     lambda: squad.read_squad(_file('imp.json', _squad_json(0, impossible=True))), ValueError,
     ['is_impossible=True']),
    ('default_data_path-unknown-name', lambda: squad.default_data_path('nope'), ValueError,
     ["'nope'", "'haystack-small'", "'v2.0-dev'"]),
    ('batchify-no-features', lambda: squad.batchify([]), ValueError, ['num_features=0']),
    ('read_snli_jsonl-unknown-label', lambda: snli.read_snli_jsonl(_file('l.jsonl', json.dumps(
        {'gold_label': 'maybe', 'sentence1': 'a', 'sentence2': 'b'}) + '\n')), ValueError,
     ["'maybe'", 'l.jsonl:1']),
    ('read_snli_jsonl-malformed-line',
     lambda: snli.read_snli_jsonl(_file('m.jsonl', '{"gold_label": \n')), ValueError,
     ['line 1 of']),
    ('read_snli_lines-missing-files', lambda: snli.read_snli_lines('dev'), ValueError,
     ['s1.dev']),
    ('default_data_path-missing-file', lambda: squad.default_data_path('v2.0-dev', '.'),
     ValueError, ['SQuAD file not found', "(data_dir); data_dir must be a folder holding it",
                  'GA_DATA_DIR']),
    ('best_span-max_answer_length-zero', lambda: best_span([0, 1], [0, 1], max_answer_length=0),
     ValueError, ['max_answer_length=0']),
    ('best_span-lengths-differ', lambda: best_span([0, 1, 2], [0, 1]), ValueError, ['(3,)']),
    ('decode_predictions-result-count', lambda: decode_predictions([], [], [None]), ValueError,
     ['num_results=1']),
    # ------------------------------------------------------------ jobs: context, checkpoints, export
    ('parse_ctx-unknown-device', lambda: common.parse_ctx('tpu0'), ValueError, ["'tpu0'"]),
    ('parse_ctx-repeated-context', lambda: common.parse_ctx('cpu,cpu'), ValueError,
     ["'cpu,cpu'"]),
    ('CheckpointManager-keep-zero', lambda: checkpoints.CheckpointManager('.', keep=0), ValueError,
     ['keep=0']),
    ('DataParallel-lr_scheduler-in-optimizer_params', lambda: _engine(
        optimizer_params={'lr_scheduler': mx.lr_scheduler.FactorScheduler(10)}), ValueError,
     ['train_steps(schedule=...)', 'Received: lr_scheduler=<mxnet.lr_scheduler.FactorScheduler']),
    ('DataParallel-lr_scheduler-on-the-optimizer', lambda: _engine(
        optimizer=mx.optimizer.SGD(lr_scheduler=mx.lr_scheduler.FactorScheduler(10))),
     ValueError, ['train_steps(schedule=...)']),
    ('train_steps-config-not-a-StepConfig', lambda: train_steps(
        None, None, None, [], None, {'seed': 0}), TypeError,
     ['config must be a StepConfig', "Received: config='dict'"]),
    ('import_block-missing-files', lambda: import_block('none'), ValueError, ['none']),
    ('load-float16-into-graph-exported-from-float32', lambda: _exported_dense()(
        np.ones((1, 3), dtype='float16')), TypeError,
     ['input x of the exported graph must be a float32 array', "x.dtype='float16'"]),
    ('export_block-names-and-dtypes-differ',
     lambda: export_block(ga.DotProductAttention(), 'x', ['a', 'b'], ['float32']),
     ValueError, ["['a', 'b']"]),
    ('export_block-not-a-block', lambda: export_block(len, 'x', ['a'], ['float32']), TypeError,
     ['block must be a HybridBlock', "block='builtin_function_or_method'"]),
    ('export_block-prefix-none', lambda: export_block(_called_dense(), None, ['a'], ['float32']),
     TypeError, ['prefix must be a str or path', 'prefix=None']),
    ('export_block-prefix-empty', lambda: export_block(_called_dense(), '', ['a'], ['float32']),
     ValueError, ['prefix must be a non-empty path prefix', "prefix=''"]),
    ('export_block-names-a-string', lambda: export_block(_called_dense(), 'x', 'data',
                                                         ['float32']), TypeError,
     ['input_names must be a list or tuple', "input_names='data'"]),
    ('export_block-name-not-str', lambda: export_block(_called_dense(), 'x', [0], ['float32']),
     TypeError, ['input_names[0] must be a str', 'input_names[0]=0']),
    ('export_block-names-repeated', lambda: export_block(_called_dense(), 'x', ['a', 'a'],
                                                         ['int32', 'int32']), ValueError,
     ['input names must be non-empty and distinct', "input_names[1]='a'"]),
    ('export_block-dtype-unknown', lambda: export_block(_called_dense(), 'x', ['a'],
                                                        ['float33']), ValueError,
     ["input_dtypes[0] must be one of 'float16', 'float32'", "input_dtypes[0]='float33'"]),
    ('export_block-dtype-object', lambda: export_block(_called_dense(), 'x', ['a'], [object]),
     ValueError, ["input_dtypes[0] must be one of 'float16'", "<class 'object'>"]),
    ('export_block-dtype-number', lambda: export_block(_called_dense(), 'x', ['a'], [32]),
     TypeError, ["input_dtypes[0] must be a dtype name such as 'int32'", 'input_dtypes[0]=32']),
    ('export_block-epoch-negative', lambda: export_block(_called_dense(), 'x', ['a'],
                                                         ['float32'], epoch=-1), ValueError,
     ['epoch must be an integer >= 0', 'epoch=-1']),
    ('export_block-not-called', lambda: export_block(nn.Dense(2), 'x', ['a'], ['float32']),
     ValueError, ['block must be hybridized and called once', "block='Dense'"]),
    ('export_block-names-fewer-than-inputs', lambda: export_block(
        _called_dense(), 'x', ['a', 'b'], ['float32', 'int32']), ValueError,
     ["input_names must name each of the graph's 1 inputs", "input_names=['a', 'b']"]),
    ('export_and_check-dtype-before-running', lambda: export_and_check(
        _called_dense(), 'x', [[onp.ones((1, 3))]], ['a'], ['text']), ValueError,
     ["input_dtypes[0]='text'"]),
    ('adamw_update-float16-grad', lambda: fused_adamw.adamw_update(
        mx.nd.zeros(3), mx.nd.zeros(3, dtype='float16'), mx.nd.zeros(3), mx.nd.zeros(3), 1.0,
        1.0, 1e-3), TypeError, ['grad must be a float32 mx.nd array on a CPU', 'float16']),
    ('adamw_update-shapes-differ', lambda: fused_adamw.adamw_update(
        mx.nd.zeros(3), mx.nd.zeros(4), mx.nd.zeros(3), mx.nd.zeros(3), 1.0, 1.0, 1e-3),
     ValueError, ['weight, grad, mean and var must have one shape', "'grad': (4,)"]),
]


@pytest.mark.parametrize('call,kind,fragments', [row[1:] for row in BAD],
                         ids=[row[0] for row in BAD])
def test_bad_input_raises_with_received(call, kind, fragments, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(Exception) as err:
        out = call()
        mx.nd.waitall()
        del out
    assert_refusal(err.value, kind, fragments)


def test_bad_input_ids_are_unique():
    ids = [row[0] for row in BAD]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


def test_accepted_neighbours_of_bad_inputs_give_the_expected_values():
    """The inputs next to refused ones still work, with the values they should give."""
    nli = _nli()
    hyp, lengths = ints([[4, 5]]), (ints([3]), ints([2]))
    as_int = nli(ints([[1, 2, 99]]), hyp, *lengths).asnumpy()
    as_int64 = nli(ints([[1, 2, 99]], 'int64'), hyp, *lengths).asnumpy()
    onp.testing.assert_array_equal(as_int64, as_int)
    bert, ids = _bert(), ints([[1, 2, 3], [4, 5, 6]])
    onp.testing.assert_array_equal(bert(ids, None, ints([3, 2])).asnumpy(),
                                   bert(ids, ints(onp.zeros((2, 3))), ints([3, 2])).asnumpy())
    full = ga.attend(Q, K, context_sizes=[5, 5]).asnumpy()
    onp.testing.assert_allclose(full, ga.attend(Q, K).asnumpy(), rtol=1e-6)
    mask = ga.combine_masks(None, np.ones((2, 1, 3)), np.array(onp.eye(4)[None, :, :1]))
    assert mask.shape == (2, 4, 3) and mask.asnumpy().sum() == 6
    assert ga.combine_masks(None, None) is None
