"""Reading BERT checkpoints: a ``config.json`` + ``model.safetensors`` folder into BertEncoder
arguments and parameters, with every tensor name and shape checked; and writing one back
(:func:`write_checkpoint`), in the same standard names and shapes, so that other BERT tools load
a fine-tuned encoder.

Tensor names are the standard BERT ones (Devlin et al., 2019, as Hugging Face writes them), with or
without a ``bert.`` prefix; TF-style LayerNorm ``gamma``/``beta`` are accepted. Hugging Face
RoBERTa and DistilBERT folders (``model_type`` 'roberta', 'distilbert') are read through
:func:`gluon_attention.models.hf_family.bert_form`.
"""
import json
import pathlib

import mxnet as mx
import numpy as onp

from .. import _checks
from .._resources import default_model_dir
from .hf_family import bert_form
from .torch_bin import load_torch_bin
from .._optional import require
from ..files import write_safetensors

TORCH_FILE = 'pytorch_model.bin'  # read when model.safetensors is absent

__all__ = ['read_checkpoint', 'load_bert_tensors', 'bert_tensors', 'bert_config', 'config_json',
           'canonical_names', 'write_checkpoint']


def read_checkpoint(path=None):
    """Read a BERT checkpoint folder.

    Parameters
    ----------
    path : str, os.PathLike or None
        Folder with ``config.json`` and ``model.safetensors`` or, without it,
        ``pytorch_model.bin`` (:func:`~gluon_attention.models.torch_bin.load_torch_bin`): BERT,
        RoBERTa or DistilBERT as transformers writes them, or this library's; None: the
        default pretrained
        encoder (:func:`gluon_attention._resources.default_model_dir`).

    Returns
    -------
    (config, tensors, source) : (dict, dict of str -> numpy array, str)
        BertEncoder keyword arguments, the raw tensors by name, and the weights file's path.

    Raises
    ------
    FileNotFoundError, ModuleNotFoundError, ValueError
        A missing folder or file, the default package absent, an unreadable weights file or an
        unsupported config.
    """
    folder = default_model_dir() if path is None else pathlib.Path(path)
    config_file = _require_file(folder, 'config.json')
    raw = _read_json(config_file)
    if (folder / TORCH_FILE).is_file() and not (folder / 'model.safetensors').is_file():
        weights_file = folder / TORCH_FILE
        tensors = load_torch_bin(weights_file)
    else:
        weights_file = _require_file(folder, 'model.safetensors')
        tensors = _load_safetensors(weights_file)
    raw, tensors = bert_form(raw, tensors)
    return _read_config(raw, config_file), tensors, str(weights_file)


def _load_safetensors(weights_file):
    require('safetensors')
    from safetensors.numpy import load_file  # pylint: disable=import-outside-toplevel
    try:
        return load_file(str(weights_file))
    except Exception as err:  # safetensors raises its own error type for corrupt files
        _checks.fail('{} is not a readable safetensors file ({})'.format(
            weights_file, str(err).splitlines()[0] if str(err) else type(err).__name__),
            path=str(weights_file))


def _require_file(folder, name):
    file = folder / name
    if not file.is_file():
        raise FileNotFoundError(
            'a pretrained encoder folder must contain {!r}. Received: path={!r} (no {} there)'
            .format(name, str(folder), name))
    return file


_CONFIG_KEYS = {  # BertEncoder argument -> config.json key
    'vocab_size': 'vocab_size', 'units': 'hidden_size', 'hidden_size': 'intermediate_size',
    'num_layers': 'num_hidden_layers', 'num_heads': 'num_attention_heads',
    'max_length': 'max_position_embeddings', 'num_token_types': 'type_vocab_size',
    'layer_norm_eps': 'layer_norm_eps', 'dropout': 'hidden_dropout_prob',
    'attention_dropout': 'attention_probs_dropout_prob'}
_CONFIG_DEFAULTS = {'layer_norm_eps': 1e-12, 'hidden_dropout_prob': 0.1,
                    'attention_probs_dropout_prob': 0.1}


def _read_json(file):
    try:
        raw = json.loads(file.read_text(encoding='utf-8'))
    except ValueError as err:
        _checks.fail('config.json must be valid JSON ({})'.format(err), config=str(file))
    if not isinstance(raw, dict):
        _checks.fail('config.json must hold a JSON object', config=str(file))
    return raw


def _read_config(raw, file):
    """BertEncoder keyword arguments from a BERT ``config.json`` (``raw``, read from ``file``)."""
    missing = sorted(key for key in _CONFIG_KEYS.values()
                     if key not in raw and key not in _CONFIG_DEFAULTS)
    if missing:
        _checks.fail('config.json lacks the BERT keys {}'.format(', '.join(missing)),
                     config=str(file))
    if raw.get('hidden_act', 'gelu') not in _ACTIVATIONS:
        _checks.fail("config.json must have hidden_act 'gelu' (exact erf GELU) or 'relu'",
                     hidden_act=raw['hidden_act'])
    if raw.get('position_embedding_type', 'absolute') != 'absolute':
        _checks.fail("config.json must have position_embedding_type='absolute'",
                     position_embedding_type=raw['position_embedding_type'])
    config = {arg: raw.get(key, _CONFIG_DEFAULTS.get(key)) for arg, key in _CONFIG_KEYS.items()}
    config['activation'] = raw.get('hidden_act', 'gelu')
    return config


_EMBEDDING_NAMES = {'embeddings.word_embeddings.weight': 'word_embed.weight',
                    'embeddings.position_embeddings.weight': 'position_embed.weight',
                    'embeddings.token_type_embeddings.weight': 'token_type_embed.weight',
                    'embeddings.LayerNorm.weight': 'embed_ln.gamma',
                    'embeddings.LayerNorm.bias': 'embed_ln.beta'}
