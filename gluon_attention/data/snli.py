"""SNLI readers, vocabulary, length-bucketed batches and classification metrics.

Two on-disk formats are read (Bowman et al., 2015, "A large annotated corpus for learning natural
language inference", the Stanford Natural Language Inference corpus, CC BY-SA 4.0):

- SNLI 1.0 ``.jsonl`` (one JSON object per line with ``sentence1``, ``sentence2`` and ``gold_label``;
  raw text; pairs labelled ``-`` have no gold label and are skipped and counted);
- the one-sentence-per-line layout used by InferSent and e-SNLI: ``s1.<split>`` (premises),
  ``s2.<split>`` (hypotheses) and ``labels.<split>`` aligned by line, PTB-tokenized text.

Both go through one tokenizer (:func:`tokenize`), so a vocabulary built on one format serves the
other. Pairs are matched across formats on :func:`normalize_text`. Labels are integers in the order of
:data:`LABELS`.
"""
import collections
import gzip
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as onp

from .._checks import check_positive_int, fail, fail_type
from .._resources import data_file, data_folder, missing_file
from .glove import GLOVE_URL

__all__ = ['LABELS', 'PAD', 'UNK', 'NLIPairs', 'tokenize', 'normalize_text', 'read_snli_jsonl',
           'read_snli_lines', 'read_snli', 'concat_pairs', 'remove_overlap', 'pair_digests',
           'Vocab',
           'encode_pairs', 'pad_batch', 'bucket_batches', 'Batch', 'iter_batches',
           'classification_metrics', 'SNLI_URL', 'DEFAULT_FILES', 'default_path',
           'default_paths']

LABELS = ('entailment', 'contradiction', 'neutral')
PAD = '<pad>'
UNK = '<unk>'

_PTB_QUOTES = re.compile(r"``|''")
_CLITIC = re.compile(r"(\w)(n't|'s|'re|'ll|'ve|'m|'d)\b")
_TOKEN = re.compile(r"n't|'(?:s|re|ll|ve|m|d)\b|\w+|[^\w\s]")
_NOT_WORD = re.compile(r'[\W_]+')


@dataclass
class NLIPairs:
    """Sentence pairs with integer labels.

    Attributes
    ----------
    premises, hypotheses : list of str
        The sentences as read (raw text for jsonl, PTB-tokenized text for the line format).
    labels : list of int
        Index into :data:`LABELS` for each pair.
    num_skipped : int
        Pairs dropped while reading because their gold label was ``-``.
    source : str
        Where the pairs came from (for reports).
    """
    premises: list = field(default_factory=list)
    hypotheses: list = field(default_factory=list)
    labels: list = field(default_factory=list)
    num_skipped: int = 0
    source: str = ''

    def __len__(self):
        return len(self.labels)

    def label_counts(self):
        """Dict from label name to the number of pairs with that label."""
        counts = collections.Counter(self.labels)
        return {name: counts.get(i, 0) for i, name in enumerate(LABELS)}


def tokenize(text):
    """Lowercase word tokens, the same for raw and PTB-tokenized text.

    PTB quotes (````` `` ``` and ``''``) become ``"``, clitics are split off as in the Penn Treebank
    (``don't`` -> ``do n't``, ``dog's`` -> ``dog 's``), punctuation marks are single tokens.

    >>> tokenize("A dog's ball isn't ``red''.")
    ['a', 'dog', "'s", 'ball', 'is', "n't", '"', 'red', '"', '.']
    """
    if not isinstance(text, str):
        fail_type('text must be a str', text=type(text).__name__)
    text = _PTB_QUOTES.sub('"', text.lower())
    return _TOKEN.findall(_CLITIC.sub(r'\1 \2', text))


def normalize_text(text):
    """Key for matching a sentence across formats: lowercase, PTB quotes undone, only letters/digits.

    >>> normalize_text("A man's hat . ") == normalize_text("a man 's hat.")
    True
    """
    return _NOT_WORD.sub('', _PTB_QUOTES.sub('"', text.lower()))


