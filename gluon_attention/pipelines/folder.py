"""A fine-tuned QA model folder, read by one loader: :func:`load_qa_folder`.

A folder (written by the SQuAD job's ``train``, ``<output-dir>/model/``) holds

- ``config.json`` + ``model.safetensors``: the fine-tuned encoder under the standard BERT tensor
  names and shapes (:func:`gluon_attention.models.checkpoint.write_checkpoint`), so other BERT
  tools load it too;
- ``qa_head.safetensors``: the start, end and answerable heads (names as in
  :class:`~gluon_attention.models.qa.ModelForQAConditional`, e.g. ``end_scores.0.weight``);
- the tokenizer files of the pretrained folder (``vocab.txt``, ``tokenizer.json``, ...);
- ``qa_config.json``: head sizes, sequence lengths, the null threshold with its source, and
  ``trained_titles`` and ``trained_paragraphs``: the articles and the paragraphs (short digests
  of the context texts) the model was trained on, with those of the folder it started from
  (a folder written before a record has none).

:func:`load_qa_folder` checks the files and reads ``qa_config.json`` once; the
:class:`QAFolder` it returns gives the tokenizer, and
:func:`~gluon_attention.pipelines.predictor.load_qa_model` the model (the encoder with
``BertEncoder.from_pretrained(folder)``, the saved head put on it by :func:`load_head`), from
what it read. Reading ``safetensors`` files needs the ``[hf]`` extra.

A folder converted from a GluonNLP 0.10 SQuAD model (:func:`gluon_attention.convert.from_gluonnlp`)
holds ``head_config.json`` (kind 'span') + ``head.safetensors`` instead of the two QA files: it
loads as a :class:`~gluon_attention.models.qa_span.ModelForQASpan`, its settings those of 0.10's
``finetune_squad.py`` (:data:`SPAN_DEFAULTS`, the sequence length capped by the encoder's
positions) with any of those keys ``head_config.json`` (or a ``qa_config.json`` beside it) sets.
"""
import dataclasses
import json
import os

import mxnet as mx
import numpy as onp

from .._checks import fail
from ..data import squad
from ..models import heads
from .._optional import require

__all__ = ['QA_CONFIG', 'HEAD_FILE', 'TOKENIZER_FILES', 'QAFolder', 'load_qa_folder',
           'check_model_folder', 'read_qa_config', 'recorded_training', 'has_head', 'head_params',
           'load_head', 'SPAN_DEFAULTS', 'is_span_folder', 'span_qa_config']

QA_CONFIG = 'qa_config.json'
HEAD_FILE = 'qa_head.safetensors'
TOKENIZER_FILES = ('vocab.txt', 'tokenizer.json', 'tokenizer_config.json',
                   'special_tokens_map.json')
_ENCODER_FILES = ('config.json', 'model.safetensors')
#: The settings of a converted 0.10 SQuAD folder (those of 0.10's ``finetune_squad.py``): SQuAD
#: 1.1 (never the null answer), 384 tokens a chunk, 64 a question, answers of 30 at most.
SPAN_DEFAULTS = dict(eval_max_seq_length=384, max_query_length=64, max_answer_length=30,
                     version_2_with_negative=0, null_threshold=None)


def _read_json(folder, name):
    with open(os.path.join(folder, name), encoding='utf-8') as handle:
        return json.load(handle)


def _encoder_config(folder):
    """The folder's ``config.json``, or {} without one (a server's archive has none)."""
    path = os.path.join(folder, 'config.json')
    return _read_json(folder, 'config.json') if os.path.isfile(path) else {}


def is_span_folder(folder):
    """True when ``folder`` holds a plain start/end head (``head_config.json`` of kind 'span',
    as :func:`gluon_attention.convert.from_gluonnlp` writes for a 0.10 SQuAD model) and no
    ``qa_head.safetensors``."""
    if os.path.isfile(os.path.join(folder, HEAD_FILE)) or not os.path.isfile(
            os.path.join(folder, heads.HEAD_CONFIG)):
        return False
    return _read_json(folder, heads.HEAD_CONFIG).get('kind') == 'span'