_LAYER_NAMES = {'attention.self.query': 'attn_query', 'attention.self.key': 'attn_key',
                'attention.self.value': 'attn_value', 'attention.output.dense': 'attn_proj',
                'attention.output.LayerNorm': 'attn_ln', 'intermediate.dense': 'ffn_1',
                'output.dense': 'ffn_2', 'output.LayerNorm': 'ffn_ln'}
_ACTIVATIONS = ('gelu', 'relu')
_LEAF_NAMES = {'weight': 'weight', 'bias': 'bias', 'gamma': 'weight', 'beta': 'bias'}


def _bert_name_map(num_layers, token_types=True):
    """Standard BERT tensor name -> structural parameter name of a BertEncoder (without the
    token type embedding when ``token_types`` is False: ``num_token_types=0``)."""
    names = dict(_EMBEDDING_NAMES)
    if not token_types:
        del names['embeddings.token_type_embeddings.weight']
    for i in range(num_layers):
        for bert, ours in _LAYER_NAMES.items():
            is_norm = ours.endswith('_ln')
            names['encoder.layer.{}.{}.weight'.format(i, bert)] = 'encoder.layers.{}.{}.{}'.format(
                i, ours, 'gamma' if is_norm else 'weight')
            names['encoder.layer.{}.{}.bias'.format(i, bert)] = 'encoder.layers.{}.{}.{}'.format(
                i, ours, 'beta' if is_norm else 'bias')
    return names


def canonical_names(tensors):
    """Strip an optional ``bert.`` prefix, rename TF-style gamma/beta, drop ignored tensors."""
    prefixed = any(name.startswith('bert.') for name in tensors)
    out = {}
    for name, value in tensors.items():
        if prefixed:
            if not name.startswith('bert.'):
                continue  # a task head (cls., qa_outputs., ...) beside the backbone
            name = name[len('bert.'):]
        if name.startswith('pooler.') or name == 'embeddings.position_ids':
            continue
        stem, _, leaf = name.rpartition('.')
        out['{}.{}'.format(stem, _LEAF_NAMES.get(leaf, leaf)) if 'LayerNorm' in stem
            else name] = value
    return out


def load_bert_tensors(block, tensors, source):
    """Copy the checkpoint's tensors into ``block``'s parameters, checking names and shapes."""
    names = _bert_name_map(block.config['num_layers'], bool(block.config['num_token_types']))
    tensors = canonical_names(tensors)
    missing = sorted(set(names) - set(tensors))
    unexpected = sorted(set(tensors) - set(names))
    if missing or unexpected:
        _checks.fail('the checkpoint must hold exactly the BERT encoder tensors '
                     '(missing: {}; unexpected: {})'.format(missing[:5] or 'none',
                                                            unexpected[:5] or 'none'),
                     checkpoint=source)
    params = block._collect_params_with_prefix()  # pylint: disable=protected-access
    for bert_name, our_name in names.items():
        param, value = params[our_name], tensors[bert_name]
        if tuple(value.shape) != tuple(param.shape):
            _checks.fail('tensor {} must have shape {} (from config.json)'.format(
                bert_name, tuple(param.shape)), **{bert_name + '.shape': tuple(value.shape)})
        param.set_data(mx.np.array(onp.asarray(value, dtype=onp.float32), dtype=onp.float32))


def bert_tensors(block):
    """A BertEncoder's parameters under the standard BERT tensor names.

    Parameters
    ----------
    block : BertEncoder
        Initialized.

    Returns
    -------
    dict of str -> numpy.ndarray
        float32 arrays named as :func:`load_bert_tensors` reads them (no ``bert.`` prefix,
        LayerNorm as ``weight``/``bias``), with the shapes it checks: dense weights (out, in),
        embeddings (rows, D).
    """
    params = block._collect_params_with_prefix()  # pylint: disable=protected-access
    names = _bert_name_map(block.config['num_layers'], bool(block.config['num_token_types']))
    return {bert: params[ours].data().asnumpy().astype(onp.float32)
            for bert, ours in names.items()}


def bert_config(block):
    """A BERT ``config.json`` dict (the keys :func:`read_checkpoint` and other BERT tools read)
    describing ``block.config``."""
    return config_json(block.config)


def config_json(encoder_config):
    """The BERT ``config.json`` dict of BertEncoder keyword arguments ``encoder_config``."""
    config = {key: encoder_config[arg] for arg, key in _CONFIG_KEYS.items()}
    config.update(architectures=['BertModel'], model_type='bert',
                  hidden_act=encoder_config.get('activation', 'gelu'),
                  position_embedding_type='absolute', pad_token_id=0, initializer_range=0.02)
    return config


def write_checkpoint(block, folder, extra=None):
    """Write ``block`` as ``folder/config.json`` and ``folder/model.safetensors``.

    The folder is created if needed; :meth:`BertEncoder.from_pretrained` (and BERT loaders of
    other libraries) read it back. Existing files of those names are replaced. ``extra`` (a
    dict, optional) adds keys to ``config.json`` or replaces those the encoder does not
    describe, such as the ``gluonnlp_model`` and ``pad_token_id`` of a folder converted from
    GluonNLP 0.10, which its RoBERTa export to transformers reads.

    Returns
    -------
    (str, str)
        The paths of the config and weights files.
    """
    require('safetensors')
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config_file, weights_file = folder / 'config.json', folder / 'model.safetensors'
    config = dict(bert_config(block), **(extra or {}))
    config_file.write_text(json.dumps(config, indent=2, sort_keys=True) + '\n',
                           encoding='utf-8')
    write_safetensors(weights_file, bert_tensors(block), metadata={'format': 'pt'})
    return str(config_file), str(weights_file)