def _label_id(name, where):
    if name not in LABELS:
        fail('gold labels must be one of {} (or "-" in jsonl, skipped)'.format(', '.join(LABELS)),
             **{'label at ' + where: name})
    return LABELS.index(name)


def read_snli_jsonl(path):
    """Read an SNLI 1.0 ``.jsonl`` file (plain or ``.gz``), skipping and counting ``-`` labels.

    Parameters
    ----------
    path : str or Path
        File with one JSON object per line (the last line may lack a newline).

    Returns
    -------
    NLIPairs
        ``num_skipped`` holds the number of pairs labelled ``-``.
    """
    pairs = NLIPairs(source=str(path))
    with _open_text(path) as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                label, premise, hypothesis = row['gold_label'], row['sentence1'], row['sentence2']
            except (ValueError, KeyError, TypeError):
                fail('each line must be a JSON object with gold_label, sentence1 and sentence2',
                     **{'line {} of {}'.format(number, path): line[:80]})
            if label == '-':
                pairs.num_skipped += 1
                continue
            pairs.labels.append(_label_id(label, '{}:{}'.format(path, number)))
            pairs.premises.append(premise)
            pairs.hypotheses.append(hypothesis)
    return pairs


def _line_files(prefix):
    """Resolve ``<dir>/<split>`` (or ``<dir>/s1.<split>``) to the s1/s2/labels paths."""
    prefix = Path(prefix)
    split = prefix.name[3:] if prefix.name.startswith('s1.') else prefix.name
    return [prefix.parent / '{}.{}'.format(kind, split) for kind in ('s1', 's2', 'labels')]


def read_snli_lines(prefix):
    """Read the one-sentence-per-line format (``s1.X``, ``s2.X``, ``labels.X``).

    Parameters
    ----------
    prefix : str or Path
        The folder plus the split name, e.g. ``.../esnli_infersent_format/dev`` for ``s1.dev``,
        ``s2.dev`` and ``labels.dev`` in that folder (the path of ``s1.dev`` itself is accepted too).

    Returns
    -------
    NLIPairs
        Pairs labelled ``-`` (if any) are skipped and counted.
    """
    paths = _line_files(prefix)
    missing = [str(p) for p in paths if not p.is_file()]
    if len(missing) == len(paths):
        missing_file(paths[0], 'SNLI', SNLI_URL)
    if missing:
        fail('the line format needs s1.X, s2.X and labels.X in one folder', missing=missing)
    columns = []
    for path in paths:
        with _open_text(path) as handle:
            columns.append(handle.read().splitlines())
    if len(set(map(len, columns))) != 1:
        fail('s1, s2 and labels must have the same number of lines',
             line_counts=[len(c) for c in columns])
    pairs = NLIPairs(source=str(paths[0].parent / paths[0].name[3:]))
    for number, (premise, hypothesis, label) in enumerate(zip(*columns), 1):
        label = label.strip()
        if label == '-':
            pairs.num_skipped += 1
            continue
        pairs.labels.append(_label_id(label, '{}:{}'.format(paths[2], number)))
        pairs.premises.append(premise.strip())
        pairs.hypotheses.append(hypothesis.strip())
    return pairs


def read_snli(path):
    """Read either format: ``*.jsonl`` / ``*.jsonl.gz`` files as jsonl, anything else as a prefix."""
    name = str(path)
    if name.endswith(('.jsonl', '.jsonl.gz')):
        return read_snli_jsonl(path)
    return read_snli_lines(path)


def concat_pairs(parts):
    """Join several :class:`NLIPairs` (skipped counts add up)."""
    out = NLIPairs(source=' + '.join(p.source for p in parts))
    for part in parts:
        out.premises += part.premises
        out.hypotheses += part.hypotheses
        out.labels += part.labels
        out.num_skipped += part.num_skipped
    return out


