"""A GluonNLP 0.10 RoBERTa converted with its merges file gets a byte-level BPE tokenizer whose
ids are the ones worked out by hand from GPT-2's rules (the pattern splits ' world' off with its
space, which becomes 'Ġ'; merges apply lowest rank first) and the 0.10 vocabulary's order."""
import numpy as onp
from tokenizers import Tokenizer

import gluonnlp_peer as peer
from roberta_tiny import MODEL, TOKENS, convert


def test_roberta_with_merges_gets_its_bpe_tokenizer(tmp_path):
    net = peer.backbone(MODEL, len(TOKENS))
    inputs = peer.batch(onp.random.RandomState(2), len(TOKENS), types=False)
    peer.randomize(net, 2, lambda: peer.call(net, MODEL, *inputs))
    peer.save(net, tmp_path / 'net.params')
    result = convert(tmp_path / 'net.params', tmp_path, peer.sizes_of(MODEL))
    assert result['tokenizer']
    tokenizer = Tokenizer.from_file(str(tmp_path / 'out' / 'tokenizer.json'))
    one = tokenizer.encode('hello world')
    assert one.ids == [0, 11, 20, 2]                      # <s> hello Ġworld </s>
    assert one.offsets[1:3] == [(0, 5), (6, 11)]
    pair = tokenizer.encode('hello hello', 'world')       # 'Ġhello' is no token: Ġ + hello
    assert pair.ids == [0, 11, 12, 11, 2, 2, 13, 17, 19, 2]
