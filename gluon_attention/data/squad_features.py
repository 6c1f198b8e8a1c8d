"""SQuAD features: tokens with character offsets, doc-stride chunks, gold spans, batches.

A question becomes one feature per context chunk (BERT-style chunking with a document stride),
laid out as the tokenizer lays out a pair (:func:`gluon_attention.data.squad_layout.pair_layout`);
for a BERT (WordPiece) tokenizer::

    input_ids    [CLS] query [SEP] context-chunk [SEP] [PAD] ...
    token_types    0   0...0   0     1...1       1     0 ...
    p_mask         1   0...0   0     1...1       0     0 ...

and for a RoBERTa (byte-level BPE) tokenizer ``<s> query </s></s> context-chunk </s>``, token
types all 0. ``p_mask`` follows the library's polarity: 1 = the position may be predicted as an
answer start or end (position 0, for the null answer, and the chunk's context tokens), 0 = it
may not (query, other special tokens, padding).
Import the public names from :mod:`gluon_attention.data.squad`.
"""
import bisect
import dataclasses
import functools
import json
import logging
import unicodedata
from pathlib import Path

import numpy as onp

from .._checks import check_positive_int, check_text, fail
from .._resources import default_model_dir
from .squad_decode import is_blank_input
from .squad_layout import pair_layout
from .squad_metric import normalize_answer
from .._optional import require

__all__ = ['default_model_dir', 'load_tokenizer', 'tokenizer_files', 'SquadFeature',
           'convert_examples_to_features', 'batchify', 'length_sorted_batches']

_LOG = logging.getLogger(__name__)


def load_tokenizer(model_dir=None):
    """WordPiece tokenizer with character offsets for a BERT model folder.

    Reads ``tokenizer.json`` when present (its normaliser says whether to lowercase), else
    ``vocab.txt`` with ``do_lower_case`` from ``tokenizer_config.json`` (default True).
    Truncation and padding are switched off: the featurizer does both.

    Parameters
    ----------
    model_dir : str or pathlib.Path, optional
        Defaults to :func:`default_model_dir`.

    Returns
    -------
    tokenizers.Tokenizer

    Raises
    ------
    ValueError
        When the folder has neither ``tokenizer.json`` nor ``vocab.txt``.
    """
    require('tokenizers')
    from tokenizers import Tokenizer
    from tokenizers.implementations import BertWordPieceTokenizer
    files = tokenizer_files(model_dir)
    if files[0].name == 'tokenizer.json':
        tokenizer = Tokenizer.from_file(str(files[0]))
    else:
        config = json.loads(files[1].read_text()) if len(files) > 1 else {}
        tokenizer = BertWordPieceTokenizer(str(files[0]),
                                           lowercase=config.get('do_lower_case', True))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def tokenizer_files(model_dir=None):
    """The files of a model folder that :func:`load_tokenizer` reads: ``[tokenizer.json]`` when
    present, else ``[vocab.txt]`` and ``tokenizer_config.json`` when present (list of Path).

    Raises
    ------
    ValueError
        When the folder has neither ``tokenizer.json`` nor ``vocab.txt``.
    """
    model_dir = Path(default_model_dir() if model_dir is None else model_dir)
    if (model_dir / 'tokenizer.json').is_file():
        return [model_dir / 'tokenizer.json']
    if not (model_dir / 'vocab.txt').is_file():
        fail('expected tokenizer.json or vocab.txt in the model folder', model_dir=str(model_dir))
    return [model_dir / name for name in ('vocab.txt', 'tokenizer_config.json')
            if (model_dir / name).is_file()]


@dataclasses.dataclass
class SquadFeature:
    """One chunk of one question, laid out ``[CLS] query [SEP] context[chunk] [SEP]`` (or as
    the tokenizer lays out a pair: :mod:`gluon_attention.data.squad_layout`).

    Lists have ``valid_length`` entries (input_ids, token_types, p_mask) or ``chunk_length``
    entries (token_to_char: (start, end) character span of each chunk token in the original
    context; token_is_max_context). ``start_position``/``end_position`` index ``input_ids``; both
    are 0 (CLS) when the question is impossible or this chunk misses part of the gold span, except
    that features built with ``plausible_spans=True`` point an impossible question's chunk at its
    plausible answer when the chunk holds it (``is_impossible`` stays True).
    """
    qas_id: str
    example_index: int
    chunk_index: int
    input_ids: list
    token_types: list
    p_mask: list
    valid_length: int
    context_offset: int
    chunk_start: int
    chunk_length: int
    token_to_char: list
    token_is_max_context: list
    start_position: int
    end_position: int
    is_impossible: bool
    answerable_loss_weight: float = 1.0

    @property
    def context_range(self):
        """``(first, last + 1)`` feature positions of this chunk's context tokens."""
        return self.context_offset, self.context_offset + self.chunk_length


