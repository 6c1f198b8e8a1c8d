"""The SQuAD fine-tuning step of GluonNLP 0.10 for ``scripts/squad_step_speed.py --impl
gluonnlp``: 0.10's ``BERTModel`` with the span classifier of its ``scripts/bert`` SQuAD model
(``Dense(2, flatten=False)`` over the sequence output), hybridized, the summed start and end
softmax cross-entropy, ``BERTAdam`` (weight decay 0.01) after clipping the gradients' global
norm to 1, as 0.10's ``finetune_squad.py`` steps. Its encoder holds the weights of our model
folder (:func:`jobs.bench.gluonnlp010.folder_to_010`); its dropout (0.1) applies to the
attention weights too, where ours and PyTorch's run without attention dropout. The word
embedding is frozen, as in the other implementations of the script. Glossary: B batch,
T sequence length, D hidden size.
"""
import os
import tempfile

import mxnet as mx

from .gluonnlp010 import build_010, folder_to_010, legacy

__all__ = ['gluonnlp_step']


class _SpanModel(mx.gluon.HybridBlock):
    """0.10's SQuAD model: (ids, token types, valid lengths) -> logits (B, T, 2)."""

    def __init__(self, bert, units):
        super().__init__()
        with self.name_scope():
            self.bert = bert
            self.span_classifier = mx.gluon.nn.Dense(2, flatten=False, in_units=units)

    def hybrid_forward(self, F, ids, types, valid):  # pylint: disable=arguments-differ
        return self.span_classifier(self.bert(ids, types, valid))


def _net(model_dir):
    with tempfile.TemporaryDirectory() as folder:
        name, sizes, vocab_size, params = folder_to_010(model_dir,
                                                        os.path.join(folder, 'net.params'))
        with legacy():
            net = _SpanModel(build_010(name, sizes, vocab_size, dropout=0.1), sizes['units'])
            net.bert.load_parameters(params)
    return net


def gluonnlp_step(model_dir, ids, spans, lr=2e-4):
    """A zero-argument callable: one training step of the 0.10 model on ``ids`` (B, T) NumPy
    (token types 0, every position valid) and ``spans`` (start (B,), end (B,) NumPy),
    returning the step's loss (the summed cross-entropy before the update, a float)."""
    from gluonnlp.utils import clip_grad_global_norm  # pylint: disable=import-outside-toplevel
    net = _net(model_dir)
    with legacy():
        net.span_classifier.initialize(mx.init.Normal(0.02))
        net.bert.word_embed.collect_params().setattr('grad_req', 'null')
        net.hybridize(static_alloc=True)
        params = [p for p in net.collect_params().values() if p.grad_req != 'null']
        trainer = mx.gluon.Trainer(net.collect_params(), 'bertadam',
                                   {'learning_rate': lr, 'epsilon': 1e-6, 'wd': 0.01})
        loss = mx.gluon.loss.SoftmaxCELoss()
        tokens = mx.nd.array(ids, dtype='float32')
        types = mx.nd.zeros_like(tokens)
        valid = mx.nd.array([ids.shape[1]] * ids.shape[0], dtype='float32')
        start, end = (mx.nd.array(s, dtype='float32') for s in spans)

    def step():
        with legacy():
            with mx.autograd.record():
                logits = net(tokens, types, valid)                       # (B, T, 2)
                total = (loss(logits[:, :, 0], start) + loss(logits[:, :, 1], end)).sum()
            total.backward()
            trainer.allreduce_grads()
            clip_grad_global_norm(params, 1.0)
            trainer.update(ids.shape[0])
            mx.nd.waitall()
        return float(total.asscalar())
    return step
