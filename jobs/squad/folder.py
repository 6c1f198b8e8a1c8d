"""The SQuAD job's model folders: which folder a command reads (``--model-dir``, else the
run's ``model/``), and writing a trained model as a fine-tuned folder that
:func:`gluon_attention.pipelines.load_qa_folder` reads (its layout is described there).

The folder is written under a temporary name and renamed into place: a killed save leaves the
previous folder (or none), never a half-written one.
"""
import json
import os
import shutil

from gluon_attention.files import atomic_write_json, write_safetensors
from gluon_attention.models.checkpoint import write_checkpoint
from gluon_attention.pipelines.folder import (HEAD_FILE, QA_CONFIG, TOKENIZER_FILES,
                                              check_model_folder, head_params)

from .config import TrainConfig
from .data import default_model_folder

__all__ = ['SOURCE_KEYS', 'model_folder', 'save_model_folder']

#: ``config.json`` keys of the starting folder kept in a trained folder's: a GluonNLP 0.10
#: conversion's ``gluonnlp_model`` and ``pad_token_id`` (a RoBERTa's export to transformers
#: needs both).
SOURCE_KEYS = ('gluonnlp_model', 'pad_token_id')


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

def save_model_folder(model, folder, tokenizer_dir, qa_config):
    """Write ``model`` (a trained :class:`ModelForQAConditional` over a :class:`BertEncoder`),
    the tokenizer files of ``tokenizer_dir`` and ``qa_config`` (a JSON dict) to ``folder``; the
    :data:`SOURCE_KEYS` of ``tokenizer_dir``'s ``config.json`` (the folder trained from) stay
    in the written ``config.json``.

    Returns the folder's path.
    """
    folder = os.path.abspath(folder)
    tmp, old = '{}.tmp{}'.format(folder, os.getpid()), '{}.old{}'.format(folder, os.getpid())
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        write_checkpoint(model.backbone, tmp, _source_keys(tokenizer_dir))
        write_safetensors(os.path.join(tmp, HEAD_FILE),
                          {name: param.data().asnumpy()
                           for name, param in head_params(model).items()})
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


def _source_keys(model_dir):
    """The :data:`SOURCE_KEYS` of ``model_dir/config.json`` (dict; empty without the file)."""
    path = os.path.join(model_dir, 'config.json')
    if not os.path.isfile(path):
        return {}
    with open(path, encoding='utf-8') as handle:
        config = json.load(handle)
    return {key: config[key] for key in SOURCE_KEYS if key in config}


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
