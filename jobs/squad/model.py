"""The model that ``run_squad.py train`` fine-tunes (and ``curve`` scores checkpoints of): the
pretrained encoder under new QA heads, its lowest layers optionally frozen.

The saved model folder that ``evaluate`` and ``predict`` load is :mod:`.folder`.
"""
import os

import mxnet as mx

from gluon_attention.core.kernels import Kernels
from gluon_attention.models.encoder import BertEncoder
from gluon_attention.models.qa import ModelForQAConditional
from gluon_attention.pipelines.folder import HEAD_FILE, has_head, load_head

from .data import check_freeze_layers

__all__ = ['build_model', 'freeze_lowest_layers']


def build_model(model_dir, config, contexts, matmul_dtype='float32'):
    """The pretrained encoder of ``model_dir`` (None: the embedded one) under QA heads: those of
    ``model_dir`` when it is a model folder saved by train and ``config.init_heads`` is
    ``'auto'`` (said on stdout), else new ones (normal, standard deviation 0.02). The encoder's
    dense products run in ``matmul_dtype`` (train passes ``config.matmul_dtype``; scoring
    checkpoints keeps float32).

    Raises
    ------
    ValueError
        A saved head tensor missing, unexpected or of the wrong shape.
    """
    # ctx decides whether 'auto' picks the fused (CPU-only) attention kernel
    backbone = BertEncoder.from_pretrained(model_dir, ctx=contexts, dropout=config.dropout,
                                           attention_dropout=config.attention_dropout,
                                           kernels=Kernels(matmul_dtype=matmul_dtype))
    model = ModelForQAConditional(backbone, units=backbone.config['units'],
                                  dropout=config.classifier_dropout)
    for head in (model.start_scores, model.end_scores, model.answerable_scores):
        head.initialize(mx.init.Normal(0.02), ctx=contexts)
    if config.init_heads == 'auto' and has_head(model_dir):
        load_head(model, model_dir)
        print('QA heads: from {}'.format(os.path.join(model_dir, HEAD_FILE)))
    backbone.collect_params().reset_ctx(contexts)
    if config.freeze_word_embeddings:
        backbone.word_embed.weight.grad_req = 'null'
    freeze_lowest_layers(backbone, config.freeze_layers)
    model.hybridize(static_alloc=True)
    return model


def freeze_lowest_layers(backbone, num_layers):
    """Fix the embeddings and the lowest ``num_layers`` encoder layers of ``backbone``
    (``grad_req='null'``); nothing changes for 0.

    Raises
    ------
    ValueError
        If ``num_layers`` exceeds the encoder's layers.
    """
    layers = backbone.encoder.layers
    check_freeze_layers(num_layers, len(layers))
    if num_layers == 0:
        return
    frozen = [backbone.word_embed, backbone.position_embed, backbone.embed_ln] + [
        layers[i] for i in range(num_layers)] + ([backbone.token_type_embed] if (
            backbone.config['num_token_types']) else [])
    for block in frozen:
        for param in block.collect_params().values():
            param.grad_req = 'null'
