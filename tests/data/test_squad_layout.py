"""SQuAD features laid out as the tokenizer lays out a pair: BERT's three forms (BertProcessing,
a pair template, no post-processor) give the hand-written ``[CLS] q [SEP] c [SEP]`` features,
and RoBERTa's byte-level BPE tokenizer ``<s> q </s></s> c </s>`` with token types all 0, as
``tokenizers`` itself encodes the pair."""
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from tokenizers.implementations import BertWordPieceTokenizer

from gluon_attention.convert.bpe import bpe_tokenizer
from gluon_attention.data.squad import SquadExample, convert_examples_to_features
from gluon_attention.data.squad_layout import PairLayout, pair_layout
from gluon_attention.pipelines.features import eval_features
from roberta_tiny import TOKENS, write_merges

WORDS = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]', 'the', 'cat', 'sat', 'where', 'on', 'mat']
EXAMPLE = SquadExample('q', '', 'where sat', 'the cat sat on the mat', [], False)
#: (input_ids, token_types, p_mask, context_offset) of EXAMPLE's two chunks, worked out by hand:
#: max_seq_length 10 leaves 10 - 2 - 3 = 5 context tokens a chunk; stride 2; 6 context tokens.
BERT_CHUNKS = [
    ([2, 8, 7, 3, 5, 6, 7, 9, 5, 3], [0, 0, 0, 0, 1, 1, 1, 1, 1, 1],
     [1, 0, 0, 0, 1, 1, 1, 1, 1, 0], 4),
    ([2, 8, 7, 3, 7, 9, 5, 10, 3], [0, 0, 0, 0, 1, 1, 1, 1, 1], [1, 0, 0, 0, 1, 1, 1, 1, 0], 4),
]


def _wordpiece(processor):
    tokenizer = Tokenizer(models.WordPiece({t: i for i, t in enumerate(WORDS)},
                                           unk_token='[UNK]'))
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    if processor is not None:
        tokenizer.post_processor = processor
    return tokenizer


def _bert_tokenizers(tmp_path):
    (tmp_path / 'vocab.txt').write_text(''.join(w + '\n' for w in WORDS), encoding='utf-8')
    template = processors.TemplateProcessing(
        single='[CLS] $A [SEP]', pair='[CLS] $A [SEP] $B:1 [SEP]:1',
        special_tokens=[('[CLS]', 2), ('[SEP]', 3)])
    return {'bert-processing': BertWordPieceTokenizer(str(tmp_path / 'vocab.txt')),
            'template': _wordpiece(template), 'none': _wordpiece(None),
            'sequence': _wordpiece(processors.Sequence([processors.ByteLevel(), template]))}


def test_bert_tokenizers_give_the_hand_written_features(tmp_path):
    for name, tokenizer in _bert_tokenizers(tmp_path).items():
        features = convert_examples_to_features([EXAMPLE], tokenizer, max_seq_length=10,
                                                doc_stride=2, max_query_length=3,
                                                is_training=False)
        got = [(f.input_ids, f.token_types, f.p_mask, f.context_offset) for f in features]
        assert got == BERT_CHUNKS, name
        assert [f.valid_length for f in features] == [10, 9]
        assert pair_layout(tokenizer).num_special == 3


def _roberta(tmp_path):
    return bpe_tokenizer(dict(tokens=TOKENS, special={}), write_merges(tmp_path))


def test_roberta_features_are_laid_out_as_its_tokenizer_lays_out_a_pair(tmp_path):
    tokenizer = _roberta(tmp_path)
    layout = pair_layout(tokenizer)
    assert layout == PairLayout(((0, 0),), ((2, 0), (2, 0)), ((2, 0),), 0, 0)
    example = SquadExample('r', '', 'hello', 'hello world', [], False)
    [feature] = convert_examples_to_features([example], tokenizer, max_seq_length=12,
                                             doc_stride=2, max_query_length=3,
                                             is_training=False)
    assert feature.input_ids == [0, 11, 2, 2, 11, 20, 2]   # <s> hello </s></s> hello Ġworld </s>
    assert feature.input_ids == tokenizer.encode('hello', 'hello world').ids
    assert feature.token_types == [0] * 7
    assert feature.p_mask == [1, 0, 0, 0, 1, 1, 0]
    assert (feature.context_offset, feature.valid_length) == (4, 7)
    assert feature.token_to_char == [(0, 5), (6, 11)]


def test_roberta_chunks_leave_room_for_its_four_special_tokens(tmp_path):
    """At max_seq_length 12 and a 3-token question, a chunk holds 12 - 3 - 4 = 5 tokens; the
    evaluation stride is 12 - 3 - 4 = 5 (BERT's rule, 12 - 3 - 3, would skip no token but
    overrun the stride check)."""
    tokenizer = _roberta(tmp_path)
    context = 'hello' + ' world' * 7                    # hello, then Ġworld 7 times
    example = SquadExample('r', '', 'hello hello', context, [], False)   # hello Ġ hello
    features = eval_features([example], tokenizer, 12, 3)
    assert [f.valid_length for f in features] == [12, 10]
    assert [(f.chunk_start, f.chunk_length) for f in features] == [(0, 5), (5, 3)]
    with pytest.raises(ValueError, match=r'max_query_length - 4 \(the special tokens'):
        convert_examples_to_features([example], tokenizer, 12, 6, 3)
