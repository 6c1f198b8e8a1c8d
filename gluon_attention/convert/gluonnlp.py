"""GluonNLP 0.10 model zoo <-> this library's model folder.

:func:`from_gluonnlp` reads a ``.params`` file that GluonNLP 0.10's ``save_parameters`` wrote for
one of its BERT-family models (the backbone alone, or a fine-tuned model: a SQuAD span
classifier over ``bert.``, a ``BERTClassifier`` or a ``RoBERTaClassifier``) and its vocabulary,
and writes ``config.json`` + ``model.safetensors`` (standard BERT tensor names, read by
:meth:`~gluon_attention.models.encoder.BertEncoder.from_pretrained`), the tokenizer and the head
(:mod:`gluon_attention.models.heads`). :func:`to_gluonnlp` writes such a folder back as a 0.10
``.params`` file that 0.10's ``load_parameters`` accepts.

Everything is checked before anything is written: the architecture and sizes (every tensor's
shape against the zoo configuration), the vocabulary's size against the embedding rows, and the
parameter names (unknown and missing ones are named). Reading needs MXNet and NumPy only, not
GluonNLP. The layout followed is GluonNLP 0.10.0's ``gluonnlp/model/bert.py`` (its
``BERTEncoder`` / ``BERTModel`` parameter names; Q, K and V kept as separate (D, D) weights).
"""
import json
import pathlib

import mxnet as mx
import numpy as onp

from .. import _checks
from ..models.checkpoint import canonical_names, config_json, read_checkpoint
from ..models.heads import HEAD_CONFIG, HEAD_FILE, read_head
from . import zoo_names as names
from .bpe import bpe_tokenizer
from .vocab import read_vocab, write_tokenizer
from .._optional import require
from ..files import write_safetensors

__all__ = ['ARCHITECTURES', 'SIZE_KEYS', 'from_gluonnlp', 'to_gluonnlp', 'encoder_config']

_BERT = dict(num_token_types=2, layer_norm_eps=1e-12, activation='gelu', max_length=512)
_ROBERTA = dict(num_token_types=0, layer_norm_eps=1e-5, activation='gelu', max_length=512)
ARCHITECTURES = {  # GluonNLP 0.10 zoo name -> BertEncoder configuration (its bert_hparams)
    'bert_12_768_12': dict(_BERT, num_layers=12, units=768, hidden_size=3072, num_heads=12),
    'bert_24_1024_16': dict(_BERT, num_layers=24, units=1024, hidden_size=4096, num_heads=16),
    'roberta_12_768_12': dict(_ROBERTA, num_layers=12, units=768, hidden_size=3072,
                              num_heads=12),
    'roberta_24_1024_16': dict(_ROBERTA, num_layers=24, units=1024, hidden_size=4096,
                               num_heads=16),
    'distilbert_6_768_12': dict(_ROBERTA, num_layers=6, units=768, hidden_size=3072,
                                num_heads=12),
    'ernie_12_768_12': dict(_BERT, num_layers=12, units=768, hidden_size=3072, num_heads=12,
                            max_length=513, layer_norm_eps=1e-5, activation='relu'),
}
#: The sizes a 0.10 model built at other sizes than its zoo name may replace.
SIZE_KEYS = ('num_layers', 'units', 'hidden_size', 'num_heads', 'max_length')


def encoder_config(model_name, vocab_size, sizes=None):
    """The BertEncoder keyword arguments of a 0.10 zoo model.

    Parameters
    ----------
    model_name : str
        One of :data:`ARCHITECTURES` (e.g. 'bert_12_768_12').
    vocab_size : int
        V, the vocabulary's size.
    sizes : dict, optional
        Replacements of ``num_layers``, ``units``, ``hidden_size``, ``num_heads`` and
        ``max_length`` (:data:`SIZE_KEYS`; positive integers) for a 0.10 model built at
        other sizes from the same family.

    Raises
    ------
    ValueError
        An unknown ``model_name``, a key of ``sizes`` outside those above or a value that is
        not a positive integer, or a ``num_heads``
        that does not divide ``units`` (the tensors hold no head count: a wrong one that divides
        ``units`` cannot be detected).
    """
    _checks.check_choice('model_name', model_name, tuple(ARCHITECTURES))
    unknown = sorted(set(sizes or {}) - set(SIZE_KEYS))
    if unknown:
        _checks.fail('sizes may replace only {}'.format(', '.join(SIZE_KEYS)), sizes=unknown)
    for key, value in (sizes or {}).items():
        _checks.check_positive_int('sizes[{!r}]'.format(key), value)
    config = dict(ARCHITECTURES[model_name], vocab_size=vocab_size, dropout=0.1,
                  attention_dropout=0.1, **(sizes or {}))
    # the tensors fix units but not the head count: at least refuse one that cannot split them
    _checks.check_positive_int('num_heads', config['num_heads'])
    if config['units'] % config['num_heads']:
        _checks.fail('num_heads must divide units (each head gets units / num_heads channels)',
                     num_heads=config['num_heads'], units=config['units'])
    return config


