"""GluonNLP 0.10 models converted (gluon_attention.convert) run as 0.10 runs them.

For every zoo architecture, a seeded random 0.10 model (small sizes here; the zoo sizes with
GA_FULL_TESTS=1) is saved with save_parameters, converted with the vocabulary 0.10 keeps, and
our encoder's hidden states equal 0.10's within 1e-5 on valid positions of a padded float32
batch; so do the logits of 0.10's classifiers and of its SQuAD model (start/end, same argmax).
"""
import mxnet as mx
import numpy as onp
import pytest

import gluonnlp_peer as peer
from gluon_attention.convert import ARCHITECTURES, from_gluonnlp, to_gluonnlp
from gluon_attention.models.encoder import BertEncoder
from gluon_attention.models.heads import head_block

ATOL = 1e-5
FULL_SIZES = {name: {k: config[k] for k in peer.SMALL} for name, config in ARCHITECTURES.items()}


def _save(block, tmp_path, vocab):
    params, vocab_file = tmp_path / 'net.params', tmp_path / 'net.vocab'
    peer.save(block, params)
    vocab_file.write_text(vocab.to_json(), encoding='utf-8')
    return params, vocab_file


def _ours(folder, ids, token_types, valid, **overrides):
    encoder = BertEncoder.from_pretrained(folder, **overrides)
    types = token_types if encoder.config['num_token_types'] else onp.zeros_like(token_types)
    arrays = [mx.np.array(x, dtype='int32') for x in (ids, types, valid)]
    return encoder(*arrays)


def _valid_diff(ours, theirs, valid):
    return max(onp.abs(ours[i, :n] - theirs[i, :n]).max() for i, n in enumerate(valid))


def _encoder_parity(model_name, tmp_path, sizes, seed=7):
    vocab = peer.tiny_vocab()
    rng = onp.random.RandomState(seed)
    inputs = peer.batch(rng, len(vocab), length=11)
    net = peer.backbone(model_name, len(vocab), sizes)
    peer.randomize(net, seed, lambda: peer.call(net, model_name, *inputs))
    theirs = peer.call(net, model_name, *inputs)
    params, vocab_file = _save(net, tmp_path, vocab)
    folder = tmp_path / 'converted'
    from_gluonnlp(params, model_name, vocab_file, folder,
                  sizes=peer.sizes_of(model_name, sizes))
    return folder, inputs, theirs


@pytest.mark.parametrize('model_name', sorted(ARCHITECTURES))
def test_encoder_matches_gluonnlp(model_name, tmp_path):
    folder, inputs, theirs = _encoder_parity(model_name, tmp_path, None)
    ours = _ours(folder, *inputs).asnumpy()
    assert _valid_diff(ours, theirs, inputs[2]) < ATOL
    fused = _ours(folder, *inputs, attention_dropout=0.0).asnumpy()  # 'auto': fused kernel
    assert _valid_diff(fused, theirs, inputs[2]) < ATOL


@pytest.mark.slow
@pytest.mark.parametrize('model_name', sorted(ARCHITECTURES))
def test_zoo_size_encoder_matches_gluonnlp(model_name, tmp_path):
    folder, inputs, theirs = _encoder_parity(model_name, tmp_path, FULL_SIZES[model_name])
    assert _valid_diff(_ours(folder, *inputs).asnumpy(), theirs, inputs[2]) < ATOL


def _head_parity(model_name, net, tmp_path, seed=11):
    """0.10 ``net`` (a classifier or the SQuAD model) randomised (the SQuAD model then
    fine-tuned a few SGD steps, as 0.10's finetune_squad.py trains it), saved, converted:
    (0.10's outputs, our encoder's hidden states, our head, inputs, folder)."""
    vocab = peer.tiny_vocab()
    inputs = peer.batch(onp.random.RandomState(seed), len(vocab), length=10)
    peer.randomize(net, seed, lambda: peer.call(net, model_name, *inputs))
    if isinstance(net, peer.SquadModel):
        peer.finetune_span(net, inputs, seed)
    theirs = peer.call(net, model_name, *inputs)
    params, vocab_file = _save(net, tmp_path, vocab)
    folder = tmp_path / 'converted'
    result = from_gluonnlp(params, model_name, vocab_file, folder,
                           sizes=peer.sizes_of(model_name))
    return theirs, _ours(folder, *inputs), head_block(folder), inputs, result


@pytest.mark.parametrize('model_name', ['bert_12_768_12', 'roberta_12_768_12'])
def test_classifier_logits_match_gluonnlp(model_name, tmp_path):
    vocab_size = len(peer.tiny_vocab())
    with peer.legacy():
        if model_name.startswith('bert'):
            net = peer.gbert.BERTClassifier(peer.backbone(model_name, vocab_size,
                                                          use_pooler=True), 3, dropout=0.1)
        else:
            net = peer.gbert.RoBERTaClassifier(peer.backbone(model_name, vocab_size), 3,
                                               dropout=0.1)
    theirs, hidden, head, inputs, result = _head_parity(model_name, net, tmp_path)
    assert result['head'] == 'classifier'
    ours = head(hidden).asnumpy()
    assert ours.shape == theirs.shape == (3, 3)
    assert onp.abs(ours - theirs).max() < ATOL
    assert (ours.argmax(-1) == theirs.argmax(-1)).all()
    with peer.legacy():    # back to 0.10: the same classifier built with dropout=0 loads it
        backbone = peer.backbone(model_name, vocab_size, use_pooler=True)
        fresh = (peer.gbert.BERTClassifier(backbone, 3) if model_name.startswith('bert')
                 else peer.gbert.RoBERTaClassifier(backbone, 3))
        fresh.load_parameters(to_gluonnlp(result['output_dir'], tmp_path / 'back.params'))
    onp.testing.assert_array_equal(peer.call(fresh, model_name, *inputs), theirs)


