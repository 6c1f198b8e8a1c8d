"""The saved model folder of the SQuAD job: everything ``evaluate`` and ``predict`` need.

``<output-dir>/model/`` holds

- ``config.json`` + ``model.safetensors``: the fine-tuned encoder under the standard BERT tensor
  names and shapes (:func:`gluon_attention.models.checkpoint.write_checkpoint`), so other BERT
  tools load it too;
- ``qa_head.safetensors``: the start, end and answerable heads (names as in
  :class:`~gluon_attention.models.qa.ModelForQAConditional`, e.g. ``end_scores.0.weight``);
- the tokenizer files of the pretrained folder (``vocab.txt``, ``tokenizer.json``, ...);
- ``qa_config.json``: head sizes, sequence lengths, the null threshold with its source, and
  ``trained_titles`` and ``trained_paragraphs``: the articles and the paragraphs (short digests
  of the context texts) the model was trained on, with those of the folder it started from
  (``evaluate`` refuses them; a folder written before a record has none).

The encoder is read with ``BertEncoder.from_pretrained(folder)``; :func:`load_qa_model` puts the
saved head on it (:func:`load_head`; ``train --model-dir`` on such a folder starts from its heads
too, unless ``--init-heads new``).

The folder is written under a temporary name and renamed into place: a killed save leaves the
previous folder (or none), never a half-written one.
"""
import json
import os
import shutil

import mxnet as mx
import numpy as onp

from ..._checks import fail
from ...models.checkpoint import write_checkpoint
from ...models.qa import ModelForQAConditional
from ..engine.common import atomic_write_json
from .config import TrainConfig
from .data import default_model_folder

__all__ = ['QA_CONFIG', 'HEAD_FILE', 'TOKENIZER_FILES', 'check_model_folder', 'model_folder',
           'save_model_folder', 'read_qa_config', 'recorded_training', 'load_qa_model', 'has_head',
           'load_head']

QA_CONFIG = 'qa_config.json'
HEAD_FILE = 'qa_head.safetensors'
TOKENIZER_FILES = ('vocab.txt', 'tokenizer.json', 'tokenizer_config.json',
                   'special_tokens_map.json')
_ENCODER_FILES = ('config.json', 'model.safetensors')


def check_model_folder(folder, fine_tuned, weights=True):
    """Check that ``folder`` holds a model before any data is read.

    Parameters
    ----------
    folder : str
    fine_tuned : bool
        True: a folder written by :func:`save_model_folder` (encoder, head, qa_config.json,
        tokenizer); False: a pretrained encoder (config.json, model.safetensors, tokenizer).
    weights : bool
        False: only what answering through an exported graph reads from a fine-tuned folder
        (qa_config.json and the tokenizer), not the encoder and head files.

    Raises
    ------
    ValueError
        Naming the missing files: ``--model-dir must be ... Received: model_dir=...``.
    """
    needed = _ENCODER_FILES if weights else ()
    if fine_tuned:
        needed += (QA_CONFIG, HEAD_FILE) if weights else (QA_CONFIG,)
    missing = [name for name in needed if not os.path.isfile(os.path.join(folder, name))]
    if not any(os.path.isfile(os.path.join(folder, name)) for name in TOKENIZER_FILES[:2]):
        missing.append('tokenizer.json or vocab.txt')
    if missing:
        kind = 'a model folder saved by train' if fine_tuned else 'a pretrained BERT folder'
        inner = os.path.join(folder, 'model')     # a train run's folder holds its model/
        hint = '; did you mean {}, the model folder of that run?'.format(inner) if (
            os.path.isfile(os.path.join(inner, QA_CONFIG))) else ''
        fail('--model-dir must be {} with {} (missing: {}){}'.format(
            kind, ', '.join(needed), ', '.join(missing), hint), model_dir=folder)


def model_folder(config):
    """The folder ``--model-dir`` names, checked (ValueError naming the missing files): a
    pretrained encoder for ``train`` (None: the embedded one), a saved model folder for
    ``evaluate`` and ``predict`` (None: ``<output-dir>/model``)."""
    if isinstance(config, TrainConfig):
        folder = default_model_folder(config.model_dir)
    else:
        folder = config.model_dir or os.path.join(config.output_dir, 'model')
    check_model_folder(folder, fine_tuned=not isinstance(config, TrainConfig))
    return folder


def _head_params(model):
    params = model._collect_params_with_prefix()  # pylint: disable=protected-access
    return {name: param for name, param in params.items() if not name.startswith('backbone.')}