def span_qa_config(folder):
    """The ``qa_config`` of a span folder: :data:`SPAN_DEFAULTS` (the sequence length at most
    the encoder's ``max_position_embeddings`` rounded down to a multiple of 8, as batches are
    padded to one; the question at most half of it), then the keys
    of ``head_config.json`` and of an optional ``qa_config.json``; ``head`` is 'span'."""
    positions = _encoder_config(folder).get('max_position_embeddings', 512)
    length = min(SPAN_DEFAULTS['eval_max_seq_length'], int(positions) // 8 * 8 or int(positions))
    config = dict(SPAN_DEFAULTS, eval_max_seq_length=length,
                  max_query_length=min(SPAN_DEFAULTS['max_query_length'], length // 2))
    saved = _read_json(folder, heads.HEAD_CONFIG)
    if os.path.isfile(os.path.join(folder, QA_CONFIG)):
        saved = dict(saved, **_read_json(folder, QA_CONFIG))
    config.update({key: saved[key] for key in SPAN_DEFAULTS if key in saved})
    return dict(config, head='span')


def _missing_tokenizer(folder):
    """What to say when ``folder`` has no tokenizer: a RoBERTa folder needs its byte-level BPE
    files, which a GluonNLP 0.10 conversion cannot write."""
    raw = _encoder_config(folder)
    if raw.get('model_type') == 'roberta' or str(raw.get('gluonnlp_model', '')).startswith(
            'roberta'):
        return ("tokenizer.json: a RoBERTa folder needs its byte-level BPE tokenizer, built "
                "from the vocabulary and the merges file (merges.txt) of the pretrained "
                "RoBERTa (GluonNLP 0.10 keeps no merges file); convert again with "
                "gluon_attention.convert.from_gluonnlp(..., merges_file='merges.txt'), which "
                "writes it with the vocabulary's ids and RoBERTa's pair layout")
    return 'tokenizer.json or vocab.txt'


def check_model_folder(folder, fine_tuned, weights=True):
    """Check that ``folder`` holds a model before any data is read.

    Parameters
    ----------
    folder : str
    fine_tuned : bool
        True: a fine-tuned folder (encoder, head, qa_config.json,
        tokenizer); False: a pretrained encoder (config.json, model.safetensors, tokenizer).
    weights : bool
        False: only what answering through an exported graph reads from a fine-tuned folder
        (qa_config.json and the tokenizer), not the encoder and head files.

    Raises
    ------
    ValueError
        Naming the missing files: ``model_dir must be ... Received: model_dir=...``.
    """
    needed, other = _ENCODER_FILES if weights else (), ''
    if fine_tuned:
        head, other = _head_files(folder, weights)
        needed += head
    missing = [name for name in needed if not os.path.isfile(os.path.join(folder, name))]
    if not any(os.path.isfile(os.path.join(folder, name)) for name in TOKENIZER_FILES[:2]):
        missing.append(_missing_tokenizer(folder))
    if missing:
        kind = ('a model folder saved by train or converted from a GluonNLP 0.10 SQuAD model'
                if fine_tuned else 'a pretrained BERT folder')
        inner = os.path.join(folder, 'model')     # a train run's folder holds its model/
        hint = '; did you mean {}, the model folder of that run?'.format(inner) if (
            os.path.isfile(os.path.join(inner, QA_CONFIG))) else ''
        fail('model_dir must be {} with {}{} (missing: {}){}'.format(
            kind, ', '.join(needed), other, ', '.join(missing), hint), model_dir=folder)


def _head_files(folder, weights):
    """(the head files a fine-tuned ``folder`` needs, the other form's as text or ''): those of
    a converted span head for a span folder, else those train writes; a folder that holds
    neither form's files (no model yet) is told both."""
    span = (heads.HEAD_CONFIG, heads.HEAD_FILE) if weights else (heads.HEAD_CONFIG,)
    if is_span_folder(folder):
        return span, ''
    trained = (QA_CONFIG, HEAD_FILE) if weights else (QA_CONFIG,)
    if any(os.path.isfile(os.path.join(folder, name))
           for name in (QA_CONFIG, HEAD_FILE, heads.HEAD_CONFIG)):
        return trained, ''
    return trained, ' (or, for a converted folder, {} in place of {})'.format(
        ', '.join(span), ', '.join(trained))


def head_params(model):
    """``{name: Parameter}`` of the QA heads of ``model`` (a ``ModelForQAConditional``): its
    parameters outside ``backbone``, under the names ``qa_head.safetensors`` uses."""
    params = model._collect_params_with_prefix()  # pylint: disable=protected-access
    return {name: param for name, param in params.items() if not name.startswith('backbone.')}


def read_qa_config(folder):
    """``qa_config.json`` of a saved model folder, as a dict (of a span folder:
    :func:`span_qa_config`)."""
    return span_qa_config(folder) if is_span_folder(folder) else _read_json(folder, QA_CONFIG)


def recorded_training(folder):
    """What ``qa_config.json`` of ``folder`` records of its training data: a dict with
    ``trained_titles`` and ``trained_paragraphs``, each a list, or None for a folder without
    ``qa_config.json`` (a pretrained encoder) or written before the record."""
    config = read_qa_config(folder) if os.path.isfile(os.path.join(folder, QA_CONFIG)) else {}
    return {key: config.get(key) for key in ('trained_titles', 'trained_paragraphs')}


@dataclasses.dataclass(frozen=True)
class QAFolder:
    """A fine-tuned QA model folder, checked, with its ``qa_config.json`` read.

    Attributes
    ----------
    path : str
        The folder.
    qa_config : dict
        Its ``qa_config.json`` (head sizes, sequence lengths, null threshold, training record).
    """
    path: str
    qa_config: dict

    def tokenizer(self):
        """The folder's tokenizer (:func:`~gluon_attention.data.squad.load_tokenizer`)."""
        return squad.load_tokenizer(self.path)


def load_qa_folder(model_dir, weights=True):
    """Check a fine-tuned QA model folder and read its ``qa_config.json`` (once).

    Parameters
    ----------
    model_dir : str or os.PathLike
        The folder.
    weights : bool
        False: only what answering through an exported graph reads is required
        (``qa_config.json`` and the tokenizer), not the encoder and head files.

    Returns
    -------
    QAFolder

    Raises
    ------
    ValueError
        ``model_dir`` lacks a file (the message names the missing files).
    """
    folder = os.fspath(model_dir)
    check_model_folder(folder, fine_tuned=True, weights=weights)
    return QAFolder(folder, read_qa_config(folder))


def has_head(folder):
    """True when ``folder`` (a path or None) holds ``qa_head.safetensors``: a model folder saved
    by the SQuAD job's ``train``, whose heads a fine-tuning run may start from."""
    return bool(folder) and os.path.isfile(os.path.join(folder, HEAD_FILE))


def load_head(model, folder):
    """Set the QA head parameters of ``model`` (initialized, not yet hybridized) from
    ``<folder>/qa_head.safetensors``.

    Raises
    ------
    ValueError
        A head tensor missing, unexpected or of the wrong shape.
    """
    require('safetensors')
    from safetensors.numpy import load_file  # pylint: disable=import-outside-toplevel
    tensors, params = load_file(os.path.join(folder, HEAD_FILE)), head_params(model)
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
