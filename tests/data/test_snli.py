"""SNLI readers (both formats), vocabulary, batching, metrics and GloVe (gluon_attention.data).

The real data files are checked against the counts of the shared data folder's README (skipped
when that folder is absent); the rest uses small hand-made inputs with known answers.
"""
import gzip
import hashlib
from pathlib import Path

import numpy as onp
import pytest
from mxnet.gluon import nn

from gluon_attention.data import snli
from gluon_attention.data.glove import load_glove_embedding, read_glove

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / 'shared' / 'data'
JSONL_A = SHARED / 'snli' / 'jsonl' / 'snli_1.0_dev_subsetA_1289.jsonl'
JSONL_B = SHARED / 'snli' / 'jsonl' / 'snli_1.0_dev_subsetB_1277.jsonl'
LINES = SHARED / 'snli' / 'esnli_infersent_format'
GLOVE = SHARED / 'embeddings'
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason='shared data folder not present')


@needs_shared
def test_jsonl_reader_counts_and_skips_dash():
    a, b = snli.read_snli(JSONL_A), snli.read_snli(JSONL_B)
    assert (len(a), a.num_skipped) == (1273, 16)
    assert a.label_counts() == {'entailment': 433, 'neutral': 421, 'contradiction': 419}
    assert (len(b), b.num_skipped) == (1254, 23)
    assert b.label_counts() == {'entailment': 405, 'neutral': 429, 'contradiction': 420}
    assert not JSONL_A.read_bytes().endswith(b'\n')          # the last line has no newline


@needs_shared
def test_line_format_reader_counts_and_prefix_forms():
    pairs = snli.read_snli(LINES / 'dev')
    assert len(pairs) == 9842 and pairs.num_skipped == 0
    assert pairs.label_counts() == {'entailment': 3329, 'contradiction': 3278, 'neutral': 3235}
    same = snli.read_snli(LINES / 's1.dev')
    assert same.premises == pairs.premises and same.labels == pairs.labels
    with pytest.raises(ValueError, match='Received: missing='):
        snli.read_snli(LINES / 'test')


@needs_shared
def test_default_split_removes_exactly_the_validation_pairs():
    valid = snli.concat_pairs([snli.read_snli(JSONL_A), snli.read_snli(JSONL_B)])
    train, removed = snli.remove_overlap(snli.read_snli(LINES / 'dev'), valid)
    assert (len(valid), valid.num_skipped, removed, len(train)) == (2527, 39, 2527, 7315)


@needs_shared
def test_packaged_resources_are_the_shared_originals():
    paths = snli.default_paths()
    for path in [paths['glove'], *paths['valid']] + [paths['train'].parent / (k + '.dev') for k in ('s1', 's2', 'labels')]:
        origin = (LINES if path.name.endswith('.dev') else
                  GLOVE if path.name.startswith('glove') else JSONL_A.parent) / path.name
        assert hashlib.sha256(path.read_bytes()).digest() == hashlib.sha256(origin.read_bytes()).digest()
    assert (paths['train'].parent / 'README.md').is_file()


def test_tokenize_and_normalize_agree_across_formats():
    raw = 'The man\'s dog isn\'t "happy".'
    ptb = "The man 's dog is n't `` happy '' . "
    assert snli.tokenize(raw) == snli.tokenize(ptb) == [
        'the', 'man', "'s", 'dog', 'is', "n't", '"', 'happy', '"', '.']
    assert snli.normalize_text(raw) == snli.normalize_text(ptb) == 'themansdogisnthappy'


def test_vocab_encode_bucket_and_pad(tmp_path):
    pairs = snli.NLIPairs(['a b c', 'a', 'b b d e f g'], ['a', 'c c', 'q'], [0, 1, 2])
    vocab = snli.Vocab.from_pairs(pairs, min_count=2)
    assert vocab.idx_to_token[:2] == ['<pad>', '<unk>'] and set(vocab.idx_to_token[2:]) == {'a', 'b', 'c'}
    vocab.save(tmp_path / 'v.json')
    assert snli.Vocab.load(tmp_path / 'v.json').idx_to_token == vocab.idx_to_token
    encoded = snli.encode_pairs(pairs, vocab, max_length=4)
    assert [len(x) for x in encoded[0]] == [3, 1, 4] and encoded[0][2].dtype == onp.int32
    batches = list(snli.iter_batches(encoded, 2, onp.random.default_rng(0)))
    assert sorted(onp.concatenate([b.index for b in batches]).tolist()) == [0, 1, 2]
    for b in batches:
        assert b.premise.shape == (len(b.index), b.premise_valid_length.max())
        assert (b.premise[0, b.premise_valid_length[0]:] == vocab.pad_id).all()


def test_classification_metrics_by_hand():
    m = snli.classification_metrics([0, 0, 1, 2, 2, 2], [0, 1, 1, 2, 2, 0], baseline_label=0)
    assert m['accuracy'] == pytest.approx(4 / 6)
    assert m['confusion_matrix'] == [[1, 1, 0], [0, 1, 0], [1, 0, 2]]
    assert m['per_class']['contradiction'] == {'precision': 0.5, 'recall': 1.0, 'f1': pytest.approx(2 / 3), 'support': 1}
    assert m['majority_baseline'] == {'label': 'entailment', 'accuracy': pytest.approx(2 / 6)}


@needs_shared
def test_glove_plain_and_gz_agree_and_fill_the_embedding():
    plain = read_glove(GLOVE / 'glove.6B.100d.sample.derived.txt')
    packed = read_glove(GLOVE / 'glove.6B.100d.sample.txt.gz')
    assert len(plain) == len(packed) == 100 and list(plain)[:3] == ['the', ',', '.']
    assert all((plain[w] == packed[w]).all() and plain[w].shape == (100,) for w in plain)
    embedding = nn.Embedding(4, 100)
    embedding.initialize()
    before = embedding.weight.data().asnumpy()
    report = load_glove_embedding(embedding, GLOVE / 'glove.6B.100d.sample.txt.gz',
                                  ['<pad>', '<unk>', 'the', 'zyzzyva'], {'the': 3, 'zyzzyva': 1})
    after = embedding.weight.data().asnumpy()
    assert (report['found'], report['coverage'], report['token_coverage']) == (1, 0.25, 0.75)
    onp.testing.assert_array_equal(after[2], plain['the'])
    onp.testing.assert_array_equal(after[[0, 1, 3]], before[[0, 1, 3]])
    with pytest.raises(ValueError, match=r'Received: weight.shape=\(4, 7\)'):
        small = nn.Embedding(4, 7)
        small.initialize()
        load_glove_embedding(small, GLOVE / 'glove.6B.100d.sample.txt.gz', ['<pad>', '<unk>', 'a', 'b'])


def test_glove_ragged_line_raises(tmp_path):
    path = tmp_path / 'bad.txt.gz'
    with gzip.open(path, 'wt') as handle:
        handle.write('a 1 2 3\nb 1 2\n')
    with pytest.raises(ValueError, match='Received: values on line 2=2'):
        read_glove(path)