def save_model_folder(model, folder, tokenizer_dir, qa_config):
    """Write ``model`` (a trained :class:`ModelForQAConditional` over a :class:`BertEncoder`),
    the tokenizer files of ``tokenizer_dir`` and ``qa_config`` (a JSON dict) to ``folder``.

    Returns the folder's path.
    """
    from safetensors.numpy import save_file  # pylint: disable=import-outside-toplevel
    folder = os.path.abspath(folder)
    tmp, old = '{}.tmp{}'.format(folder, os.getpid()), '{}.old{}'.format(folder, os.getpid())
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        write_checkpoint(model.backbone, tmp)
        save_file({name: param.data().asnumpy() for name, param in _head_params(model).items()},
                  os.path.join(tmp, HEAD_FILE))
        for name in TOKENIZER_FILES:
            if os.path.isfile(os.path.join(tokenizer_dir, name)):
                shutil.copyfile(os.path.join(tokenizer_dir, name), os.path.join(tmp, name))
        atomic_write_json(os.path.join(tmp, QA_CONFIG), qa_config)
        _sync_folder(tmp)
        if os.path.exists(folder):
            os.replace(folder, old)
        os.replace(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
    return folder


def _sync_folder(folder):
    """Flush every file to disk and give it the permissions of a plain new file (safetensors
    writes its files readable by the owner only)."""
    umask = os.umask(0)
    os.umask(umask)
    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        os.chmod(path, 0o666 & ~umask)
        with open(path, 'rb') as handle:
            os.fsync(handle.fileno())


def read_qa_config(folder):
    """``qa_config.json`` of a saved model folder, as a dict."""
    with open(os.path.join(folder, QA_CONFIG), encoding='utf-8') as handle:
        return json.load(handle)


def recorded_training(folder):
    """What ``qa_config.json`` of ``folder`` records of its training data: a dict with
    ``trained_titles`` and ``trained_paragraphs``, each a list, or None for a folder without
    ``qa_config.json`` (a pretrained encoder) or written before the record."""
    config = read_qa_config(folder) if os.path.isfile(os.path.join(folder, QA_CONFIG)) else {}
    return {key: config.get(key) for key in ('trained_titles', 'trained_paragraphs')}


def load_qa_model(folder, backbone, contexts):
    """The QA model of a saved folder around its already loaded encoder.

    Parameters
    ----------
    folder : str
        Written by :func:`save_model_folder`.
    backbone : BertEncoder
        ``BertEncoder.from_pretrained(folder, ctx=contexts)``.
    contexts : list of mx.Context

    Returns
    -------
    (ModelForQAConditional, dict)
        The model (hybridized, on ``contexts``) and ``qa_config.json``.

    Raises
    ------
    ValueError
        A head tensor missing, unexpected or of the wrong shape.
    """
    qa_config = read_qa_config(folder)
    model = ModelForQAConditional(backbone, units=qa_config['head_units'],
                                  dropout=qa_config['head_dropout'])
    for head in (model.start_scores, model.end_scores, model.answerable_scores):
        head.initialize(mx.init.Zero(), ctx=contexts)
    load_head(model, folder)
    model.hybridize(static_alloc=True)
    return model, qa_config


def has_head(folder):
    """True when ``folder`` (a path or None) holds ``qa_head.safetensors``: a model folder saved
    by :func:`save_model_folder`, whose heads ``train --init-heads auto`` starts from."""
    return bool(folder) and os.path.isfile(os.path.join(folder, HEAD_FILE))


def load_head(model, folder):
    """Set the QA head parameters of ``model`` (initialized, not yet hybridized) from
    ``<folder>/qa_head.safetensors``.

    Raises
    ------
    ValueError
        A head tensor missing, unexpected or of the wrong shape.
    """
    from safetensors.numpy import load_file  # pylint: disable=import-outside-toplevel
    tensors, params = load_file(os.path.join(folder, HEAD_FILE)), _head_params(model)
    if set(tensors) != set(params):
        fail('{} must hold exactly the QA head tensors {}'.format(HEAD_FILE, sorted(params)),
             tensors=sorted(tensors))
    for name, param in params.items():
        value = onp.asarray(tensors[name], dtype=onp.float32)
        if len(param.shape) != value.ndim or any(
                want not in (-1, 0, got) for want, got in zip(param.shape, value.shape)):
            fail('{} tensor {} must have shape {} (-1: any)'.format(HEAD_FILE, name, param.shape),
                 **{name + '.shape': value.shape})
        param.set_data(mx.np.array(value))
