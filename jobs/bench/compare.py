"""Our SQuAD 1.1 fine-tuning against PyTorch + transformers on the same data and budget
(``scripts/compare_transformers.py``): the feature file both sides read, and the two recipes.

One ``.npz`` holds everything the two sides train and predict on, so neither tokenises:

- ``train/*``: the training chunks of ``run_squad.py train`` on SQuAD 1.1 (T=128, stride 64,
  queries cut at 32 tokens, the chunks without the answer kept at 5% with the job's default seed),
  zero-padded to T: ``input_ids`` int32, ``token_types`` int8, ``p_mask`` int8 (1 = may be an
  answer position), ``valid_length``, ``start_position``, ``end_position``, ``is_impossible``,
  ``example_index`` int32, ``answerable_loss_weight`` float32;
- ``dev/*``: the same arrays for every chunk of the dev questions at the evaluation lengths
  (T=384, stride 128), plus what decoding reads: ``chunk_index``, ``context_offset``,
  ``chunk_start``, ``chunk_length`` (F,), ``token_to_char`` (sum of chunk lengths, 2) and
  ``token_is_max_context`` (same rows), the chunks one after another;
- ``schedule/seed<S>/index`` and ``.../offsets``: for each seed, the feature indices of every
  step, as our training loop draws them (:func:`~jobs.squad.loop.schedule`:
  shuffled per epoch, steps of similar lengths), flattened, step s being
  ``index[offsets[s]:offsets[s + 1]]``; a run of N steps takes the first N;
- ``meta``: one JSON string (the options, the model folder and the sha256 of its weights, the
  dev questions with their answers, counts, an id that each run records).

A step's batch is those features padded to the longest one rounded up to a multiple of 8
(:func:`~gluon_attention.data.squad.batchify`), on both sides.
"""
import collections
import dataclasses
import json
import os
import time
import uuid

import numpy as onp

from gluon_attention.checks import fail
from gluon_attention.data import squad

from ..engine.checkpoints import sha256_file
from ..engine.common import atomic_path
from ..engine.config import option
from ..squad.config import TrainConfig
from ..squad.data import (check_model_fits, check_no_shared_data, data_path, eval_stride,
                          load_training_features, training_examples)
from ..squad.loop import schedule

__all__ = ['FORMAT', 'HELD_OUT_TITLES', 'OUR_OUTPUTS', 'RECIPE_OPTIONS', 'TRANSFORMERS_EXAMPLE',
           'recipes', 'FeatureFileConfig', 'check_feature_config', 'write_feature_file',
           'read_feature_file', 'dev_prefix', 'TrainRow']

FORMAT = 'squad-comparison-features/1'
#: The SQuAD 1.1 training articles the official-protocol run holds out (docs/squad.md).
HELD_OUT_TITLES = 'Hyderabad,Iran,Switzerland,Wayback_Machine'
#: The training options a recipe sets (options of ``run_squad.py train``).
RECIPE_OPTIONS = ('lr', 'warmup_ratio', 'weight_decay', 'adam_epsilon', 'max_grad_norm',
                  'freeze_word_embeddings', 'freeze_layers', 'dropout', 'attention_dropout')
#: The ``transformers`` question-answering example's defaults (its README's learning rate,
#: ``TrainingArguments``' defaults otherwise: no warm-up, linear decay, no weight decay, AdamW
#: epsilon 1e-8, gradient norm clipped at 1, nothing frozen); the dropout rates are the model's
#: ``config.json`` ones (:func:`recipes`).
TRANSFORMERS_EXAMPLE = {'lr': 3e-5, 'warmup_ratio': 0.0, 'weight_decay': 0.0, 'adam_epsilon': 1e-8,
                        'max_grad_norm': 1.0, 'freeze_word_embeddings': 0, 'freeze_layers': 0}
#: The arrays of an ``ours`` run's ``dev_outputs.npz``, in the order of ``QAInference``.
OUR_OUTPUTS = ('start_top_logits', 'start_top_index', 'end_top_logits', 'end_top_index',
               'answerable_logits')
