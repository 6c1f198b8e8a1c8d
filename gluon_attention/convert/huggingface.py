"""A model folder (e.g. one :func:`~gluon_attention.convert.gluonnlp.from_gluonnlp` wrote) as a
folder Hugging Face ``transformers`` loads with the same last hidden states.

BERT and ERNIE become a ``BertModel`` folder as they are (ERNIE with ``hidden_act='relu'``).
A folder without token types (DistilBERT) becomes a ``BertModel`` with one all-zero token type
row and its own LayerNorm epsilon (``DistilBertModel`` fixes epsilon at 1e-12). RoBERTa becomes
a ``RobertaModel``: transformers numbers the positions of the non-padding tokens from
``pad_token_id + 1`` (``create_position_ids_from_input_ids``) where GluonNLP 0.10 counts from 0,
so the position table moves down by ``pad_token_id + 1`` rows (zeros above), with one all-zero
token type row. A RoBERTa input must not hold ``pad_token_id`` at a valid position.
"""
import json
import pathlib
import shutil

import numpy as onp

from .. import _checks
from ..models.checkpoint import canonical_names, config_json, read_checkpoint
from .._optional import require
from ..files import write_safetensors

__all__ = ['to_transformers']

_TOKENIZER_FILES = ('vocab.txt', 'tokenizer.json', 'tokenizer_config.json')


def _is_roberta(raw):
    return str(raw.get('gluonnlp_model', '')).startswith('roberta')


def _hf_config(config, raw):
    """The transformers config dict."""
    out = config_json(config)
    out['type_vocab_size'] = max(config['num_token_types'], 1)
    if _is_roberta(raw):
        pad = raw.get('pad_token_id')
        if not isinstance(pad, int) or pad < 0:
            _checks.fail('a RoBERTa folder needs its padding id in config.json (pad_token_id), '
                         'for the position offset of transformers', pad_token_id=pad)
        out.update(architectures=['RobertaModel'], model_type='roberta', pad_token_id=pad,
                   max_position_embeddings=config['max_length'] + pad + 1)
    return out


def _hf_tensors(config, tensors, raw):
    """Standard BERT tensors adapted as the module docstring says."""
    out = {name: onp.asarray(value, onp.float32) for name, value in tensors.items()}
    units = config['units']
    if not config['num_token_types']:
        out['embeddings.token_type_embeddings.weight'] = onp.zeros((1, units), onp.float32)
    if _is_roberta(raw):
        offset = raw['pad_token_id'] + 1
        positions = out['embeddings.position_embeddings.weight']
        out['embeddings.position_embeddings.weight'] = onp.concatenate(
            [onp.zeros((offset, units), onp.float32), positions])
    return out


def to_transformers(model_dir, output_dir):
    """Write ``model_dir`` as a transformers folder (``config.json``, ``model.safetensors``, the
    tokenizer files it has).

    Parameters
    ----------
    model_dir : str or os.PathLike
        A model folder (``config.json`` + ``model.safetensors``); RoBERTa is recognised by the
        ``gluonnlp_model`` key that conversion records, and needs ``pad_token_id``.
    output_dir : str or os.PathLike
        Created if needed; must differ from ``model_dir``.

    Returns
    -------
    str
        ``output_dir``.

    Raises
    ------
    FileNotFoundError, ValueError
        As :func:`~gluon_attention.models.checkpoint.read_checkpoint`; a RoBERTa folder
        without ``pad_token_id``; ``output_dir`` equal to ``model_dir``.
    """
    source, target = pathlib.Path(model_dir), pathlib.Path(output_dir)
    if target.resolve() == source.resolve():
        _checks.fail('output_dir must differ from model_dir', output_dir=str(output_dir))
    config, tensors, _ = read_checkpoint(source)
    raw = json.loads((source / 'config.json').read_text(encoding='utf-8'))
    hf_config = _hf_config(config, raw)
    require('safetensors')
    target.mkdir(parents=True, exist_ok=True)
    (target / 'config.json').write_text(json.dumps(hf_config, indent=2, sort_keys=True) + '\n',
                                        encoding='utf-8')
    write_safetensors(target / 'model.safetensors',
                      _hf_tensors(config, canonical_names(tensors), raw),
                      metadata={'format': 'pt'})
    for name in _TOKENIZER_FILES:
        if (source / name).is_file():
            shutil.copyfile(source / name, target / name)
    return str(target)