def carry_combining_marks(context, offsets):
    """Token offsets extended over the combining marks that follow them.

    A lowercasing WordPiece normaliser strips accents, so a token of ``'Cafe\u0301'`` ends
    before the combining acute and the mark belongs to no token: a span decoded from the offsets
    would lose it, and a gold answer ending in it would not match its tokens. Each token's end
    is moved over the characters of Unicode category M (marks) that follow it, up to the next
    token's start.

    Parameters
    ----------
    context : str
    offsets : list of (int, int)
        Character span ``[start, end)`` of each token of ``context``, in order.

    Returns
    -------
    list of (int, int)
        The same starts; ends moved past trailing marks (never past the next token's start).
    """
    carried = []
    for i, (start, end) in enumerate(offsets):
        limit = offsets[i + 1][0] if i + 1 < len(offsets) else len(context)
        while end < limit and unicodedata.category(context[end])[0] == 'M':
            end += 1
        carried.append((start, end))
    return carried


def _token_span(offsets, char_start, char_end):
    """Token indices (first, last) overlapping ``[char_start, char_end)``, or None."""
    first = bisect.bisect_right([end for _, end in offsets], char_start)
    last = bisect.bisect_left([start for start, _ in offsets], char_end) - 1
    return (first, last) if first <= last else None


def _gold_span(offsets, context, text, char_start):
    """Gold token span and how it was found: 'exact', 'recovered' or 'mismatch'.

    The span matches when its detokenised text contains the normalised answer. The given offset
    is tried first, then every other occurrence of ``text`` in the context, nearest first.
    """
    target = normalize_answer(text)
    others = (i for i in _occurrences(context, text) if i != char_start)
    starts = [char_start] + sorted(others, key=lambda i: abs(i - char_start))
    for start in starts:
        span = _token_span(offsets, start, start + len(text))
        if span and target in normalize_answer(
                context[offsets[span[0]][0]:offsets[span[1]][1]]):
            return span, 'exact' if start == char_start else 'recovered'
    return _token_span(offsets, char_start, char_start + len(text)), 'mismatch'


def _occurrences(context, text):
    i = context.find(text) if text else -1
    while i >= 0:
        yield i
        i = context.find(text, i + 1)


@functools.lru_cache(maxsize=4096)
def _chunk_layout(num_tokens, max_chunk_length, doc_stride):
    """Chunks and their max-context flags (cached: they depend on these three sizes only).

    Chunks are (chunk_start, chunk_length) pairs starting at 0, stride, ... until one reaches the
    end. Token j of chunk (s, n) scores min(j - s, s + n - 1 - j) + 0.01 * n; each token's flag is
    True in the first chunk with its highest score.
    """
    chunks, start = [], 0
    while True:
        length = min(max_chunk_length, num_tokens - start)
        chunks.append((start, length))
        if start + length >= num_tokens:
            break
        start += doc_stride
    scores = onp.full((len(chunks), num_tokens), -onp.inf)
    for c, (s, n) in enumerate(chunks):
        j = onp.arange(s, s + n)
        scores[c, s:s + n] = onp.minimum(j - s, s + n - 1 - j) + 0.01 * n
    owner = scores.argmax(axis=0) if num_tokens else onp.zeros(0, int)
    return tuple((s, n, tuple((owner[s:s + n] == c).tolist())) for c, (s, n) in enumerate(chunks))


def _check_lengths(max_seq_length, doc_stride, max_query_length, num_special=3):
    for name, value in [('max_seq_length', max_seq_length), ('doc_stride', doc_stride),
                        ('max_query_length', max_query_length)]:
        check_positive_int(name, value)
    if doc_stride > max_seq_length - max_query_length - num_special:
        fail('doc_stride must be at most max_seq_length - max_query_length - {} (the special '
             'tokens of a pair) so that no context token is skipped'.format(num_special),
             doc_stride=doc_stride, max_seq_length=max_seq_length,
             max_query_length=max_query_length)


