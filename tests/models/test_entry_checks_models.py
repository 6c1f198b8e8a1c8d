"""The models check a call's arrays before any graph runs: hybridized calls raise the same
ValueError as imperative ones; B = 0, T = 0 and empty sentences are refused on every mode; the
encoder copies valid_length to NumPy once per call."""
import mxnet as mx
import numpy as onp
import pytest
from mxnet import np

from block_utils import ints, rand
from conftest import HYBRID_MODES, hybridize_mode
from gluon_attention import Kernels, _checks
from gluon_attention.models.encoder import BertEncoder, TransformerEncoder, TransformerEncoderLayer
from gluon_attention.models.nli import Attend, DecomposableAttention
from gluon_attention.models.qa import ModelForQAConditional, QAInference

TINY = dict(vocab_size=13, units=8, hidden_size=12, num_layers=1, num_heads=2, max_length=8)


def _ids(batch, length, value=1):
    return ints(onp.full((batch, length), value))


def _bert_call(block, batch, length):
    return block(_ids(batch, length), _ids(batch, length, 0), ints([length] * batch))


def _tiny_bert(mode):
    """The tiny encoder in ``mode`` after a valid T = 8 call (the graph is built)."""
    block = BertEncoder(**TINY)
    block.initialize()
    hybridize_mode(block, mode)
    _bert_call(block, 1, 8)
    return block


def _message(call):
    with pytest.raises(ValueError) as err:
        call()
    return str(err.value)


def test_encoder_refuses_positions_beyond_max_length_when_hybridized_as_imperatively():
    expected = _message(lambda: _bert_call(_tiny_bert('imperative'), 1, 9))
    assert 'at most max_length=8. Received: token_ids.shape=(1, 9)' in expected
    for mode in ('hybridize', 'static'):
        assert _message(lambda: _bert_call(_tiny_bert(mode), 1, 9)) == expected


@pytest.mark.parametrize('mode', HYBRID_MODES)
@pytest.mark.parametrize('batch, length', [(0, 5), (2, 0)])
def test_encoder_refuses_empty_batch_or_sequence(mode, batch, length):
    block = _tiny_bert(mode)
    with pytest.raises(ValueError, match='the batch size B and the sequence length T must be '
                                         r'at least 1.*Received: token_ids.shape'):
        _bert_call(block, batch, length)


@pytest.mark.parametrize('mode', HYBRID_MODES)
def test_transformer_encoder_checks_width_and_lengths_when_hybridized(mode):
    block = TransformerEncoder(1, units=8, hidden_size=12, num_heads=2, dropout=0.0,
                               attention_dropout=0.0)
    block.initialize()
    hybridize_mode(block, mode)
    block(rand(2, 5, 8), ints([5, 2]))
    with pytest.raises(ValueError, match=r'width D=8.*Received: data.shape=\(2, 5, 6\)'):
        block(rand(2, 5, 6), ints([5, 2]))
    with pytest.raises(ValueError, match=r'Received: valid_length=\[6, 2\]'):
        block(rand(2, 5, 8), ints([6, 2]))
    with pytest.raises(ValueError, match='must be at least 1'):
        block(rand(0, 5, 8), ints([]))


@pytest.mark.parametrize('mode', HYBRID_MODES)
def test_encoder_checks_valid_length_once_per_call(mode, monkeypatch):
    """BertEncoder -> TransformerEncoder -> layers -> cells -> softmax: one check, one copy of
    valid_length to NumPy (there were three, one per level)."""
    block = _tiny_bert(mode)
    seen = []
    original = _checks.check_valid_length
    monkeypatch.setattr(_checks, 'check_valid_length',
                        lambda *a, **k: seen.append(1) or original(*a, **k))
    _bert_call(block, 2, 6)
    assert len(seen) == 1


def _attend(mode):
    block = Attend(5, dropout=0.0)
    block.initialize()
    hybridize_mode(block, mode)
    block(rand(2, 3, 4), rand(2, 5, 4), ints([3, 2]), ints([5, 1]))
    return block