def remove_overlap(pairs, other):
    """Drop the pairs of ``pairs`` whose (premise, hypothesis) also occurs in ``other``.

    Sentences are compared with :func:`normalize_text`, so PTB-tokenized and raw text match.

    Returns
    -------
    (NLIPairs, int)
        The remaining pairs and the number removed.
    """
    seen = {(normalize_text(p), normalize_text(h))
            for p, h in zip(other.premises, other.hypotheses)}
    keep = NLIPairs(num_skipped=pairs.num_skipped, source=pairs.source)
    for premise, hypothesis, label in zip(pairs.premises, pairs.hypotheses, pairs.labels):
        if (normalize_text(premise), normalize_text(hypothesis)) not in seen:
            keep.premises.append(premise)
            keep.hypotheses.append(hypothesis)
            keep.labels.append(label)
    return keep, len(pairs) - len(keep)


def pair_digests(pairs, digits=12):
    """One digest per pair of ``pairs``, in order: the first ``digits`` hex digits of the sha1 of
    ``normalize_text(premise) + '\t' + normalize_text(hypothesis)``.

    A digest identifies a pair whatever file, format or order it comes in (the matching of
    :func:`remove_overlap`); with 12 digits (48 bits) two different pairs among 10,000 x 10,000
    share a digest with probability below 1e-6.
    """
    check_positive_int('digits', digits)
    return [hashlib.sha1('{}\t{}'.format(normalize_text(p), normalize_text(h)).encode(
        'utf-8')).hexdigest()[:digits] for p, h in zip(pairs.premises, pairs.hypotheses)]


class Vocab:
    """Token <-> index map: ``<pad>`` is 0, ``<unk>`` is 1, then tokens by falling count.

    Parameters
    ----------
    counter : Mapping[str, int] or None
        Token counts (e.g. from the training split).
    min_count : int
        Tokens seen fewer times map to ``<unk>``.
    tokens : list of str, optional
        An explicit index-to-token list starting with ``<pad>``, ``<unk>`` (used to reload).
    """

    def __init__(self, counter=None, min_count=1, tokens=None):
        check_positive_int('min_count', min_count)
        if tokens is None:
            kept = [t for t, c in (counter or {}).items() if c >= min_count and t not in (PAD, UNK)]
            kept.sort(key=lambda t: (-counter[t], t))
            tokens = [PAD, UNK] + kept
        if list(tokens[:2]) != [PAD, UNK]:
            fail('tokens must start with {!r}, {!r}'.format(PAD, UNK), tokens=list(tokens[:2]))
        self.idx_to_token = list(tokens)
        self.token_to_idx = {t: i for i, t in enumerate(self.idx_to_token)}

    pad_id, unk_id = 0, 1

    def __len__(self):
        return len(self.idx_to_token)

    def __call__(self, tokens):
        """Indices (list of int) of ``tokens``; unknown tokens give ``unk_id``."""
        return [self.token_to_idx.get(t, self.unk_id) for t in tokens]

    @classmethod
    def from_pairs(cls, pairs, min_count=1):
        """Vocabulary of the tokens of both sides of ``pairs``."""
        counter = collections.Counter()
        for sentence in pairs.premises + pairs.hypotheses:
            counter.update(tokenize(sentence))
        return cls(counter, min_count=min_count)

    def save(self, path):
        """Write the index-to-token list as JSON."""
        Path(path).write_text(json.dumps(self.idx_to_token, ensure_ascii=False), encoding='utf-8')

    @classmethod
    def load(cls, path):
        return cls(tokens=json.loads(Path(path).read_text(encoding='utf-8')))


def encode_pairs(pairs, vocab, max_length=None):
    """Token ids of both sides.

    Returns
    -------
    (list of ndarray, list of ndarray, ndarray)
        Premise ids and hypothesis ids (int32 (L,) each, at most ``max_length`` long, at least 1: an
        empty sentence becomes one ``<unk>``), and the labels, int32 (N,).
    """
    check_positive_int('max_length', max_length, allow_none=True)

    def ids(sentence):
        tokens = vocab(tokenize(sentence))[:max_length] or [vocab.unk_id]
        return onp.asarray(tokens, dtype=onp.int32)
    return ([ids(s) for s in pairs.premises], [ids(s) for s in pairs.hypotheses],
            onp.asarray(pairs.labels, dtype=onp.int32))