def _example_features(index, example, query, context_ids, offsets, span, layout, sizes):
    """The features of one example (one per chunk); ``span`` is its gold token span (or, for an
    impossible question, its plausible span) or None; ``layout`` a PairLayout."""
    max_seq_length, doc_stride = sizes
    context_offset = layout.context_offset(len(query))
    features = []
    chunks = _chunk_layout(len(context_ids), max_seq_length - len(query) - layout.num_special,
                           doc_stride)
    for c, (s, n, is_max) in enumerate(chunks):
        inside = span is not None and s <= span[0] and span[1] < s + n
        start, end = ((span[0] - s + context_offset, span[1] - s + context_offset)
                      if inside else (0, 0))
        features.append(SquadFeature(
            qas_id=example.qas_id, example_index=index, chunk_index=c,
            input_ids=layout.input_ids(query, context_ids[s:s + n]),
            token_types=layout.token_types(len(query), n),
            p_mask=[1] + [0] * (context_offset - 1) + [1] * n + [0] * len(layout.suffix),
            valid_length=context_offset + n + len(layout.suffix), context_offset=context_offset,
            chunk_start=s, chunk_length=n, token_to_char=list(offsets[s:s + n]),
            token_is_max_context=list(is_max), start_position=start, end_position=end,
            is_impossible=example.is_impossible or not inside))
    return features


def convert_examples_to_features(examples, tokenizer, max_seq_length=384, doc_stride=128,
                                 max_query_length=64, is_training=True, stats=None,
                                 plausible_spans=False):
    """Tokenise examples into chunked features with gold token spans.

    The query is truncated to ``max_query_length`` tokens; the context is split into chunks of
    ``max_seq_length - len(query) - S`` tokens (S the special tokens of a pair: 3 for BERT, 4 for
    RoBERTa) starting at 0, ``doc_stride``, ... until one reaches its end. Features are laid out
    as the tokenizer lays out a pair (:func:`gluon_attention.data.squad_layout.pair_layout`).
    The gold span is the first answer's character span mapped to the tokens that overlap it; it
    counts as matched when the detokenised span text contains the normalised answer (other
    occurrences of the answer text are tried otherwise). A chunk holding the whole gold span gets
    it in feature coordinates; other chunks and impossible questions get (0, 0), position 0 (the
    CLS token, ``<s>`` for RoBERTa).

    Parameters
    ----------
    examples : list of SquadExample
    tokenizer : tokenizers.Tokenizer
        From :func:`load_tokenizer`: a post-processor that lays out a pair (BERT's, RoBERTa's
        or a pair template), or, without one, the tokens ``[CLS]`` and ``[SEP]``.
    max_seq_length, doc_stride, max_query_length : int
        In tokens. ``doc_stride <= max_seq_length - max_query_length - S``.
    is_training : bool
        When True, answerable examples whose gold span does not match are dropped. When
        False, an example with a blank question or context (empty, or white space and
        invisible characters only: ``squad_decode.is_blank_input``) gets no feature: its
        answer is '' by rule.
    stats : dict, optional
        Filled with counts: 'answerable' (examples with an answer), 'recovered' (matched at
        another occurrence of the answer text), 'mismatch' (not matched), 'skipped' (dropped),
        'plausible' (impossible questions given a plausible span), 'lost_to_chunking'
        (answerable examples, not skipped, whose gold span straddles chunks so that no chunk
        holds it whole: every chunk of the question is then labelled impossible; a stride too
        large for the answers shows here).
    plausible_spans : bool
        When True, an impossible question's chunks that hold the span of its first plausible
        answer (matched like a gold span) carry that span as start/end positions, still marked
        ``is_impossible``: the span heads learn from it while the answerable head learns to
        reject it. Its other chunks point at [CLS] as usual.

    Returns
    -------
    list of SquadFeature
        Ordered by example, then chunk.

    Raises
    ------
    ValueError
        For non-positive sizes, a stride that would skip context tokens, a tokenizer with no
        pair layout (see :func:`~gluon_attention.data.squad_layout.pair_layout`), or a question
        or context that cannot be encoded as UTF-8 (a lone UTF-16 surrogate such as
        ``'\\ud800'``; the field is named ``examples[i].question``).
    """
    layout = pair_layout(tokenizer)
    _check_lengths(max_seq_length, doc_stride, max_query_length, layout.num_special)
    for i, example in enumerate(examples):
        check_text(example.question, 'examples[{}].question'.format(i))
        check_text(example.context, 'examples[{}].context'.format(i))
    contexts = list(dict.fromkeys(e.context for e in examples))
    encoded = {text: (e.ids, carry_combining_marks(text, e.offsets)) for text, e in
               zip(contexts, tokenizer.encode_batch(contexts, add_special_tokens=False))}
    queries = tokenizer.encode_batch([e.question for e in examples], add_special_tokens=False)
    counts = dict(answerable=0, recovered=0, mismatch=0, skipped=0, plausible=0,
                  lost_to_chunking=0)
    features = []
    for index, (example, query) in enumerate(zip(examples, queries)):
        if not is_training and is_blank_input(example.question, example.context):
            continue                    # the null answer by rule (decode_predictions)
        context_ids, offsets = encoded[example.context]
        span = None
        if example.answers:
            span, how = _gold_span(offsets, example.context, *example.answers[0])
            counts['answerable'] += 1
            counts[how] = counts.get(how, 0) + 1
            if how == 'mismatch' and is_training:
                counts['skipped'] += 1
                continue
        elif plausible_spans and example.plausible_answers:
            span, how = _gold_span(offsets, example.context, *example.plausible_answers[0])
            span = None if how == 'mismatch' else span
            counts['plausible'] += span is not None
        chunks = _example_features(index, example, query.ids[:max_query_length], context_ids,
                                   offsets, span, layout, (max_seq_length, doc_stride))
        if example.answers and span is not None:
            counts['lost_to_chunking'] += all(f.is_impossible for f in chunks)
        features += chunks
    counts.pop('exact', None)
    if counts['mismatch']:
        _LOG.warning('%d of %d gold spans do not match their tokens', counts['mismatch'],
                     counts['answerable'])
    if counts['lost_to_chunking']:
        _LOG.warning('%d of %d gold answers straddle chunks and no chunk holds one whole '
                     '(doc_stride=%d)', counts['lost_to_chunking'], counts['answerable'],
                     doc_stride)
    if stats is not None:
        stats.update(counts)
    return features


