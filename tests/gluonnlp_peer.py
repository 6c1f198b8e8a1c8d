"""GluonNLP 0.10 models built offline as peers: seeded, every parameter drawn at random (so that a
swapped LayerNorm gamma/beta or a transposed weight cannot pass), saved with save_parameters.

Architectures as the zoo builds them (``gluonnlp/model/bert.py`` hyper-parameters), at small sizes
for ``make test``: distinct D, H, max_length and V so that a wrong transpose fails.
"""
import contextlib
import importlib.util
import pathlib

import mxnet as mx
import numpy as onp
import pytest
from mxnet.gluon import HybridBlock, nn

nlp = pytest.importorskip('gluonnlp')
from gluonnlp.model import bert as gbert  # noqa: E402  pylint: disable=wrong-import-position

SMALL = dict(num_layers=2, units=16, hidden_size=24, num_heads=2, max_length=21)
FAMILY = {  # zoo name -> (model class kind, 0.10 BERTEncoder keywords)
    'bert_12_768_12': ('bert', dict(layer_norm_eps=1e-12, activation='gelu')),
    'bert_24_1024_16': ('bert', dict(layer_norm_eps=1e-12, activation='gelu')),
    'roberta_12_768_12': ('roberta', dict(layer_norm_eps=1e-5, activation='gelu')),
    'roberta_24_1024_16': ('roberta', dict(layer_norm_eps=1e-5, activation='gelu')),
    'distilbert_6_768_12': ('distilbert', dict(layer_norm_eps=1e-5, activation='gelu')),
    'ernie_12_768_12': ('bert', dict(layer_norm_eps=1e-5, activation='relu')),
}
WORDS = ('the cat sat on a mat while dogs ran far away from home and every bird sang '
         'songs of joy ##s ##ing ##ed un ##like').split()


@contextlib.contextmanager
def legacy():
    """0.10 blocks run outside numpy mode (the tests' conftest turns it on)."""
    with mx.util.np_array(False), mx.util.np_shape(False):
        yield


def tiny_vocab():
    """A 0.10 BERTVocab: 5 special tokens + the words above."""
    return nlp.vocab.BERTVocab(nlp.data.count_tokens(WORDS))


def sizes_of(model_name, sizes=None):
    """The sizes a peer is built with: SMALL (ERNIE one more position) or ``sizes``."""
    if sizes:
        return dict(sizes)
    return dict(SMALL, max_length=SMALL['max_length'] + model_name.startswith('ernie'))


def backbone(model_name, vocab_size, sizes=None, use_pooler=False):
    """A 0.10 BERTModel / RoBERTaModel / DistilBERTModel of the zoo family, not initialised."""
    kind, keywords = FAMILY[model_name]
    sizes = sizes_of(model_name, sizes)
    with legacy():
        return _build(kind, keywords, vocab_size, sizes, use_pooler)


def _build(kind, keywords, vocab_size, sizes, use_pooler):
    encoder = gbert.BERTEncoder(dropout=0.0, **sizes, **keywords)
    common = dict(vocab_size=vocab_size, units=sizes['units'], embed_size=sizes['units'])
    if kind == 'roberta':
        return gbert.RoBERTaModel(encoder, use_decoder=False, **common)
    if kind == 'distilbert':
        return gbert.DistilBERTModel(encoder, **common)
    return gbert.BERTModel(encoder, token_type_vocab_size=2, use_pooler=use_pooler,
                           use_decoder=False, use_classifier=False, **common)


class SquadModel(HybridBlock):
    """0.10's SQuAD model layout (scripts/bert of GluonNLP's repository): ``bert.`` then
    ``span_classifier``, a Dense(2, flatten=False) over the sequence output; returns (B, T, 2)."""

    def __init__(self, bert, prefix=None, params=None):
        super().__init__(prefix=prefix, params=params)
        with self.name_scope():
            self.bert = bert
            self.span_classifier = nn.Dense(2, flatten=False)

    def hybrid_forward(self, F, inputs, *rest):  # pylint: disable=arguments-differ
        """``(inputs, token_types, valid_length)``, or ``(inputs, valid_length)`` over a
        RoBERTa or DistilBERT (no token types; token types given are ignored)."""
        if not isinstance(self.bert, (gbert.RoBERTaModel, gbert.DistilBERTModel)):
            return self.span_classifier(self.bert(inputs, *rest))
        return self.span_classifier(self.bert(inputs, rest[-1]))


