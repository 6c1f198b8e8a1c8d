"""SQuAD 1.1 / 2.0 data (Rajpurkar et al. 2016, 2018): the named files, reading, features.

Reading lives here; tokenisation, chunked features and batching in ``squad_features``, the
official metric in ``squad_metric`` and span decoding in ``squad_decode``. This module re-exports
their public names, so ``gluon_attention.data.squad`` is the whole QA data path: ``read_squad`` ->
``convert_examples_to_features`` -> ``batchify`` -> model -> ``decode_predictions`` ->
``squad_evaluate``.
"""
import dataclasses
import json
from pathlib import Path

from .._checks import check_text, fail
from .._resources import data_file, missing_file
from .squad_decode import (best_span, decode_predictions, independent_top_spans, is_blank_input,
                           span_candidates)
from .squad_features import (SquadFeature, batchify, convert_examples_to_features,
                             default_model_dir, length_sorted_batches, load_tokenizer,
                             tokenizer_files)
from .squad_metric import (SWEEP_RULES, degenerate_null_odds, exact_match, f1_score,
                           gold_answers, normalize_answer, squad_evaluate, squad_v11_evaluate,
                           sweep_null_threshold)

__all__ = ['SQUAD_URL', 'SQUAD_FILES', 'default_data_path', 'SquadExample', 'read_squad',
           'default_model_dir', 'load_tokenizer', 'tokenizer_files', 'SquadFeature',
           'is_blank_input', 'convert_examples_to_features', 'batchify',
           'length_sorted_batches',
           'normalize_answer', 'exact_match', 'f1_score', 'gold_answers', 'SWEEP_RULES',
           'sweep_null_threshold',
           'squad_evaluate', 'squad_v11_evaluate', 'degenerate_null_odds', 'best_span',
           'span_candidates',
           'independent_top_spans',
           'decode_predictions']

#: Where the official SQuAD data sets are published.
SQUAD_URL = 'https://rajpurkar.github.io/SQuAD-explorer/'

#: Named SQuAD files -> their paths inside the data folder (see docs/data.md).
SQUAD_FILES = {
    'haystack-small': 'squad/v2.0/dev-v2.0-first2articles.haystack-small.json',
    'cs224n-16articles': 'squad/v2.0/dev-v2.0-cs224n-16articles.json',
    'v1.1-24articles': 'squad/v1.1/dev-v1.1-24articles.bloomsbury.json',
    'v1.1-super-bowl-50': 'squad/v1.1/dev-v1.1-Super_Bowl_50.derived.json',
    'v1.1-train': 'squad/v1.1/train-v1.1.explorer.derived.json',
    'v1.1-dev': 'squad/v1.1/dev-v1.1.explorer.derived.json',
    'v2.0-dev': 'squad/v2.0/dev-v2.0-35articles.xlsx.derived.json',
    'v2.0-train-10articles': 'squad/v2.0/train-v2.0-first10articles.phongntdo.json',
}


def default_data_path(name, data_dir=None):
    """Path of a named SQuAD file in the data folder, checked to exist.

    Parameters
    ----------
    name : str
        A name from :data:`SQUAD_FILES` ('haystack-small', 'cs224n-16articles',
        'v1.1-24articles', 'v1.1-super-bowl-50', 'v1.1-train', 'v1.1-dev', 'v2.0-dev',
        'v2.0-train-10articles') or its file name.
    data_dir : str or os.PathLike, optional
        The data folder; None: ``GA_DATA_DIR``, else ``../shared/data`` from the repository root
        (:func:`gluon_attention._resources.data_folder`).

    Returns
    -------
    pathlib.Path

    Raises
    ------
    ValueError
        When ``name`` is not a named file; when the file is not in the data folder (one line
        naming the path looked for and where SQuAD is published); when there is no data folder.
    """
    by_file = {Path(relative).name: relative for relative in SQUAD_FILES.values()}
    relative = SQUAD_FILES.get(name) or by_file.get(name)
    if relative is None:
        fail('name must be one of {}'.format(', '.join(repr(k) for k in SQUAD_FILES)), name=name)
    return data_file(relative, 'SQuAD', SQUAD_URL, data_dir)


@dataclasses.dataclass
class SquadExample:
    """One SQuAD question. ``answers`` holds (text, char_start) pairs; empty when impossible.

    ``plausible_answers`` (SQuAD 2.0 impossible questions only): the (text, char_start) pairs of
    the file's ``plausible_answers``, the span a crowd worker wrote the question to look like it
    asks for; entries whose offset does not point at their text are left out.
    """
    qas_id: str
    title: str
    question: str
    context: str
    answers: list
    is_impossible: bool
    plausible_answers: list = dataclasses.field(default_factory=list)


