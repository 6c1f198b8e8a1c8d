"""Task heads over a BERT-family encoder's hidden states, in the two forms fine-tuned GluonNLP
0.10 models carry: a start/end span classifier (extractive QA, SQuAD 1.1 style: Devlin et al.,
2019, section 4.2) and a first-token classifier (sentence or sentence-pair classification).

Both read the encoder's output ``hidden`` (B, T, D) float32; parameters are named as written in
a model folder's ``head.safetensors`` (``span.weight``, ``pooler.weight``, ``classifier.weight``,
...), whose kind and sizes ``head_config.json`` records (:func:`read_head`).

Glossary: B batch, T sequence length, D model width, C classes.
"""
import json
import pathlib

import mxnet as mx
import numpy as onp
from mxnet.gluon import HybridBlock, nn

from .. import _checks
from .._optional import require

__all__ = ['SpanHead', 'PooledClassifier', 'HEAD_CONFIG', 'HEAD_FILE', 'read_head',
           'head_block']

HEAD_CONFIG = 'head_config.json'
HEAD_FILE = 'head.safetensors'


@mx.util.use_np
class SpanHead(HybridBlock):
    """Start and end logits of every position: one ``Dense(2)`` over the hidden states.

    Parameters
    ----------
    units : int
        D, the encoder width.

    Inputs: hidden float32 (B, T, D). Returns (start, end): float32 (B, T) each, unmasked
    (padded positions hold logits too; decoding reads the valid context positions only).
    Parameters: ``span.weight`` (2, D), ``span.bias`` (2,): row 0 start, row 1 end.
    """

    def __init__(self, units, prefix=None, params=None):
        super().__init__(prefix=prefix, params=params)
        units = _checks.check_positive_int('units', units)
        with self.name_scope():
            self.span = nn.Dense(2, flatten=False, in_units=units)

    def hybrid_forward(self, F, hidden):  # pylint: disable=arguments-differ
        logits = self.span(hidden)                                   # (B, T, 2)
        start, end = F.np.split(logits, 2, axis=-1)                  # (B, T, 1) each
        return F.np.squeeze(start, axis=-1), F.np.squeeze(end, axis=-1)


@mx.util.use_np
class PooledClassifier(HybridBlock):
    """Class logits from the first position: ``classifier(tanh(pooler(hidden[:, 0])))``.

    The pooled form of BERT's sequence classification (Devlin et al., 2019); GluonNLP 0.10's
    ``BERTClassifier`` (its ``pooler`` then ``classifier``) and ``RoBERTaClassifier`` (its two
    dense layers) both compute it.

    Parameters
    ----------
    units : int
        D, the encoder width.
    num_classes : int
        C.

    Inputs: hidden float32 (B, T, D). Returns logits float32 (B, C). Parameters:
    ``pooler.weight`` (D, D), ``pooler.bias`` (D,), ``classifier.weight`` (C, D),
    ``classifier.bias`` (C,).
    """

    def __init__(self, units, num_classes, prefix=None, params=None):
        super().__init__(prefix=prefix, params=params)
        units = _checks.check_positive_int('units', units)
        num_classes = _checks.check_positive_int('num_classes', num_classes)
        with self.name_scope():
            self.pooler = nn.Dense(units, activation='tanh', in_units=units)
            self.classifier = nn.Dense(num_classes, in_units=units)

    def hybrid_forward(self, F, hidden):  # pylint: disable=arguments-differ
        first = F.npx.reshape(F.npx.slice(hidden, begin=(None, 0, None), end=(None, 1, None)),
                              (-2, -3, -2))                  # (B, 1, D) -> (B, D)
        return self.classifier(self.pooler(first))                   # (B, C)


def read_head(folder):
    """The head of a model folder: ``(config, tensors)``, or ``(None, {})`` when it has none.

    Parameters
    ----------
    folder : str or os.PathLike

    Returns
    -------
    (dict or None, dict of str -> numpy.ndarray)
        ``head_config.json`` (``kind``: 'span' or 'classifier'; ``units``; ``num_classes``
        for a classifier) and the float32 tensors of ``head.safetensors``.

    Raises
    ------
    FileNotFoundError
        ``head_config.json`` without ``head.safetensors``.
    ValueError
        An unknown head kind or an unreadable ``head.safetensors``.
    """
    folder = pathlib.Path(folder)
    if not (folder / HEAD_CONFIG).is_file():
        return None, {}
    config = json.loads((folder / HEAD_CONFIG).read_text(encoding='utf-8'))
    if config.get('kind') not in ('span', 'classifier'):
        _checks.fail("head_config.json's kind must be 'span' or 'classifier'",
                     kind=config.get('kind'))
    if not (folder / HEAD_FILE).is_file():
        raise FileNotFoundError('a model folder with {} must hold {}. Received: path={!r}'.format(
            HEAD_CONFIG, HEAD_FILE, str(folder)))
    require('safetensors')
    from safetensors.numpy import load_file  # pylint: disable=import-outside-toplevel
    try:
        return config, load_file(str(folder / HEAD_FILE))
    except Exception as err:  # safetensors raises its own error type for corrupt files
        _checks.fail('{} is not a readable safetensors file ({})'.format(HEAD_FILE, err),
                     path=str(folder / HEAD_FILE))


def head_block(folder, ctx=None):
    """The head of a model folder as an initialised :class:`SpanHead` or
    :class:`PooledClassifier` (its saved weights loaded), or None when the folder has none.

    Raises
    ------
    ValueError
        As :func:`read_head`, or tensors whose names or shapes differ from the block's.
    """
    config, tensors = read_head(folder)
    if config is None:
        return None
    block = (SpanHead(config['units']) if config['kind'] == 'span'
             else PooledClassifier(config['units'], config['num_classes']))
    block.initialize(ctx=ctx)
    params = block._collect_params_with_prefix()  # pylint: disable=protected-access
    if set(params) != set(tensors):
        _checks.fail('{} must hold exactly {}'.format(HEAD_FILE, sorted(params)),
                     tensors=sorted(tensors))
    for name, param in params.items():
        if tuple(tensors[name].shape) != tuple(param.shape):
            _checks.fail('head tensor {} must have shape {}'.format(name, tuple(param.shape)),
                         **{name + '.shape': tuple(tensors[name].shape)})
        param.set_data(mx.np.array(onp.asarray(tensors[name], onp.float32), dtype='float32'))
    return block