def _load_params(params_file):
    """name -> float32 numpy array of a ``save_parameters`` file."""
    try:
        with mx.util.np_array(False), mx.util.np_shape(False):   # 0.10 saved legacy arrays
            loaded = mx.nd.load(str(params_file))
            loaded = {name: value.asnumpy() for name, value in loaded.items()} if isinstance(
                loaded, dict) else None
    except mx.base.MXNetError as err:
        lines = [line for line in str(err).splitlines() if line.strip()]
        _checks.fail('params_file must be a .params file written by save_parameters ({})'.format(
            lines[-1] if lines else 'unreadable'), params_file=str(params_file))
    if loaded is None:
        _checks.fail('params_file must hold named parameters (save_parameters), not a list',
                     params_file=str(params_file))
    return loaded


#: Ends the refusals of parameters that do not fit model_name's sizes.
SIZES_HINT = ("; is model_name right? A model built at other sizes than its zoo name's needs "
              "them in sizes, e.g. {'num_layers': 4, 'units': 256}")


def _check_shapes(received, expected, params_file):
    """Refuse missing or unknown names and mis-shaped tensors, naming them."""
    missing = sorted(set(expected) - set(received))
    unknown = sorted(set(received) - set(expected))
    if missing or unknown:
        _checks.fail('the parameters must be exactly those of the model (missing: {}; unknown: '
                     '{}){}'.format(missing[:5] or 'none', unknown[:5] or 'none', SIZES_HINT),
                     params_file=str(params_file))
    for name, shape in expected.items():
        if tuple(received[name].shape) != shape:
            _checks.fail('parameter {} must have shape {} for this architecture and size{}'
                         .format(name, shape, SIZES_HINT),
                         **{name + '.shape': tuple(received[name].shape)})


def _read_model(params_file, model_name, vocab_size, sizes):
    """(config, backbone tensors under 0.10 names, head or None) of a ``.params`` file."""
    config = encoder_config(model_name, vocab_size, sizes)     # refused before any reading
    raw = _load_params(params_file)
    backbone, head = names.split_head(raw, names.prefix_of(raw))
    rows = backbone.get('word_embed.0.weight', onp.zeros((vocab_size, 0))).shape[0]
    if rows != vocab_size:
        _checks.fail('the vocabulary must have one token per row of word_embed.0.weight '
                     '({} rows)'.format(rows), **{'vocabulary size': vocab_size})
    head_expected = names.head_shapes(head, config['units'])
    pooler = head is not None and head['kind'] == 'classifier' and head['style'] == 'bert.'
    expected = names.backbone_shapes(config, pooler=pooler)
    _check_shapes(backbone, expected, params_file)
    _check_shapes(head['tensors'] if head else {}, head_expected, params_file)
    return config, backbone, head


def from_gluonnlp(params_file, model_name, vocab_file, output_dir, lower=None, sizes=None,
                  merges_file=None):
    """Convert a GluonNLP 0.10 BERT-family ``.params`` file into a model folder.

    Parameters
    ----------
    params_file : str or os.PathLike
        Written by 0.10's ``save_parameters``: a ``BERTModel`` / ``RoBERTaModel`` /
        ``DistilBERTModel`` (names such as ``word_embed.0.weight``; its pooler, masked-LM
        decoder and next-sentence classifier are dropped), a SQuAD model (``bert.`` +
        ``span_classifier.{weight (2, D), bias (2,)}``), a ``BERTClassifier`` (``bert.`` +
        ``classifier.{0|1}.*``) or a ``RoBERTaClassifier`` (``roberta.`` + two dense layers).
    model_name : str
        The 0.10 zoo name: one of :data:`ARCHITECTURES`.
    vocab_file : str or os.PathLike
        0.10's vocabulary JSON (``vocab.to_json()``, e.g. the ``.vocab`` file of its model
        store) or a WordPiece ``vocab.txt`` (one token a line, in id order).
    output_dir : str or os.PathLike
        Created if needed; ``config.json``, ``model.safetensors``, the tokenizer files
        (WordPiece vocabularies: ``vocab.txt``, ``tokenizer.json``, ``tokenizer_config.json``;
        RoBERTa: ``tokenizer.json`` with ``merges_file``, else none) and, for a fine-tuned
        model, ``head_config.json`` +
        ``head.safetensors`` are written there.
    lower : bool, optional
        Whether the tokenizer lowercases; None: cased when the vocabulary holds a token with
        an upper-case letter outside its special tokens, else uncased.
    sizes : dict, optional
        As in :func:`encoder_config`, for a model built at other sizes.
    merges_file : str or os.PathLike, optional
        RoBERTa only: the pretrained RoBERTa's ``merges.txt``, from which (with the
        vocabulary) the byte-level BPE tokenizer is written
        (:func:`gluon_attention.convert.bpe.bpe_tokenizer`).

    Returns
    -------
    dict
        ``config`` (the BertEncoder arguments), ``head`` (kind or None), ``tokenizer`` (bool),
        ``output_dir``.

    Raises
    ------
    ValueError
        An unknown ``model_name``; a params file that is not a ``save_parameters`` file, holds
        unknown names, lacks some, or has a tensor of another shape than the architecture's
        (named with its expected and received shapes); a vocabulary whose size differs from
        the embedding rows; ``merges_file`` for another architecture than RoBERTa, or one
        whose merges the vocabulary lacks. Nothing is written then.
    FileNotFoundError
        ``params_file``, ``vocab_file`` or a given ``merges_file`` missing.
    """
    if merges_file is not None and not str(model_name).startswith('roberta'):
        _checks.fail('merges_file is for RoBERTa models only', model_name=model_name)
    for name, path in (('params_file', params_file), ('vocab_file', vocab_file),
                       ('merges_file', merges_file)):
        if path is not None and not pathlib.Path(path).is_file():
            raise FileNotFoundError('{} must be an existing file. Received: {}={!r}'.format(
                name, name, str(path)))
    vocab = read_vocab(vocab_file)
    config, backbone, head = _read_model(params_file, model_name, len(vocab['tokens']), sizes)
    bpe = None if merges_file is None else bpe_tokenizer(vocab, merges_file)
    return _write_folder(pathlib.Path(output_dir), model_name, config, backbone, head,
                         vocab, (lower, bpe))