def pad_batch(sequences, pad_id=0):
    """Pad 1-D int sequences to one (B, L) int32 array; returns ``(ids, valid_length int32 (B,))``."""
    lengths = onp.asarray([len(s) for s in sequences], dtype=onp.int32)
    ids = onp.full((len(sequences), max(lengths.max(initial=0), 1)), pad_id, dtype=onp.int32)
    for row, sequence in zip(ids, sequences):
        row[:len(sequence)] = sequence
    return ids, lengths


def bucket_batches(lengths, batch_size, rng=None):
    """Batches of indices with similar lengths (less padding), in random order when ``rng`` is given.

    Parameters
    ----------
    lengths : array-like of int, (N,)
        Length of each example (e.g. the longer side of a pair).
    batch_size : int
    rng : numpy.random.Generator, optional
        Shuffles within length ties (lengths get noise in [0, 2)) and the order of the batches;
        without it the batches are deterministic, sorted by length.

    Returns
    -------
    list of ndarray
        Index arrays (int64) of at most ``batch_size`` elements covering every example once.
    """
    check_positive_int('batch_size', batch_size)
    keys = onp.asarray(lengths, dtype=onp.float64)
    if rng is not None:
        keys = keys + rng.uniform(0.0, 2.0, size=keys.shape)
    order = onp.argsort(keys, kind='stable')
    batches = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    if rng is not None:
        batches = [batches[i] for i in rng.permutation(len(batches))]
    return batches


Batch = collections.namedtuple('Batch', ['premise', 'hypothesis', 'premise_valid_length',
                                         'hypothesis_valid_length', 'labels', 'index'])
Batch.__doc__ = """One padded batch (NumPy arrays).

premise int32 (B, L_p), hypothesis int32 (B, L_h), premise_valid_length and
hypothesis_valid_length int32 (B,), labels int32 (B,), index int64 (B,): the rows of the encoded
data set the batch holds. ``batch[:4]`` are the model inputs in call order."""


def iter_batches(encoded, batch_size, rng=None, pad_id=0):
    """Yield length-bucketed :class:`Batch` es covering ``encoded`` (from :func:`encode_pairs`).

    See :func:`bucket_batches` for ``rng`` (shuffled when given, sorted by length otherwise).
    """
    premises, hypotheses, labels = encoded
    lengths = [max(len(p), len(h)) for p, h in zip(premises, hypotheses)]
    for index in bucket_batches(lengths, batch_size, rng):
        premise, premise_length = pad_batch([premises[i] for i in index], pad_id)
        hypothesis, hypothesis_length = pad_batch([hypotheses[i] for i in index], pad_id)
        yield Batch(premise, hypothesis, premise_length, hypothesis_length, labels[index], index)


