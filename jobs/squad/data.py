"""The data of the SQuAD job: which files and articles, training features, evaluation features.

Every function takes a config of :mod:`~jobs.squad.config`. The training
questions are those of ``--train-file`` and ``--extra-train-file`` minus the evaluation articles
(``--exclude-titles``) and the articles held out to choose the null threshold
(``--threshold-titles``), each question once.
"""
import json
import os
import sys

import numpy as onp

from gluon_attention.checks import fail
from gluon_attention.data import squad
from gluon_attention.data.squad_overlap import (find_overlap, normalize_title, overlap_between,
                                                 paragraph_key)
from gluon_attention.pipelines.features import (  # noqa: F401  (part of this module's API)
    INPUT_DTYPES, INPUT_NAMES, eval_features, eval_stride)
from gluon_attention.resources import default_model_dir, missing_file

__all__ = ['INPUT_NAMES', 'INPUT_DTYPES', 'data_path', 'check_data_files', 'titles',
           'default_model_folder', 'extra_train_files',
           'check_freeze_layers', 'check_model_fits', 'select_training', 'training_examples',
           'load_training_features', 'heldout_examples', 'check_no_shared_data',
           'note_evaluated_threshold_articles', 'paragraph_keys', 'check_not_trained_on',
           'eval_stride', 'load_eval_examples', 'eval_features']



def data_path(name, data_dir=None):
    """A named SQuAD file (:data:`~gluon_attention.data.squad.SQUAD_FILES`) -> its path in the
    data folder (``data_dir``, else ``GA_DATA_DIR``, else ``../shared/data`` from the repository
    root); anything else is a path. ValueError (one line) when the file does not exist: a bare
    word (no folder, no extension, e.g. the misspelt ``haystack-smal``) lists the named data
    sets; a path names the path looked for and where SQuAD is published."""
    name = str(name)
    if name in squad.SQUAD_FILES and not os.path.exists(name):
        return str(squad.default_data_path(name, data_dir))
    if not os.path.exists(name) and not os.path.dirname(name) and not os.path.splitext(name)[1]:
        fail('expected a SQuAD JSON file or a named data set ({})'.format(
            ', '.join(squad.SQUAD_FILES)), path=name)
    if not os.path.exists(name):
        missing_file(name, 'SQuAD', squad.SQUAD_URL)
    return name


def check_data_files(config):
    """Every SQuAD file ``config`` names (``train_file``, ``extra_train_file``, ``eval_file``,
    ``predict_file``, those it has) exists: ValueError for the first that does not, before any
    work starts."""
    for option in ('train_file', 'eval_file', 'predict_file'):
        if getattr(config, option, ''):
            data_path(getattr(config, option), config.data_dir)
    for name in extra_train_files(config):
        data_path(name, config.data_dir)


def extra_train_files(config):
    """The files of ``--extra-train-file`` (comma-separated; empty items dropped), as given."""
    return titles(getattr(config, 'extra_train_file', '') or '')


def titles(text):
    """A comma-separated title list -> list of titles (empty items dropped)."""
    return [t for t in text.split(',') if t]


def default_model_folder(model_dir):
    """``model_dir``, or the embedded pretrained encoder's folder when it is None."""
    return str(model_dir) if model_dir else str(default_model_dir())


def check_freeze_layers(freeze_layers, num_layers):
    """ValueError unless ``freeze_layers`` is at most the encoder's ``num_layers`` (None: not
    known, nothing checked)."""
    if num_layers is not None and freeze_layers > num_layers:
        fail("--freeze-layers must be at most the encoder's {} layers".format(num_layers),
             freeze_layers=freeze_layers)


def check_model_fits(folder, options):
    """Options that must fit the model of ``folder`` (its ``config.json``), checked before any
    data is read: sequence lengths within its learned positions (a longer input would silently
    read clipped positions), and ``freeze_layers``, when given, within its layers.

    ``options`` maps option names to values; ValueError names the first that does not fit.
    """
    config_file = os.path.join(folder, 'config.json')
    if not os.path.exists(config_file):
        return
    with open(config_file, encoding='utf-8') as handle:
        model_config = json.load(handle)
    positions = model_config.get('max_position_embeddings')
    for name, value in options.items():
        if name == 'freeze_layers':
            check_freeze_layers(value, model_config.get('num_hidden_layers'))
        elif positions and value > positions:
            fail("--{} must be at most the model's max_position_embeddings={}".format(
                name.replace('_', '-'), positions), **{name: value})