def batchify(features, pad_id=0, round_to=None):
    """Stack features into padded NumPy arrays.

    Parameters
    ----------
    features : list of SquadFeature
        At least one.
    pad_id : int
        Token id written into padding positions.
    round_to : int, optional
        Pad T up to a multiple of this (e.g. 8).

    Returns
    -------
    dict of numpy.ndarray
        ``input_ids`` int32 (B, T), ``token_types`` int32 (B, T) (padding 0), ``valid_length``
        int32 (B,), ``p_mask`` float32 (B, T) (padding 0), ``start_position``/``end_position``
        int32 (B,), ``is_impossible`` int32 (B,). T is the longest valid_length, rounded up.

    Raises
    ------
    ValueError
        For an empty list or a non-positive ``round_to``.
    """
    if not features:
        fail('expected at least one feature', num_features=0)
    check_positive_int('round_to', round_to, allow_none=True)
    length = max(f.valid_length for f in features)
    if round_to:
        length = -(-length // round_to) * round_to
    batch = {'input_ids': onp.full((len(features), length), pad_id, dtype=onp.int32),
             'token_types': onp.zeros((len(features), length), dtype=onp.int32),
             'p_mask': onp.zeros((len(features), length), dtype=onp.float32)}
    for b, feature in enumerate(features):
        for key in batch:
            batch[key][b, :feature.valid_length] = getattr(feature, key)
    for key in ('valid_length', 'start_position', 'end_position', 'is_impossible'):
        batch[key] = onp.array([getattr(f, key) for f in features], dtype=onp.int32)
    batch['answerable_loss_weight'] = onp.array([f.answerable_loss_weight for f in features],
                                                dtype=onp.float32)
    return batch


def length_sorted_batches(features, batch_size):
    """Feature indices in batches of ``batch_size`` features of similar length: ordered by
    ``valid_length`` (stable), so each batch pads little (``batchify`` pads to its longest).

    Returns a list of int arrays (the last batch may be shorter).
    """
    check_positive_int('batch_size', batch_size)
    order = onp.argsort([f.valid_length for f in features], kind='stable')
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