_BATCH_KEYS = ('input_ids', 'token_types', 'p_mask', 'valid_length', 'start_position',
               'end_position', 'is_impossible', 'answerable_loss_weight')
_DTYPES = {'token_types': onp.int8, 'p_mask': onp.int8, 'answerable_loss_weight': onp.float32}
_DEV_KEYS = ('chunk_index', 'context_offset', 'chunk_start', 'chunk_length')

#: A training feature as read back: the fields :func:`~gluon_attention.data.squad.batchify`
#: and the training loop read (token arrays of ``valid_length`` entries).
TrainRow = collections.namedtuple('TrainRow', _BATCH_KEYS)


@dataclasses.dataclass
class FeatureFileConfig:
    """features: the training and dev features of the comparison, in one file."""
    output: str = option('runs/compare/features.npz', 'the feature file to write')
    train_file: str = option('v1.1-train', 'SQuAD 1.1 training file (a path or a named file)')
    exclude_titles: str = option(HELD_OUT_TITLES, 'training articles left out (those the '
                                 'official-protocol run holds out)')
    dev_file: str = option('v1.1-dev', 'SQuAD 1.1 dev file (a path or a named file)')
    max_dev_questions: int = option(0, 'keep whole dev articles, in file order, while their '
                                    'questions add up to at most this many (the first article '
                                    'always; 0: every question)')
    max_seq_length: int = option(128, 'training chunk length, in tokens')
    doc_stride: int = option(64, 'distance between training chunk starts, in tokens')
    eval_max_seq_length: int = option(384, 'dev chunk length, in tokens (stride: as evaluate)')
    max_query_length: int = option(32, 'questions are cut to this many tokens')
    seeds: str = option('1,2', 'comma-separated seeds whose batch order is stored')
    batch: int = option(16, 'features per step of the stored batch orders')
    schedule_steps: int = option(0, 'steps stored per seed (0: one epoch of the features)')
    model_dir: str = option('', "the pretrained encoder both sides start from ('': the "
                            'embedded all-MiniLM-L6-v2); its tokenizer builds the features')
    data_dir: str = option('', "the data folder of the named files ('': $GA_DATA_DIR, else "
                           '../shared/data)')


def recipes(model_dir):
    """``{'ours': the SQuAD job's defaults, 'theirs': the transformers example's}``, each a dict
    of :data:`RECIPE_OPTIONS`; the second takes its dropout rates (``hidden_dropout_prob``,
    ``attention_probs_dropout_prob``, default 0.1) from ``model_dir/config.json``."""
    defaults = TrainConfig()
    with open(os.path.join(model_dir, 'config.json'), encoding='utf-8') as handle:
        model_config = json.load(handle)
    theirs = dict(TRANSFORMERS_EXAMPLE, dropout=model_config.get('hidden_dropout_prob', 0.1),
                  attention_dropout=model_config.get('attention_probs_dropout_prob', 0.1))
    return {'ours': {k: getattr(defaults, k) for k in RECIPE_OPTIONS},
            'theirs': {k: theirs[k] for k in RECIPE_OPTIONS}}


def dev_prefix(examples, max_questions):
    """The questions of the first whole articles (file order) adding up to at most
    ``max_questions`` (the first article always); every question for 0."""
    if not max_questions:
        return list(examples)
    titles, count = [], 0
    for title in dict.fromkeys(e.title for e in examples):
        size = sum(1 for e in examples if e.title == title)
        if titles and count + size > max_questions:
            break
        titles.append(title)
        count += size
    return [e for e in examples if e.title in titles]


def _train_config(config):
    """The train options whose features the file holds (SQuAD 1.1, no null threshold)."""
    return TrainConfig(model_dir=config.model_dir or None, train_file=config.train_file,
                       extra_train_file='', exclude_titles=config.exclude_titles,
                       threshold_titles='', version_2_with_negative=0,
                       max_seq_length=config.max_seq_length, doc_stride=config.doc_stride,
                       max_query_length=config.max_query_length, data_dir=config.data_dir)