def select_training(features, examples, config):
    """Which training features to keep (deterministic in ``config.seed``).

    Every feature holding its question's answer is kept; features of unanswerable questions are
    kept with probability ``config.impossible_ratio``; chunks of answerable questions that miss
    the answer with probability ``config.no_answer_chunk_ratio``. With ``config.plausible_spans``,
    only the unanswerable-question chunks holding the plausible span count as unanswerable
    features; their other chunks are treated like chunks that miss the answer.
    """
    rng = onp.random.RandomState(config.seed)
    keep = []
    for feature in features:
        draw = rng.rand()
        if not feature.is_impossible:
            keep.append(feature)
        elif examples[feature.example_index].is_impossible and (
                not config.plausible_spans or feature.start_position > 0):
            if draw < config.impossible_ratio:
                keep.append(feature)
        elif draw < config.no_answer_chunk_ratio:
            keep.append(feature)
    return keep[:config.max_train_features] if config.max_train_features else keep


def training_examples(config):
    """The training questions: both files minus the excluded and the held-out articles, each
    question once. ValueError when an ``--exclude-titles`` title is in neither training file (a
    misspelt title would otherwise train on the evaluation articles)."""
    # read once: titles and examples
    read = squad.read_squad(data_path(config.train_file, config.data_dir))
    for name in extra_train_files(config):
        read += squad.read_squad(data_path(name, config.data_dir))
    present = {normalize_title(e.title) for e in read}
    absent = [t for t in titles(config.exclude_titles) if normalize_title(t) not in present]
    if absent:
        fail('--exclude-titles: expected every requested title in the training files '
             '(--train-file, --extra-train-file)', missing=sorted(absent))
    # the held-out articles are left out of both files too, for the threshold; titles compared
    # normalised (case, whitespace, NFC), so another spelling of an article is left out too
    exclude = {normalize_title(t)
               for t in titles(config.exclude_titles) + titles(config.threshold_titles)}
    examples = [e for e in read if normalize_title(e.title) not in exclude]
    if not config.version_2_with_negative:
        examples = [e for e in examples if not e.is_impossible]
    unique = {}
    for example in examples:        # the v1.1 and v2.0 files share answerable questions
        unique.setdefault((example.question.strip(), example.context), example)
    return list(unique.values())


def load_training_features(config, tokenizer, examples=None):
    """The kept training features and the training questions (``examples``: those of
    :func:`training_examples`, read here when None)."""
    examples = training_examples(config) if examples is None else examples
    stats = {}
    features = squad.convert_examples_to_features(
        examples, tokenizer, config.max_seq_length, config.doc_stride, config.max_query_length,
        is_training=True, stats=stats, plausible_spans=bool(config.plausible_spans))
    features = select_training(features, examples, config)
    if config.null_head_articles == 'with-impossible':
        # Articles without a single impossible question (all of SQuAD 1.1) would teach the
        # answerable head the topic of the article instead of the question: train it only on
        # articles that hold both kinds of question.
        mixed = {e.title for e in examples if e.is_impossible}
        for feature in features:
            if examples[feature.example_index].title not in mixed:
                feature.answerable_loss_weight = 0.0
    print('train: {} questions -> {} features kept ({} gold-span mismatches skipped, {} '
          'answers lost to chunking)'.format(len(examples), len(features),
                                             stats.get('skipped', 0), stats['lost_to_chunking']))
    return features, examples


def heldout_examples(config):
    """The questions of the ``--threshold-titles`` articles of ``--train-file`` (ValueError when
    a title is not in the file)."""
    names = titles(config.threshold_titles)
    if not names:
        return []
    return squad.read_squad(data_path(config.train_file, config.data_dir), titles=names)


def check_no_shared_data(train_examples, eval_examples, trained_titles=(), heldout_examples=()):
    """Refuse training and evaluation (or threshold) sets that share an article or a paragraph.

    Titles are compared normalised and paragraphs whatever their title
    (:mod:`gluon_attention.data.squad_overlap`).

    Parameters
    ----------
    train_examples, eval_examples : list of SquadExample
        The training questions (not the articles held out for the threshold: those are neither
        training nor evaluation) and the evaluation questions.
    trained_titles : iterable of str
        Titles the model was trained on before (recorded by the folder it starts from).
    heldout_examples : list of SquadExample
        The questions of the articles held out to choose the null threshold: the training
        questions must share no article and no paragraph with them either.

    Returns
    -------
    dict
        The overlap checked, for ``metrics.json``: ``train_eval_shared_titles`` and
        ``train_eval_shared_paragraphs``, both 0.

    Raises
    ------
    ValueError
        One line naming the shared titles, the number of shared paragraphs, the training titles
        to fix (leave out) and their first question ids; or, for the titles of the starting
        folder, the evaluation titles and question ids.
    """
    for other, what in ((eval_examples, 'evaluation'), (heldout_examples, 'the threshold '
                                                                          'articles')):
        overlap = overlap_between(train_examples, other)
        if overlap:
            fail('training and {} must share no article and no paragraph (leave the listed '
                 'articles out of training with --exclude-titles, or use other articles)'
                 .format(what), **overlap.received())
    inherited = find_overlap(eval_examples, trained_titles)
    if inherited:
        fail('evaluation must hold no article the starting model folder was trained on (the '
             'trained_titles of its qa_config.json)', **inherited.received())
    return {'train_eval_shared_titles': 0, 'train_eval_shared_paragraphs': 0}