def _write_folder(folder, model_name, config, backbone, head, vocab, tokenizer):
    require('safetensors')
    folder.mkdir(parents=True, exist_ok=True)
    raw = dict(config_json(config), gluonnlp_model=model_name)
    if vocab['special']['padding_token'] in vocab['tokens']:
        raw['pad_token_id'] = vocab['tokens'].index(vocab['special']['padding_token'])
    (folder / 'config.json').write_text(json.dumps(raw, indent=2, sort_keys=True) + '\n',
                                        encoding='utf-8')
    write_safetensors(folder / 'model.safetensors', names.to_bert_names(backbone, config),
                      metadata={'format': 'pt'})
    if head is not None:
        head_config = dict(kind=head['kind'], units=config['units'], source='gluonnlp-0.10')
        tensors = names.head_to_ours(head, backbone)
        if head['kind'] == 'classifier':
            head_config['num_classes'] = int(tensors['classifier.weight'].shape[0])
        (folder / HEAD_CONFIG).write_text(json.dumps(head_config, indent=2) + '\n',
                                          encoding='utf-8')
        write_safetensors(folder / HEAD_FILE, tensors)
    lower, bpe = tokenizer
    has_tokenizer = not model_name.startswith('roberta') or bpe is not None
    if bpe is not None:
        bpe.save(str(folder / 'tokenizer.json'))
    elif has_tokenizer:
        write_tokenizer(vocab, folder, lower, token_types=bool(config['num_token_types']))
    return dict(config=config, head=head['kind'] if head else None, tokenizer=has_tokenizer,
                output_dir=str(folder))


def to_gluonnlp(model_dir, params_file):
    """Write a model folder as a GluonNLP 0.10 ``.params`` file (0.10's ``load_parameters``).

    Parameters
    ----------
    model_dir : str or os.PathLike
        A folder :func:`from_gluonnlp` (or a BERT checkpoint writer) wrote.
    params_file : str or os.PathLike
        Where to write. Without a head the names are a bare ``BERTModel``'s (built with
        ``use_pooler=False, use_decoder=False, use_classifier=False``; no token type
        embedding when the folder has none: RoBERTa, DistilBERT); with a span head, the SQuAD
        model's (``bert.`` + ``span_classifier.*``); with a classifier head, a
        ``BERTClassifier``'s built with ``dropout=0`` (``bert.`` + ``bert.pooler.*`` +
        ``classifier.0.*``; a RoBERTa folder: a ``RoBERTaClassifier``'s built with
        ``dropout=0``, ``roberta.`` + ``classifier.{0, 1}.*``).

    Returns
    -------
    str
        ``params_file``.

    Raises
    ------
    FileNotFoundError, ValueError
        As :func:`~gluon_attention.models.checkpoint.read_checkpoint`.
    """
    config, tensors, _ = read_checkpoint(model_dir)
    head_config, head_tensors = read_head(model_dir)
    params = names.from_bert_names(canonical_names(tensors), config)
    if head_config is not None:
        roberta = str(json.loads((pathlib.Path(model_dir) / 'config.json').read_text(
            encoding='utf-8')).get('gluonnlp_model', '')).startswith('roberta')
        params = {('roberta.' if roberta else 'bert.') + name: value
                  for name, value in params.items()}
        params.update(names.head_to_gluonnlp(head_config['kind'], head_tensors, roberta))
    with mx.util.np_array(False), mx.util.np_shape(False):   # the legacy form 0.10 loads
        mx.nd.save(str(params_file), {name: mx.nd.array(onp.asarray(value, onp.float32))
                                      for name, value in params.items()})
    return str(params_file)