def _arrays(features, length, prefix):
    """The padded (F, T) token arrays and the (F,) fields of ``features``, keyed ``prefix/name``."""
    out = squad.batchify(features)
    width = out['input_ids'].shape[1]
    arrays = {}
    for key, value in out.items():
        value = value.astype(_DTYPES.get(key, value.dtype))
        if value.ndim == 2:
            value = onp.pad(value, ((0, 0), (0, length - width)))
        arrays['{}/{}'.format(prefix, key)] = value
    arrays[prefix + '/example_index'] = onp.array([f.example_index for f in features], onp.int32)
    return arrays


def _dev_arrays(features, length):
    arrays = _arrays(features, length, 'dev')
    for key in _DEV_KEYS:
        arrays['dev/' + key] = onp.array([getattr(f, key) for f in features], onp.int32)
    arrays['dev/token_to_char'] = onp.array(
        [span for f in features for span in f.token_to_char], onp.int32).reshape(-1, 2)
    arrays['dev/token_is_max_context'] = onp.array(
        [flag for f in features for flag in f.token_is_max_context], bool)
    return arrays


def _schedules(features, config):
    """{``schedule/seed<S>/index``, ``.../offsets``} for every seed of ``config.seeds``."""
    arrays = {}
    for seed in _seeds(config):
        steps = schedule(features, TrainConfig(seed=seed, batch_size=config.batch,
                                               max_steps=config.schedule_steps, epochs=1.0))
        arrays['schedule/seed{}/index'.format(seed)] = onp.concatenate(steps).astype(onp.int32)
        arrays['schedule/seed{}/offsets'.format(seed)] = onp.cumsum(
            [0] + [len(s) for s in steps]).astype(onp.int64)
    return arrays


def _seeds(config):
    try:
        seeds = [int(s) for s in config.seeds.split(',') if s.strip()]
    except ValueError:
        seeds = []
    if not seeds:
        fail('--seeds must be comma-separated integers, at least one', seeds=config.seeds)
    return seeds


def check_feature_config(config, folder):
    """ValueError (naming the flag) for sizes that are not positive, negative counts, seeds that
    are not integers, an output that is not ``.npz``, or lengths past the model's positions."""
    for name in ('max_seq_length', 'doc_stride', 'eval_max_seq_length', 'max_query_length',
                 'batch'):
        if getattr(config, name) <= 0:
            fail('--{} must be a positive integer'.format(name.replace('_', '-')),
                 **{name: getattr(config, name)})
    for name in ('max_dev_questions', 'schedule_steps'):
        if getattr(config, name) < 0:
            fail('--{} must be >= 0'.format(name.replace('_', '-')),
                 **{name: getattr(config, name)})
    if not config.output.endswith('.npz'):
        fail('--output must end with .npz', output=config.output)
    _seeds(config)
    check_model_fits(folder, {'max_seq_length': config.max_seq_length,
                              'eval_max_seq_length': config.eval_max_seq_length})


def write_feature_file(config):
    """Build the training and dev features of ``config`` and write them to ``config.output``
    (atomically); returns the ``meta`` dict written with them.

    Raises
    ------
    ValueError
        As :func:`check_feature_config`, a missing data file or model folder, or training and
        dev questions that share an article or a paragraph.
    """
    train_config = _train_config(config)
    folder = str(squad.default_model_dir() if not config.model_dir else config.model_dir)
    check_feature_config(config, folder)
    dev = [e for e in squad.read_squad(data_path(config.dev_file, config.data_dir)) if e.answers]
    dev = dev_prefix(dev, config.max_dev_questions)
    train_examples = training_examples(train_config)
    check_no_shared_data(train_examples, dev)
    tokenizer = squad.load_tokenizer(folder)
    features, _ = load_training_features(train_config, tokenizer, train_examples)
    stride = eval_stride(config.eval_max_seq_length, config.max_query_length)
    dev_features = squad.convert_examples_to_features(
        dev, tokenizer, config.eval_max_seq_length, stride, config.max_query_length,
        is_training=False)
    meta = {'format': FORMAT, 'file_id': uuid.uuid4().hex, 'options': dataclasses.asdict(config),
            'model_dir': os.path.abspath(folder),
            'model_sha256': sha256_file(os.path.join(folder, 'model.safetensors')),
            'recipes': recipes(folder),
            'train_questions': len(train_examples), 'train_features': len(features),
            'dev_questions': len(dev), 'dev_features': len(dev_features),
            'dev_titles': list(dict.fromkeys(e.title for e in dev)), 'eval_doc_stride': stride,
            'created': time.strftime('%Y-%m-%d %H:%M:%S'),
            'dev_examples': [[e.qas_id, e.title, e.question, e.context, e.answers] for e in dev]}
    arrays = dict(_arrays(features, config.max_seq_length, 'train'),
                  **_dev_arrays(dev_features, config.eval_max_seq_length),
                  **_schedules(features, config), meta=onp.array(json.dumps(meta)))
    os.makedirs(os.path.dirname(os.path.abspath(config.output)), exist_ok=True)
    with atomic_path(config.output) as tmp:
        onp.savez_compressed(tmp, **arrays)
    print('features: {} training questions -> {} features; {} dev questions ({} articles) -> '
          '{} features; {}'.format(len(train_examples), len(features), len(dev),
                                   len(meta['dev_titles']), len(dev_features), config.output))
    return meta


