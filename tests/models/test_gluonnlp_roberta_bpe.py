"""A GluonNLP 0.10 RoBERTa converted with its merges file gets a byte-level BPE tokenizer whose
ids are the ones worked out by hand from GPT-2's rules (the pattern splits ' world' off with its
space, which becomes 'Ġ'; merges apply lowest rank first) and the 0.10 vocabulary's order."""
import json

import numpy as onp
from tokenizers import Tokenizer

import gluonnlp_peer as peer
from gluon_attention.convert import from_gluonnlp

MODEL = 'roberta_12_768_12'
TOKENS = ['<s>', '<pad>', '</s>', '<unk>', 'h', 'e', 'l', 'o', 'he', 'll', 'hell', 'hello', 'Ġ',
          'w', 'r', 'd', 'Ġw', 'or', 'Ġwor', 'ld', 'Ġworld', '<mask>']
MERGES = '#version: 0.2\nh e\nl l\nhe ll\nhell o\nĠ w\no r\nĠw or\nl d\nĠwor ld\n'


def _vocab_json():
    """0.10's RoBERTa vocabulary form (Vocab.to_json with its special tokens)."""
    return json.dumps({'idx_to_token': TOKENS, 'token_to_idx': {t: i for i, t in
                                                                enumerate(TOKENS)},
                       'unknown_token': '<unk>', 'padding_token': '<pad>',
                       'identifiers_to_tokens': {'bos_token': '<s>', 'eos_token': '</s>',
                                                 'mask_token': '<mask>'}})


def test_roberta_with_merges_gets_its_bpe_tokenizer(tmp_path):
    net = peer.backbone(MODEL, len(TOKENS))
    inputs = peer.batch(onp.random.RandomState(2), len(TOKENS), types=False)
    peer.randomize(net, 2, lambda: peer.call(net, MODEL, *inputs))
    peer.save(net, tmp_path / 'net.params')
    (tmp_path / 'net.vocab').write_text(_vocab_json(), encoding='utf-8')
    (tmp_path / 'merges.txt').write_text(MERGES, encoding='utf-8')
    result = from_gluonnlp(tmp_path / 'net.params', MODEL, tmp_path / 'net.vocab',
                           tmp_path / 'out', sizes=peer.sizes_of(MODEL),
                           merges_file=tmp_path / 'merges.txt')
    assert result['tokenizer']
    tokenizer = Tokenizer.from_file(str(tmp_path / 'out' / 'tokenizer.json'))
    one = tokenizer.encode('hello world')
    assert one.ids == [0, 11, 20, 2]                      # <s> hello Ġworld </s>
    assert one.offsets[1:3] == [(0, 5), (6, 11)]
    pair = tokenizer.encode('hello hello', 'world')       # 'Ġhello' is no token: Ġ + hello
    assert pair.ids == [0, 11, 12, 11, 2, 2, 13, 17, 19, 2]