def classification_metrics(labels, predictions, baseline_label=None, names=LABELS):
    """Accuracy, per-class precision/recall/F1, confusion matrix and the majority-class baseline.

    Parameters
    ----------
    labels, predictions : array-like of int, (N,)
        Gold and predicted class indices into ``names``.
    baseline_label : int, optional
        The class a majority-class baseline always predicts (the training split's most frequent
        class); by default the most frequent class of ``labels``.

    Returns
    -------
    dict
        ``accuracy``, ``macro_f1``, ``per_class`` {name: {precision, recall, f1, support}},
        ``confusion_matrix`` (rows gold, columns predicted, in ``labels_order``), ``labels_order``,
        ``majority_baseline`` {label, accuracy}, ``num_examples``.
    """
    labels = onp.asarray(labels, dtype=onp.int64)
    predictions = onp.asarray(predictions, dtype=onp.int64)
    if labels.shape != predictions.shape or labels.ndim != 1:
        fail('labels and predictions must be 1-D and of equal length',
             shapes=(labels.shape, predictions.shape))
    k = len(names)
    confusion = onp.zeros((k, k), dtype=onp.int64)
    onp.add.at(confusion, (labels, predictions), 1)
    per_class = {}
    for i, name in enumerate(names):
        tp, gold, predicted = confusion[i, i], confusion[i].sum(), confusion[:, i].sum()
        precision = tp / predicted if predicted else 0.0
        recall = tp / gold if gold else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        per_class[name] = {'precision': float(precision), 'recall': float(recall),
                           'f1': float(f1), 'support': int(gold)}
    if baseline_label is None:
        baseline_label = int(onp.bincount(labels, minlength=k).argmax()) if labels.size else 0
    n = max(labels.size, 1)
    return {'num_examples': int(labels.size),
            'accuracy': float(onp.trace(confusion) / n),
            'macro_f1': float(onp.mean([c['f1'] for c in per_class.values()])),
            'per_class': per_class,
            'labels_order': list(names),
            'confusion_matrix': confusion.tolist(),
            'majority_baseline': {'label': names[baseline_label],
                                  'accuracy': float(onp.mean(labels == baseline_label)) if labels.size else 0.0}}


#: Where the official SNLI corpus is published.
SNLI_URL = 'https://nlp.stanford.edu/projects/snli/'
#: The default run's files, inside the data folder (see docs/data.md).
DEFAULT_FILES = {
    'train': 'snli/esnli_infersent_format/dev',
    'valid': ('snli/jsonl/snli_1.0_dev_subsetA_1289.jsonl',
              'snli/jsonl/snli_1.0_dev_subsetB_1277.jsonl'),
    'glove': 'embeddings/glove.6B.100d.sample.txt.gz',
}


def default_path(kind, data_dir=None):
    """A file (or line-format prefix) the default ``train_nli.py`` run reads, in the data folder,
    checked to exist.

    Parameters
    ----------
    kind : {'train', 'valid', 'glove'}
        ``train``: the e-SNLI line-format dev prefix (``s1.dev``, ``s2.dev``, ``labels.dev``);
        ``valid``: the two SNLI 1.0 jsonl subsets; ``glove``: the 100-d GloVe sample (first 100
        words of glove.6B.100d).
    data_dir : str or os.PathLike, optional
        The data folder; None: ``GA_DATA_DIR``, else ``../shared/data`` from the repository root
        (:func:`gluon_attention._resources.data_folder`).

    Returns
    -------
    pathlib.Path, or a list of two for ``valid``

    Raises
    ------
    ValueError
        For another ``kind``; one line naming the first file not found and where its data set is
        published; no data folder (an installed package without ``data_dir`` or ``GA_DATA_DIR``).
    """
    if kind not in DEFAULT_FILES:
        fail('kind must be one of {}'.format(', '.join(map(repr, DEFAULT_FILES))), kind=kind)
    if kind == 'glove':
        return data_file(DEFAULT_FILES['glove'], 'GloVe', GLOVE_URL, data_dir)
    if kind == 'valid':
        return [data_file(name, 'SNLI', SNLI_URL, data_dir) for name in DEFAULT_FILES['valid']]
    for relative in _line_files(DEFAULT_FILES['train']):
        data_file(relative, 'SNLI', SNLI_URL, data_dir)
    return data_folder(data_dir)[0] / DEFAULT_FILES['train']


def default_paths(data_dir=None):
    """``{kind: default_path(kind, data_dir)}`` for the three kinds of :func:`default_path`."""
    return {kind: default_path(kind, data_dir) for kind in DEFAULT_FILES}


def _open_text(path):
    path = os.fspath(path)
    if not os.path.isfile(path):
        missing_file(path, 'SNLI', SNLI_URL)
    if path.endswith('.gz'):
        return gzip.open(path, 'rt', encoding='utf-8')
    return open(path, encoding='utf-8')