def read_feature_file(path, train=True):
    """The feature file as a dict: ``meta``, ``train`` (list of :class:`TrainRow`; empty when
    ``train`` is False), ``dev``
    (list of :class:`~gluon_attention.data.squad.SquadFeature`), ``examples`` (the dev
    :class:`~gluon_attention.data.squad.SquadExample` list), ``schedules`` ({seed: list of
    int arrays, one per step}).

    Raises
    ------
    ValueError
        A file that is not a comparison feature file of this format.
    """
    with onp.load(path) as data:
        arrays = {key: data[key] for key in data.files if train or not key.startswith('train/')}
    meta = json.loads(str(arrays.pop('meta', '{}')))
    if meta.get('format') != FORMAT:
        fail('expected a feature file written by compare_transformers.py features ({})'.format(
            FORMAT), path=path, format=meta.get('format'))
    examples = [squad.SquadExample(qid, title, question, context, [tuple(a) for a in answers],
                                   not answers)
                for qid, title, question, context, answers in meta['dev_examples']]
    return {'meta': meta, 'train': _train_rows(arrays) if train else [], 'examples': examples,
            'dev': _dev_features(arrays, examples), 'schedules': _read_schedules(arrays)}


def _train_rows(arrays):
    lengths = arrays['train/valid_length']
    return [TrainRow(*[arrays['train/' + k][i, :n] if arrays['train/' + k].ndim == 2
                       else arrays['train/' + k][i].item() for k in _BATCH_KEYS])
            for i, n in enumerate(lengths)]


def _dev_features(arrays, examples):
    ends = onp.cumsum(arrays['dev/chunk_length'])
    features = []
    for i, n in enumerate(arrays['dev/valid_length'].tolist()):
        end = int(ends[i])
        begin = end - int(arrays['dev/chunk_length'][i])
        fields = {k: arrays['dev/' + k][i].item() for k in _DEV_KEYS + (
            'example_index', 'valid_length', 'start_position', 'end_position')}
        fields.update({k: arrays['dev/' + k][i, :n].tolist()
                       for k in ('input_ids', 'token_types', 'p_mask')})
        features.append(squad.SquadFeature(
            qas_id=examples[fields['example_index']].qas_id,
            token_to_char=[tuple(s) for s in arrays['dev/token_to_char'][begin:end].tolist()],
            token_is_max_context=arrays['dev/token_is_max_context'][begin:end].tolist(),
            is_impossible=bool(arrays['dev/is_impossible'][i]),
            answerable_loss_weight=float(arrays['dev/answerable_loss_weight'][i]), **fields))
    return features


def _read_schedules(arrays):
    schedules = {}
    for key in arrays:
        if key.startswith('schedule/') and key.endswith('/index'):
            seed = int(key.split('/')[1][len('seed'):])
            offsets = arrays[key[:-len('index')] + 'offsets']
            schedules[seed] = [arrays[key][a:b] for a, b in zip(offsets[:-1], offsets[1:])]
    return schedules
