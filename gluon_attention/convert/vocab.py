"""A GluonNLP 0.10 vocabulary (its ``to_json`` form, or a WordPiece ``vocab.txt``) read, and
written as a WordPiece tokenizer of the ``tokenizers`` library with the same token ids.

The tokenizer reproduces 0.10's ``BERTTokenizer`` (the BERT recipe of Devlin et al., 2019):
text cleaned of control characters, CJK ideographs split into single tokens, lower-casing with
accents stripped when ``lower``, whitespace and punctuation splits, then greedy longest-match
WordPiece with the ``##`` prefix and 0.10's 200-character word limit (longer words become the
unknown token).
"""
import json
import pathlib

from .. import _checks
from .._optional import require

__all__ = ['read_vocab', 'infer_lower', 'write_tokenizer']

_DEFAULT_SPECIAL = {'unknown_token': '[UNK]', 'padding_token': '[PAD]', 'cls_token': '[CLS]',
                    'sep_token': '[SEP]', 'mask_token': '[MASK]'}
MAX_WORD_CHARS = 200  # 0.10 BERTTokenizer's max_input_chars_per_word


def read_vocab(vocab_file):
    """Tokens in id order and the special tokens of a 0.10 vocabulary file.

    Parameters
    ----------
    vocab_file : str or os.PathLike
        0.10's JSON (``idx_to_token``, ``unknown_token``, ``identifiers_to_tokens`` or the
        older top-level ``padding_token``/...) or a ``vocab.txt`` (one token a line).

    Returns
    -------
    dict
        ``tokens`` (list of str, index = id) and ``special`` (``unknown_token``,
        ``padding_token``, ``cls_token``, ``sep_token``, ``mask_token`` -> token or None).

    Raises
    ------
    ValueError
        A JSON file without ``idx_to_token``, or a vocabulary with a repeated token.
    """
    text = pathlib.Path(vocab_file).read_text(encoding='utf-8')
    if text.lstrip().startswith('{'):
        raw = json.loads(text)
        if 'idx_to_token' not in raw:
            _checks.fail("a JSON vocabulary must be GluonNLP's to_json form with idx_to_token",
                         vocab_file=str(vocab_file))
        tokens = raw['idx_to_token']
        named = dict(raw, **(raw.get('identifiers_to_tokens') or {}))
        special = {key: named.get(key) for key in _DEFAULT_SPECIAL}
    else:
        tokens = text.split('\n')
        if tokens and tokens[-1] == '':
            tokens.pop()
        special = {key: (token if token in tokens else None)
                   for key, token in _DEFAULT_SPECIAL.items()}
    if len(set(tokens)) != len(tokens):
        repeated = sorted({t for t in tokens if tokens.count(t) > 1})[:3] if len(
            tokens) < 200000 else '?'
        _checks.fail('a vocabulary must list each token once', repeated=repeated)
    return dict(tokens=list(tokens), special=special)


def infer_lower(vocab):
    """True (uncased) unless a token outside the special ones holds an upper-case letter."""
    special = set(vocab['special'].values())
    return not any(t not in special and not (t.startswith('[') and t.endswith(']'))
                   and t != t.lower() for t in vocab['tokens'])


def _wordpiece(vocab, lower, token_types=True):
    """The ``tokenizers.Tokenizer`` of the module docstring; a pair ``[CLS] A [SEP] B [SEP]``
    with token types 0 then 1, or all 0 without ``token_types`` (a model without a token type
    embedding: DistilBERT)."""
    # pylint: disable=import-outside-toplevel
    require('tokenizers')
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    ids = {token: i for i, token in enumerate(vocab['tokens'])}
    special = vocab['special']
    tokenizer = Tokenizer(models.WordPiece(ids, unk_token=special['unknown_token'],
                                           max_input_chars_per_word=MAX_WORD_CHARS))
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=lower, lowercase=lower)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    cls, sep = special['cls_token'], special['sep_token']
    if cls in ids and sep in ids and token_types:
        tokenizer.post_processor = processors.BertProcessing((sep, ids[sep]), (cls, ids[cls]))
    elif cls in ids and sep in ids:
        tokenizer.post_processor = processors.TemplateProcessing(
            single=[cls + ':0', '$A:0', sep + ':0'],
            pair=[cls + ':0', '$A:0', sep + ':0', '$B:0', sep + ':0'],
            special_tokens=[(cls, ids[cls]), (sep, ids[sep])])
    tokenizer.decoder = decoders.WordPiece(prefix='##')
    return tokenizer


def write_tokenizer(vocab, folder, lower=None, token_types=True):
    """Write ``vocab.txt``, ``tokenizer.json`` and ``tokenizer_config.json`` into ``folder``.

    Parameters
    ----------
    vocab : dict
        As :func:`read_vocab` returns it; needs an unknown token.
    folder : pathlib.Path
    lower : bool, optional
        None: :func:`infer_lower`.
    token_types : bool
        Whether the model has a token type embedding: True, a pair gets token types 0
        (``[CLS] A [SEP]``) then 1 (``B [SEP]``), as BERT's; False (DistilBERT), all 0, as the
        model reads no token types (the SQuAD features take the layout from here:
        :func:`gluon_attention.data.squad_layout.pair_layout`).

    Returns
    -------
    bool
        The ``lower`` used.

    Raises
    ------
    ValueError
        The vocabulary has no unknown token, or a token holding a line break.
    """
    if vocab['special']['unknown_token'] not in vocab['tokens']:
        _checks.fail('a WordPiece vocabulary needs its unknown token (e.g. [UNK])',
                     unknown_token=vocab['special']['unknown_token'])
    if any('\n' in t or '\r' in t for t in vocab['tokens']):
        _checks.fail('vocabulary tokens must not hold line breaks (vocab.txt is one a line)',
                     tokens=[t for t in vocab['tokens'] if '\n' in t or '\r' in t][:3])
    lower = infer_lower(vocab) if lower is None else _checks.check_bool('lower', lower)
    folder = pathlib.Path(folder)
    (folder / 'vocab.txt').write_text(''.join(t + '\n' for t in vocab['tokens']),
                                      encoding='utf-8')
    _wordpiece(vocab, lower, token_types).save(str(folder / 'tokenizer.json'))
    special = {key.replace('unknown', 'unk').replace('padding', 'pad'): token
               for key, token in vocab['special'].items() if token is not None}
    config = dict(special, do_lower_case=lower, strip_accents=None if lower else False,
                  tokenize_chinese_chars=True, tokenizer_class='BertTokenizer',
                  max_input_chars_per_word=MAX_WORD_CHARS)
    (folder / 'tokenizer_config.json').write_text(json.dumps(config, indent=2) + '\n',
                                                  encoding='utf-8')
    return lower