def note_evaluated_threshold_articles(heldout_examples, eval_examples):
    """Say (stderr) when articles held out to choose the null threshold are also evaluated: the
    saved threshold is then chosen on evaluation questions (not refused: they are not training
    data)."""
    evaluated = {normalize_title(e.title) for e in eval_examples}
    shared = sorted({e.title for e in heldout_examples if normalize_title(e.title) in evaluated})
    if shared:
        print('note: the threshold articles {} are also evaluated: the null threshold is chosen '
              'on evaluation questions'.format(', '.join(shared)), file=sys.stderr)


def paragraph_keys(examples):
    """The paragraphs (context texts) of ``examples`` as a compact record: the
    :func:`~gluon_attention.data.squad_overlap.paragraph_key` of each context, distinct, sorted
    (``trained_paragraphs`` of ``qa_config.json``)."""
    return sorted({paragraph_key(context) for context in {e.context for e in examples}})


def check_not_trained_on(qa_config, eval_examples, eval_file, converted_from=None):
    """Refuse to evaluate a model folder on the articles or paragraphs it was trained on.

    ``qa_config``: the folder's ``qa_config.json``. Its ``trained_titles`` are refused by
    normalised title, its ``trained_paragraphs`` (:func:`paragraph_keys`) by context text,
    whatever the title. A folder written before a record is checked on what it records, and a
    note (stderr) says what is not checked (and, for a folder converted from the GluonNLP 0.10
    model ``converted_from``, that it has no training record). Returns the overlap checked for ``metrics.json``
    (``train_eval_shared_titles``, ``train_eval_shared_paragraphs``: 0 where checked);
    ValueError naming the shared titles, the number of shared paragraphs, the evaluation titles
    holding them and their first question ids.
    """
    trained_titles = qa_config.get('trained_titles')
    trained_paragraphs = qa_config.get('trained_paragraphs')
    overlap = find_overlap(eval_examples, trained_titles or (), trained_paragraphs or ())
    if overlap:
        fail('--eval-file must hold no article and no paragraph the model was trained on (the '
             'trained_titles and trained_paragraphs of its qa_config.json; a paragraph whatever '
             'its title)', eval_file=eval_file, **overlap.received())
    if trained_paragraphs is None:
        why = ('converted from the GluonNLP 0.10 model {}, it has no training record'.format(
            converted_from) if converted_from else 'written before they were recorded')
        print('note: the model folder records no trained paragraphs ({}): {}'.format(
            why, 'only article titles are checked against its training data'
            if trained_titles is not None else 'nothing is checked against its training data'),
            file=sys.stderr)
    checked = {'train_eval_shared_titles': trained_titles, 'train_eval_shared_paragraphs':
               trained_paragraphs}
    return {key: 0 for key, record in checked.items() if record is not None}


def load_eval_examples(config):
    """The evaluation questions of ``config.eval_file`` less the ``eval_exclude_titles`` articles
    (ValueError naming a title the file does not hold), the first ``max_eval_examples``; with
    ``version_2_with_negative`` 0, its answerable questions only (ValueError when none)."""
    examples = squad.read_squad(data_path(config.eval_file, config.data_dir))
    left_out = set(titles(config.eval_exclude_titles))
    absent = sorted(left_out - {e.title for e in examples})
    if absent:
        fail('--eval-exclude-titles: expected every title in --eval-file', missing=absent,
             eval_file=config.eval_file)
    examples = [e for e in examples if e.title not in left_out]
    if not config.version_2_with_negative:
        answerable = [e for e in examples if e.answers]
        if len(answerable) < len(examples):
            print('note: --version-2-with-negative 0 leaves the {} impossible questions of {} out '
                  'of evaluation'.format(len(examples) - len(answerable), config.eval_file))
        examples = answerable
    if not examples:
        fail('--eval-file must hold at least one question{}'.format(
            '' if config.version_2_with_negative else ' with an answer (--version-2-with-negative '
            '0)'), eval_file=config.eval_file)
    if config.max_eval_examples:
        examples = examples[:config.max_eval_examples]
    return examples