@pytest.mark.parametrize('mode', HYBRID_MODES)
@pytest.mark.parametrize('empty', ['L_A', 'L_B', 'B'])
def test_alignment_refuses_an_empty_sentence_or_batch(mode, empty):
    batch, len_a, len_b = {'L_A': (2, 0, 5), 'L_B': (2, 3, 0), 'B': (0, 3, 5)}[empty]
    with pytest.raises(ValueError, match='the batch size B and both sentence lengths must be '
                                         'at least 1'):
        _attend(mode)(rand(batch, len_a, 4), rand(batch, len_b, 4), ints([0] * batch),
                      ints([0] * batch))


@pytest.mark.parametrize('mode', ['hybridize', 'static'])
def test_nli_classifier_checks_lengths_when_hybridized(mode):
    block = DecomposableAttention(20, embed_size=4, num_hiddens=4, dropout=0.0)
    block.initialize()
    hybridize_mode(block, mode)
    premise, hypothesis = _ids(2, 3), _ids(2, 4)
    block(premise, hypothesis, ints([3, 2]), ints([4, 1]))
    with pytest.raises(ValueError, match=r'Received: hypothesis_valid_length=\[5, 1\]'):
        block(premise, hypothesis, ints([3, 2]), ints([5, 1]))


def _qa_inputs(length=6):
    p_mask = np.ones((2, length))
    return [_ids(2, length), _ids(2, length, 0), ints([length, min(length, 3)]), p_mask]


def _qa_model():
    backbone = BertEncoder(**TINY)
    model = ModelForQAConditional(backbone, units=4, dropout=0.0)
    model.initialize()
    return model


@pytest.mark.parametrize('mode', ['hybridize', 'static'])
def test_qa_blocks_check_p_mask_positions_and_backbone_inputs_when_hybridized(mode):
    model = hybridize_mode(_qa_model(), mode)
    model(*_qa_inputs(), ints([0, 2]))
    with pytest.raises(ValueError, match=r'Received: start_position=\[0, 6\]'):
        model(*_qa_inputs(), ints([0, 6]))
    inference = hybridize_mode(QAInference(model, start_top_n=2, end_top_n=2), mode)
    inference(*_qa_inputs())
    bad_mask = _qa_inputs()[:3] + [np.full((2, 6), 2.0)]
    with pytest.raises(ValueError, match='p_mask must hold only 0 and 1'):
        inference(*bad_mask)
    with pytest.raises(ValueError, match='at most max_length=8'):
        inference(*_qa_inputs(9))
    with pytest.raises(ValueError, match=r'at least start_top_n and end_top_n'):
        inference(*_qa_inputs(1))
    mx.nd.waitall()


@pytest.mark.parametrize('mode', HYBRID_MODES)
@pytest.mark.parametrize('which', ['TransformerEncoderLayer', 'TransformerEncoder'])
def test_encoders_refuse_data_of_another_dtype_than_their_parameters(mode, which):
    """float64 data: the library's TypeError naming both dtypes, not MXNet's type inference
    error (imperative or hybridized); float16 data on a CPU still runs (in float32)."""
    block = (TransformerEncoderLayer(8, 12, 2) if which == 'TransformerEncoderLayer'
             else TransformerEncoder(1, 8, 12, 2))
    block.initialize()
    hybridize_mode(block, mode)
    data, lengths = rand(2, 3, 8), ints([3, 1])
    block(data, lengths)
    with pytest.raises(TypeError, match=r"{} takes data of its parameters' dtype float32.*"
                       r"Received: data\.dtype='float64'".format(which)):
        block(data.astype('float64'), lengths)
    assert block(data.astype('float16'), lengths).dtype == onp.float16


def test_fused_bert_encoder_refuses_parameters_cast_to_float64():
    block = BertEncoder(kernels=Kernels('composed', 'fused'), **TINY)
    block.initialize()
    block.cast('float64')
    with pytest.raises(TypeError, match=r"BertEncoder built with rowwise='fused' keeps float32 "
                       r"parameters.*"
                       r"Received: parameters dtype='float64'"):
        _bert_call(block, 1, 4)
