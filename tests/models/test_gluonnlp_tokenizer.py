"""The tokenizer a GluonNLP 0.10 vocabulary converts into gives the ids of 0.10's BERTTokenizer.

The vocabulary is the uncased WordPiece one of the default pretrained encoder (all-MiniLM-L6-v2),
made into a 0.10 BERTVocab in its file order, as 0.10's model store keeps it (to_json); the text
is SQuAD paragraphs and questions, SNLI sentences, and CJK, accented and odd text.
"""
import json

import pytest

from conftest import data_file, squad_file
from gluon_attention._resources import default_model_dir
from gluon_attention.convert.vocab import read_vocab, write_tokenizer
from gluon_attention.data.squad_features import load_tokenizer

nlp = pytest.importorskip('gluonnlp')

ODD = ['東京は日本の首都です。北京欢迎你！', 'Café naïve résumé Ångström', '한국어 텍스트와 English',
       'tab\there\u00a0nbsp and\u200bzero-width', 'x' * 150 + ' short', 'e-mail: a.b@c.org (ok)?',
       '¿Qué? «quoted» — dash… ellipsis', 'Ünïcödé ÇAPS and 123,456.78 numbers']


def _texts():
    squad = json.loads(squad_file('v1.1-24articles').read_text(encoding='utf-8'))['data']
    texts = []
    for article in squad[:6]:
        for paragraph in article['paragraphs'][:8]:
            texts.append(paragraph['context'])
            texts.extend(qa['question'] for qa in paragraph['qas'][:5])
    with open(data_file('snli/jsonl/snli_1.0_dev_subsetA_1289.jsonl'), encoding='utf-8') as f:
        for _, line in zip(range(300), f):
            pair = json.loads(line)
            texts.extend((pair['sentence1'], pair['sentence2']))
    return texts + ODD


@pytest.fixture(scope='module')
def gluonnlp_vocab(tmp_path_factory):
    """(the 0.10 BERTVocab of the MiniLM vocabulary, its to_json file)."""
    tokens = (default_model_dir() / 'vocab.txt').read_text(encoding='utf-8').split('\n')[:-1]
    vocab = nlp.vocab.BERTVocab(nlp.data.count_tokens(tokens),
                                token_to_idx={t: i for i, t in enumerate(tokens)})
    assert vocab.idx_to_token == tokens
    path = tmp_path_factory.mktemp('vocab') / 'uncased.vocab'
    path.write_text(vocab.to_json(), encoding='utf-8')
    return vocab, path


def test_ids_equal_gluonnlp_bert_tokenizer(gluonnlp_vocab, tmp_path):
    vocab, path = gluonnlp_vocab
    assert write_tokenizer(read_vocab(path), tmp_path) is True       # inferred: uncased
    ours = load_tokenizer(tmp_path)
    theirs = nlp.data.BERTTokenizer(vocab, lower=True)
    texts = _texts()
    assert len(texts) > 800
    mismatched = [t for t in texts if ours.encode(t, add_special_tokens=False).ids
                  != vocab[theirs(t)]]
    assert not mismatched, mismatched[:3]


def test_vocab_txt_reads_as_the_json(gluonnlp_vocab):
    _, path = gluonnlp_vocab
    from_txt = read_vocab(default_model_dir() / 'vocab.txt')
    from_json = read_vocab(path)
    assert from_txt['tokens'] == from_json['tokens']
    assert from_txt['special'] == from_json['special'] == {
        'unknown_token': '[UNK]', 'padding_token': '[PAD]', 'cls_token': '[CLS]',
        'sep_token': '[SEP]', 'mask_token': '[MASK]'}
