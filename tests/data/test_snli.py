"""SNLI readers (both formats), vocabulary, batching, metrics and GloVe (gluon_attention.data).

The real data files of the data folder (conftest.data_file: a missing file fails the test) are
checked against their published sha256 and counts (docs/data.md); the rest uses small hand-made
inputs with known answers.
"""
import gzip
import hashlib

import numpy as onp
import pytest
from conftest import data_dir, data_file
from mxnet.gluon import nn

from gluon_attention.data import snli
from gluon_attention.data.glove import load_glove_embedding, read_glove

JSONL_A = 'snli/jsonl/snli_1.0_dev_subsetA_1289.jsonl'
JSONL_B = 'snli/jsonl/snli_1.0_dev_subsetB_1277.jsonl'
LINES = 'snli/esnli_infersent_format'
GLOVE = 'embeddings/glove.6B.100d.sample.txt.gz'
#: sha256 of the default run's files (docs/data.md).
SHA256 = {
    LINES + '/s1.dev': '28a398b5478b10b4b851d4bb5b2e5767171519add6586015ed50b9436df11d00',
    LINES + '/s2.dev': 'a8c59709630b64ba103f7784c0cb7104a6baf23234562487264d9634714f5d2b',
    LINES + '/labels.dev': 'd164d72435c3289fe53cb01e983f7c06e104bf192c0cae9caf2e99bf2e15f974',
    JSONL_A: 'd28f65fc66b8943787b53ff1db0a8e69a9ca86ebafd1a140c741323402f3cf34',
    JSONL_B: '032b2d5720d402c7c521fb92363ba0d435839ad1bb822308ddec5b247be0482e',
    GLOVE: '156a9262a32df5a06156f0a4ee6e99730ec8c30142b223ede686bf283c8d07aa',
}


def test_jsonl_reader_counts_and_skips_dash():
    a, b = snli.read_snli(data_file(JSONL_A)), snli.read_snli(data_file(JSONL_B))
    assert (len(a), a.num_skipped) == (1273, 16)
    assert a.label_counts() == {'entailment': 433, 'neutral': 421, 'contradiction': 419}
    assert (len(b), b.num_skipped) == (1254, 23)
    assert b.label_counts() == {'entailment': 405, 'neutral': 429, 'contradiction': 420}
    assert not data_file(JSONL_A).read_bytes().endswith(b'\n')   # the last line has no newline


def test_line_format_reader_counts_and_prefix_forms():
    lines = data_file(LINES)
    pairs = snli.read_snli(lines / 'dev')
    assert len(pairs) == 9842 and pairs.num_skipped == 0
    assert pairs.label_counts() == {'entailment': 3329, 'contradiction': 3278, 'neutral': 3235}
    same = snli.read_snli(lines / 's1.dev')
    assert same.premises == pairs.premises and same.labels == pairs.labels
    with pytest.raises(ValueError, match=r'SNLI file not found: expected .*s1\.test.*'
                                         r'https://nlp\.stanford\.edu/projects/snli/'):
        snli.read_snli(lines / 'test')


def test_default_split_removes_exactly_the_validation_pairs():
    valid = snli.concat_pairs([snli.read_snli(data_file(JSONL_A)),
                               snli.read_snli(data_file(JSONL_B))])
    train, removed = snli.remove_overlap(snli.read_snli(data_file(LINES) / 'dev'), valid)
    assert (len(valid), valid.num_skipped, removed, len(train)) == (2527, 39, 2527, 7315)


def test_default_paths_are_the_published_copies_in_the_data_folder():
    paths = snli.default_paths(data_dir())
    assert paths['train'] == data_dir() / LINES / 'dev'
    assert paths['valid'] == [data_dir() / JSONL_A, data_dir() / JSONL_B]
    assert paths['glove'] == data_dir() / GLOVE
    for relative, digest in SHA256.items():
        assert hashlib.sha256(data_file(relative).read_bytes()).hexdigest() == digest, relative


def test_tokenize_and_normalize_agree_across_formats():
    raw = 'The man\'s dog isn\'t "happy".'
    ptb = "The man 's dog is n't `` happy '' . "
    assert snli.tokenize(raw) == snli.tokenize(ptb) == [
        'the', 'man', "'s", 'dog', 'is', "n't", '"', 'happy', '"', '.']
    assert snli.normalize_text(raw) == snli.normalize_text(ptb) == 'themansdogisnthappy'


def test_pair_digests_match_a_pair_across_formats_and_tell_the_sides_apart():
    raw = snli.NLIPairs(['The man\'s dog isn\'t "happy".', 'A cat.'], ['A dog.', 'A dog.'], [0, 1])
    ptb = snli.NLIPairs(["the man 's dog is n't `` happy '' . ", 'A dog .'], ['a dog .', 'A cat .'],
                        [2, 2])
    digests, others = snli.pair_digests(raw), snli.pair_digests(ptb)
    assert digests[0] == others[0] and len(set(digests + others[1:])) == 3   # swapped sides differ
    assert digests[1] == hashlib.sha1(b'acat\tadog').hexdigest()[:12]
    assert [len(d) for d in snli.pair_digests(raw, digits=16)] == [16, 16]


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


def test_glove_plain_and_gz_agree_and_fill_the_embedding():
    plain = read_glove(data_file('embeddings/glove.6B.100d.sample.derived.txt'))
    packed = read_glove(data_file(GLOVE))
    assert len(plain) == len(packed) == 100 and list(plain)[:3] == ['the', ',', '.']
    assert all((plain[w] == packed[w]).all() and plain[w].shape == (100,) for w in plain)
    embedding = nn.Embedding(4, 100)
    embedding.initialize()
    before = embedding.weight.data().asnumpy()
    report = load_glove_embedding(embedding, data_file(GLOVE),
                                  ['<pad>', '<unk>', 'the', 'zyzzyva'], {'the': 3, 'zyzzyva': 1})
    after = embedding.weight.data().asnumpy()
    assert (report['found'], report['coverage'], report['token_coverage']) == (1, 0.25, 0.75)
    onp.testing.assert_array_equal(after[2], plain['the'])
    onp.testing.assert_array_equal(after[[0, 1, 3]], before[[0, 1, 3]])
    with pytest.raises(ValueError, match=r'Received: weight.shape=\(4, 7\)'):
        small = nn.Embedding(4, 7)
        small.initialize()
        load_glove_embedding(small, data_file(GLOVE), ['<pad>', '<unk>', 'a', 'b'])


def test_glove_ragged_line_raises(tmp_path):
    path = tmp_path / 'bad.txt.gz'
    with gzip.open(path, 'wt') as handle:
        handle.write('a 1 2 3\nb 1 2\n')
    with pytest.raises(ValueError, match='Received: values on line 2=2'):
        read_glove(path)