def randomize(block, seed, run):
    """Initialise ``block``, call ``run()`` once (deferred shapes) and draw every parameter at
    random: 2-D weights N(0, 1.2 / sqrt(fan-in)), vectors N(0, 0.3) (LayerNorm gamma around 1)."""
    mx.random.seed(seed)
    with legacy():
        block.initialize()
    run()
    rng = onp.random.RandomState(seed)
    with legacy():
        for name, param in sorted(block._collect_params_with_prefix().items()):  # pylint: disable=protected-access
            # 2-D weights: 1.2 / sqrt(fan-in), activations of one scale at every width
            scale = 1.2 / onp.sqrt(param.shape[1]) if len(param.shape) == 2 else 0.3
            noise = rng.normal(0, scale, param.shape)
            if name.endswith('gamma'):
                noise += 1.0
            param.set_data(mx.nd.array(noise.astype(onp.float32)))
    return block


def save(block, path):
    """``save_parameters`` as 0.10's scripts do."""
    with legacy():
        block.save_parameters(str(path))


def batch(rng, vocab_size, batch_size=3, length=9, types=True):
    """Padded ids (B, T) int32, token types (B, T) int32, valid lengths (B,) int32."""
    ids = rng.randint(0, vocab_size, (batch_size, length)).astype(onp.int32)
    token_types = (rng.rand(batch_size, length) > 0.5).astype(onp.int32) if types else \
        onp.zeros((batch_size, length), onp.int32)
    valid = onp.array([length, 4, 6, 1][:batch_size], onp.int32)
    return ids, token_types, valid


def call(block, model_name, ids, token_types, valid):
    """0.10's call of the model (RoBERTa and DistilBERT take no token types) -> numpy."""
    with legacy():
        args = [mx.nd.array(ids), mx.nd.array(token_types), mx.nd.array(valid)]
        if FAMILY[model_name][0] != 'bert':
            del args[1]
        return block(*args).asnumpy()


def finetune_span(net, inputs, seed, steps=3, learning_rate=0.05):
    """A few SGD steps of 0.10's SQuAD loss (finetune_squad.py: softmax cross-entropy of the
    gold start plus that of the gold end, over all positions) on ``inputs`` with seeded gold
    spans inside each valid length, so that a converted span head is trained, not random.
    Returns the losses (mean over the batch) before each step and after the last; the last is
    below the first."""
    ids, token_types, valid = inputs
    rng = onp.random.RandomState(seed)
    starts = onp.array([rng.randint(0, n) for n in valid])
    ends = onp.array([rng.randint(s, n) for s, n in zip(starts, valid)])
    with legacy():
        trainer = mx.gluon.Trainer(net.collect_params(), 'sgd', {'learning_rate': learning_rate})
        loss = mx.gluon.loss.SoftmaxCrossEntropyLoss()
        arrays = [mx.nd.array(x) for x in (ids, token_types, valid)]
        losses = []
        for _ in range(steps + 1):
            with mx.autograd.record():
                logits = net(*arrays)                                    # (B, T, 2)
                value = loss(logits[:, :, 0], mx.nd.array(starts)) + \
                    loss(logits[:, :, 1], mx.nd.array(ends))
            losses.append(float(value.mean().asscalar()))
            if len(losses) > steps:
                break
            value.backward()
            trainer.step(len(ids))
    assert losses[-1] < losses[0], losses
    return losses


def span_answer(net, model_name, features, context, n_best=20, max_answer_length=30):
    """(score, text) of a 0.10 SQuAD model's answer from its own logits on ``features`` (of one
    question about ``context``), float64, one feature at a time, under 0.10's decoding rule
    (finetune_squad.py with bert_qa_evaluate.predict: the top ``n_best`` starts and ends, pairs
    inside the context with the start at its maximum context, end >= start, at most
    ``max_answer_length`` tokens, best start + end logit)."""
    best = None
    for feature in features:
        logits = call(net, model_name, onp.array([feature.input_ids], onp.int32),
                      onp.array([feature.token_types], onp.int32),
                      onp.array([feature.valid_length], onp.int32))[0].astype(onp.float64)
        start, end = logits[:, 0], logits[:, 1]
        low, high = feature.context_range
        for s in onp.argsort(-start, kind='stable')[:n_best]:
            for e in onp.argsort(-end, kind='stable')[:n_best]:
                if not (low <= s < high and low <= e < high and s <= e < s + max_answer_length
                        and feature.token_is_max_context[s - low]):
                    continue
                text = context[feature.token_to_char[s - low][0]:feature.token_to_char[e - low][1]]
                if best is None or start[s] + end[e] > best[0]:
                    best = (start[s] + end[e], text)
    return best


def run_squad(name='run_squad'):
    """scripts/<name>.py (default run_squad.py) loaded as a module, so its ``main(argv)`` runs
    in this process."""
    script = pathlib.Path(__file__).resolve().parents[1] / 'scripts' / (name + '.py')
    spec = importlib.util.spec_from_file_location(name + '_script', str(script))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