def _squad_model(vocab_size):
    with peer.legacy():
        return peer.SquadModel(peer.backbone('bert_12_768_12', vocab_size))


def test_squad_span_logits_match_gluonnlp(tmp_path):
    net = _squad_model(len(peer.tiny_vocab()))
    theirs, hidden, head, inputs, result = _head_parity('bert_12_768_12', net, tmp_path)
    assert result['head'] == 'span'
    start, end = (x.asnumpy() for x in head(hidden))
    for i, n in enumerate(inputs[2]):
        assert onp.abs(start[i, :n] - theirs[i, :n, 0]).max() < ATOL
        assert onp.abs(end[i, :n] - theirs[i, :n, 1]).max() < ATOL
        assert start[i, :n].argmax() == theirs[i, :n, 0].argmax()
        assert end[i, :n].argmax() == theirs[i, :n, 1].argmax()


def test_folder_back_to_gluonnlp_loads_and_answers_alike(tmp_path):
    vocab_size = len(peer.tiny_vocab())
    theirs, _, _, inputs, result = _head_parity('bert_12_768_12', _squad_model(vocab_size),
                                                tmp_path)
    back = to_gluonnlp(result['output_dir'], tmp_path / 'back.params')
    fresh = _squad_model(vocab_size)
    with peer.legacy():
        fresh.load_parameters(back)          # strict: no missing, no extra names
    onp.testing.assert_array_equal(peer.call(fresh, 'bert_12_768_12', *inputs), theirs)


def test_roberta_backbone_back_to_gluonnlp(tmp_path):
    folder, inputs, theirs = _encoder_parity('roberta_12_768_12', tmp_path, None)
    back = to_gluonnlp(folder, tmp_path / 'back.params')
    fresh = peer.backbone('roberta_12_768_12', len(peer.tiny_vocab()))
    with peer.legacy():
        fresh.load_parameters(back)
    onp.testing.assert_array_equal(peer.call(fresh, 'roberta_12_768_12', *inputs), theirs)


def test_squad_answer_text_equals_gluonnlp_decoded(tmp_path):
    """docs/examples/gluonnlp_squad_answer.py on the converted folder: the span and text that
    0.10's own logits give through the same decoder."""
    import importlib.util  # pylint: disable=import-outside-toplevel
    import pathlib  # pylint: disable=import-outside-toplevel
    from gluon_attention.data.squad_decode import best_span  # pylint: disable=import-outside-toplevel
    path = pathlib.Path(__file__).resolve().parents[2] / 'docs' / 'examples' / \
        'gluonnlp_squad_answer.py'
    spec = importlib.util.spec_from_file_location('gluonnlp_squad_answer', path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    net = _squad_model(len(peer.tiny_vocab()))
    _, _, _, _, result = _head_parity('bert_12_768_12', net, tmp_path)
    question, context = 'where the cat sat', 'the cat sat on a mat while dogs ran far away'
    text, start, end, ours_start, ours_end = example.answer(result['output_dir'], question,
                                                            context)
    from tokenizers import Tokenizer  # pylint: disable=import-outside-toplevel
    encoding = Tokenizer.from_file(result['output_dir'] + '/tokenizer.json').encode(question,
                                                                                    context)
    ids = onp.array([encoding.ids], onp.int32)
    theirs = peer.call(net, 'bert_12_768_12', ids, onp.array([encoding.type_ids], onp.int32),
                       onp.array([ids.shape[1]], onp.int32))[0]
    assert onp.abs(ours_start - theirs[:, 0]).max() < ATOL
    assert onp.abs(ours_end - theirs[:, 1]).max() < ATOL
    in_context = [int(t == 1 and not s) for t, s in zip(encoding.type_ids,
                                                         encoding.special_tokens_mask)]
    their_start, their_end, _ = best_span(theirs[:, 0], theirs[:, 1], in_context)
    assert (start, end) == (their_start, their_end)
    assert text == context[encoding.offsets[their_start][0]:encoding.offsets[their_end][1]]
    assert text and text in context


def test_pretraining_file_converts_without_its_pretraining_heads(tmp_path):
    """A zoo-style pretrained file (pooler, masked-LM decoder tied to the embedding, next
    sentence classifier) converts to the encoder alone, with 0.10's hidden states."""
    vocab = peer.tiny_vocab()
    inputs = peer.batch(onp.random.RandomState(5), len(vocab))
    sizes = peer.sizes_of('bert_12_768_12')
    with peer.legacy():
        net = peer.gbert.BERTModel(peer.gbert.BERTEncoder(dropout=0.0, **sizes),
                                   vocab_size=len(vocab), token_type_vocab_size=2,
                                   units=sizes['units'], embed_size=sizes['units'])

    def run():
        with peer.legacy():
            return net(*[mx.nd.array(x) for x in inputs], mx.nd.array([[0, 1]] * 3))

    peer.randomize(net, 5, run)
    with peer.legacy():
        theirs = run()[0].asnumpy()
    params, vocab_file = _save(net, tmp_path, vocab)
    with peer.legacy():
        names = mx.nd.load(str(params))
    assert {'decoder.3.bias', 'classifier.weight', 'pooler.weight'} <= set(names)
    result = from_gluonnlp(params, 'bert_12_768_12', vocab_file, tmp_path / 'out', sizes=sizes)
    assert result['head'] is None
    assert _valid_diff(_ours(tmp_path / 'out', *inputs).asnumpy(), theirs, inputs[2]) < ATOL
