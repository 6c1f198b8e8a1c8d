"""Converted GluonNLP 0.10 SQuAD folders of the RoBERTa, DistilBERT and ERNIE families for the
tests of the paths a converted folder takes (tests/models/test_gluonnlp_family_*.py).

Each architecture is a tiny 0.10-layout SQuAD model (``bert.`` + ``span_classifier``, 2 layers,
D 16; :mod:`gluonnlp_peer`), randomised and fine-tuned a few steps, converted with its
vocabulary (RoBERTa: a tiny byte-level BPE vocabulary with its merges, :mod:`roberta_tiny`).
DistilBERT has no token type embedding and ERNIE uses ReLU and epsilon 1e-5; RoBERTa lays a
pair out ``<s> q </s></s> c </s>``.
"""
import collections

import numpy as onp

import gluonnlp_peer as peer
import roberta_tiny
from gluon_attention.convert import from_gluonnlp

MODELS = ('roberta_12_768_12', 'distilbert_6_768_12', 'ernie_12_768_12')
#: (question, context) in each vocabulary: RoBERTa's covers the letters h e l o w r d and spaces.
TEXTS = {'roberta': [('who held red', 'hello world he held red dew or old wool we owe her hello '
                                      'world or rod hero word'),
                     ('where were we', 'we were here where world held hello or red rowed old')],
         'wordpiece': [('where the cat sat', 'the dogs ran far away from home while the cat sat '
                                             'on a mat and every bird sang songs of joy'),
                       ('what birds sang', 'every bird sang songs of joy while the dogs ran far '
                                           'away and the cat sat'),
                       ('who ran home', 'a cat sat on the mat while every dog ran far away from '
                                        'home and the birds sang of joy')]}
Converted = collections.namedtuple('Converted', 'model net folder texts')


def texts_of(model):
    """The (question, context) pairs of ``model``'s vocabulary."""
    return TEXTS['roberta' if model.startswith('roberta') else 'wordpiece']


def convert_squad(model, tmp_path):
    """A tiny fine-tuned 0.10 SQuAD model of the architecture ``model`` (a zoo name of
    :data:`MODELS`), saved and converted under ``tmp_path`` (pathlib.Path): a Converted."""
    vocab = None if model.startswith('roberta') else peer.tiny_vocab()
    size = len(roberta_tiny.TOKENS) if vocab is None else len(vocab)
    with peer.legacy():
        net = peer.SquadModel(peer.backbone(model, size))
    inputs = peer.batch(onp.random.RandomState(7), size, length=10,
                        types=model.startswith('ernie'))
    peer.randomize(net, 7, lambda: peer.call(net, model, *inputs))
    peer.finetune_span(net, inputs, seed=7)
    peer.save(net, tmp_path / 'net.params')
    if vocab is None:
        folder = roberta_tiny.convert(tmp_path / 'net.params', tmp_path,
                                      peer.sizes_of(model))['output_dir']
    else:
        (tmp_path / 'net.vocab').write_text(vocab.to_json(), encoding='utf-8')
        folder = from_gluonnlp(tmp_path / 'net.params', model, tmp_path / 'net.vocab',
                               tmp_path / 'out', sizes=peer.sizes_of(model))['output_dir']
    return Converted(model, net, folder, texts_of(model))