def _field(record, key, kind, where):
    if not isinstance(record, dict) or key not in record:
        keys = sorted(record) if isinstance(record, dict) else type(record).__name__
        fail('{}: expected a key {!r}'.format(where, key), keys=keys)
    value = record[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        fail('{}: expected {!r} of type {}'.format(where, key, getattr(kind, '__name__', kind)),
             **{key: value})
    if kind is str:
        check_text(value, key, where)
    return value


def _parse_question(qa, title, context, where, require_answers=True):
    qas_id = _field(qa, 'id', str, where)
    where = '{} question id={!r}'.format(where, qas_id)
    question = _field(qa, 'question', str, where)
    if not require_answers:
        return SquadExample(qas_id, title, question, context, [], False)
    impossible = bool(qa.get('is_impossible', False))
    answers = []
    for answer in _field(qa, 'answers', list, where):
        text = _field(answer, 'text', str, where)
        start = _field(answer, 'answer_start', int, where)
        if context[start:start + len(text)] != text:
            fail('{}: expected context[answer_start:answer_start + len(text)] == text'
                 .format(where),
                 answer_start=start, text=text, context_text=context[start:start + len(text)])
        answers.append((text, start))
    if impossible == bool(answers):
        fail('{}: expected answers to be empty exactly when is_impossible is true'.format(where),
             is_impossible=impossible, num_answers=len(answers))
    plausible = []
    if impossible and isinstance(qa.get('plausible_answers'), list):
        for answer in qa['plausible_answers']:
            text = answer.get('text') if isinstance(answer, dict) else None
            start = answer.get('answer_start') if isinstance(answer, dict) else None
            if (isinstance(text, str) and text and isinstance(start, int)
                    and context[start:start + len(text)] == text):
                plausible.append((text, start))
    return SquadExample(qas_id, title, question, context, answers, impossible, plausible)


def _load_json(path):
    if not Path(path).exists():
        missing_file(path, 'SQuAD', SQUAD_URL)
    try:
        with open(path, encoding='utf-8') as stream:
            return json.load(stream)
    except OSError as err:
        fail('expected a readable SQuAD JSON file', path=str(path), error=str(err))
    except ValueError as err:  # JSONDecodeError and UnicodeDecodeError
        fail('{}: expected valid JSON'.format(path), error=str(err))


def read_squad(path, titles=None, exclude_titles=None, require_answers=True):
    """Read a SQuAD 1.1 or 2.0 JSON file: training and evaluation files with their answers, or
    the questions of a prediction file (``require_answers=False``).

    Parameters
    ----------
    path : str or pathlib.Path
        The file (``{"data": [{"title", "paragraphs": [{"context", "qas": [...]}]}]}``).
        SQuAD 1.1 questions have no ``is_impossible`` key and count as answerable.
    titles : iterable of str, optional
        Keep only these articles; every title must exist in the file.
    exclude_titles : iterable of str, optional
        Drop these articles (titles absent from the file are ignored).
    require_answers : bool
        True (training, evaluation): every question needs ``answers`` (checked against the
        context and ``is_impossible``) and every article a ``title``. False (questions to
        answer): only ``id`` and ``question`` are read; ``answers``, ``is_impossible`` and
        ``plausible_answers`` are ignored (the examples have none) and a missing ``title`` is ''.

    Returns
    -------
    list of SquadExample
        In file order.

    Raises
    ------
    ValueError
        For a missing or unreadable file, invalid JSON, a missing key or wrong type, an answer whose
        ``answer_start`` does not point at its text in the context, answers inconsistent with
        ``is_impossible`` (with ``require_answers``), a duplicate question id, or an unknown title
        in ``titles``. The message is one line naming the file and the record.
    """
    raw = _load_json(path)
    keep = None if titles is None else set(titles)
    drop = set(exclude_titles or ())
    examples, seen_titles, seen_ids = [], set(), set()
    for i, article in enumerate(_field(raw, 'data', list, str(path))):
        where = '{}: data[{}]'.format(path, i)
        title = _field(article, 'title', str, where) if require_answers or (
            isinstance(article, dict) and 'title' in article) else ''
        seen_titles.add(title)
        if (keep is not None and title not in keep) or title in drop:
            continue
        for j, paragraph in enumerate(_field(article, 'paragraphs', list, where)):
            where_p = '{} (title={!r}) paragraphs[{}]'.format(where, title, j)
            context = _field(paragraph, 'context', str, where_p)
            for qa in _field(paragraph, 'qas', list, where_p):
                example = _parse_question(qa, title, context, where_p, require_answers)
                if example.qas_id in seen_ids:
                    fail('{}: expected unique question ids'.format(path), qas_id=example.qas_id)
                seen_ids.add(example.qas_id)
                examples.append(example)
    if keep is not None and keep - seen_titles:
        fail('{}: expected every requested title in the file'.format(path),
             missing=sorted(keep - seen_titles))
    return examples
