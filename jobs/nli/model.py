"""The NLI model folder and data: reading the pairs of a run, saving and loading the trained
model, logits over a data set, and what is done with a trained model: scoring a data set
(:func:`evaluate`), one pair's probabilities (:func:`predict`), heat maps of the alignment
(:func:`plot_attention`).

A model folder holds ``best.params``, ``vocab.json`` and ``config.json`` (the model's own
configuration: sizes, vocabulary size, ``max_length``, the training majority label).
"""
import json
import os
import sys

import mxnet as mx
import numpy as onp

from gluon_attention import checks
from gluon_attention.data import snli
from gluon_attention.data.glove import GLOVE_URL
from gluon_attention.models.nli import DecomposableAttention
from gluon_attention.resources import missing_file

from ..engine.common import atomic_path, atomic_write_json, parse_ctx, parse_devices

__all__ = ['INPUT_NAMES', 'INPUT_DTYPES', 'predict_logits', 'data_paths', 'load_valid',
           'load_data', 'load_model', 'save_model_config', 'check_not_trained_on',
           'plot_attention', 'evaluate', 'predict']

#: The positional inputs of the model and of its exported graph (``data0`` ... ``data3``).
INPUT_NAMES = ['premise', 'hypothesis', 'premise_valid_length', 'hypothesis_valid_length']
INPUT_DTYPES = ['int32'] * 4
EVAL_BATCH_SIZE = 256
#: The most pairs :func:`plot_attention` draws: one row of 400-pixel panels (12,800 pixels wide).
MAX_PLOT_PAIRS = 32


def _to_mx(batch, ctx):
    """The four model inputs of a :class:`~gluon_attention.data.snli.Batch` on ``ctx`` (int32)."""
    return [mx.np.array(x, dtype='int32', ctx=ctx) for x in batch[:4]]


def predict_logits(model, batches, num_examples, ctx=None):
    """Logits for a whole data set, in data-set order.

    Parameters
    ----------
    model : DecomposableAttention or SymbolBlock
        Called positionally with (premise, hypothesis, premise_valid_length,
        hypothesis_valid_length).
    batches : iterable of :class:`~gluon_attention.data.snli.Batch`
    num_examples : int
        N, the size of the data set the batches cover.
    ctx : mx.Context, optional (default CPU)

    Returns
    -------
    ndarray
        float32 (N, num_classes) NumPy logits; row i belongs to example i.
    """
    ctx = ctx or mx.cpu()
    out = None
    for batch in batches:
        logits = model(*_to_mx(batch, ctx)).asnumpy()
        if out is None:
            out = onp.zeros((num_examples, logits.shape[1]), dtype=onp.float32)
        out[batch.index] = logits
    return out


def data_paths(config):
    """The files ``config`` reads: ``train`` (a jsonl file or a line-format prefix), ``valid`` (a
    list) and ``glove`` (None for 'none'); empty options and 'sample' name the default files in
    the data folder (``config.data_dir``, else ``GA_DATA_DIR``, else ``../shared/data`` from the
    repository root). ValueError (one line naming the path looked for and where the data set is
    published) for the first default file, or the GloVe file, not found."""
    glove = None if config.glove.lower() == 'none' else config.glove
    if glove == 'sample':
        glove = snli.default_path('glove', config.data_dir)
    elif glove is not None and not os.path.isfile(glove):
        missing_file(glove, 'GloVe', GLOVE_URL)
    return {'train': config.train or snli.default_path('train', config.data_dir),
            'valid': [p for p in config.valid.split(',') if p]
                     or snli.default_path('valid', config.data_dir),
            'glove': glove}


def load_valid(config):
    """The validation pairs of ``config``: its ``valid`` files, or the default jsonl subsets."""
    return snli.concat_pairs([snli.read_snli(p) for p in data_paths(config)['valid']])


def load_data(config):
    """``(train pairs, validation pairs, number of training pairs removed)``: the training pairs
    that also occur in the validation files are removed. Raises ValueError or OSError naming the
    file (and record) when a data file is missing or malformed."""
    paths = data_paths(config)          # the default files and GloVe checked before any read
    valid = load_valid(config)
    train_pairs = snli.read_snli(paths['train'])
    train_pairs, removed = snli.remove_overlap(train_pairs, valid)
    if config.max_train:
        keep = slice(0, config.max_train)
        train_pairs = snli.NLIPairs(train_pairs.premises[keep], train_pairs.hypotheses[keep],
                                    train_pairs.labels[keep], train_pairs.num_skipped,
                                    train_pairs.source)
    return train_pairs, valid, removed


def load_model(folder, ctx=None):
    """``(model, vocab, model_config)`` of the model folder a training run wrote.

    Raises ValueError when ``folder`` holds no trained model.
    """
    files = [os.path.join(folder, name) for name in ('config.json', 'vocab.json', 'best.params')]
    if not all(os.path.exists(path) for path in files):
        checks.fail('a trained model folder holds config.json, vocab.json and best.params '
                     '(train one with scripts/train_nli.py --output-dir FOLDER)', folder=folder)
    with open(files[0], encoding='utf-8') as handle:
        model_config = json.load(handle)
    vocab = snli.Vocab.load(files[1])
    model = DecomposableAttention(len(vocab), **model_config['model'])
    model.load_parameters(files[2], ctx=ctx or mx.cpu())
    return model, vocab, model_config


def save_model_config(config, vocab, majority, train_pairs):
    """Write ``vocab.json`` and ``config.json`` of the model ``config`` describes (atomically).

    ``config.json`` records what the model was trained on: ``trained_pairs``, the sorted distinct
    digests of ``train_pairs`` (:func:`~gluon_attention.data.snli.pair_digests`; 16 bytes of
    JSON a pair), which :func:`evaluate` checks, and ``valid_files``, the validation files of the
    run (held out from training).
    """
    with atomic_path(os.path.join(config.output_dir, 'vocab.json')) as tmp:
        vocab.save(tmp)
    atomic_write_json(os.path.join(config.output_dir, 'config.json'), {
        'model': {'embed_size': config.embed_size, 'num_hiddens': config.num_hiddens,
                  'dropout': config.dropout},
        'vocab_size': len(vocab), 'max_length': config.max_length, 'majority_label': majority,
        'valid_files': [str(path) for path in data_paths(config)['valid']],
        'trained_pairs': sorted(set(snli.pair_digests(train_pairs)))})


def check_not_trained_on(model_config, pairs, folder):
    """Refuse to score a model on pairs it was trained on.

    ``model_config``: the ``config.json`` of the model ``folder``. Returns what is added to the
    metrics: ``{'trained_pairs_evaluated': 0}``, or ``{'trained_pairs_evaluated': None}`` for a
    folder written before the record (nothing checked; a note on stderr). ValueError saying how
    many of the pairs were trained on and which files were held out.
    """
    if 'trained_pairs' not in model_config:
        print('note: {} records no trained_pairs (written by an older version): the check that '
              '{} holds no training pair is skipped'.format(
                  os.path.join(folder, 'config.json'), pairs.source), file=sys.stderr)
        return {'trained_pairs_evaluated': None}
    trained = set(model_config['trained_pairs'])
    count = sum(digest in trained for digest in snli.pair_digests(pairs))
    if count:
        checks.fail('evaluate needs pairs the model of {} was not trained on, but {} of the {} '
                     'pairs of {} were (its config.json records them, trained_pairs): evaluate '
                     'held-out pairs instead, such as the validation files of its training run, '
                     '{}'.format(folder, count, len(pairs), pairs.source,
                                 ', '.join(model_config.get('valid_files') or ['--valid'])),
                     path=pairs.source)
    return {'trained_pairs_evaluated': 0}


def _import_pyplot():
    """``matplotlib.pyplot`` on the file-only Agg backend; ImportError saying how to install it."""
    try:
        import matplotlib
    except ImportError as err:
        raise ImportError('plotting needs matplotlib: pip install gluon_attention[plots] (or '
                          'pip install matplotlib)') from err
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    return plt


@mx.util.use_np
def plot_attention(config, count):
    """Heat maps of the premise-to-hypothesis alignment of the first ``count`` validation pairs.

    Reads the model of ``config.output_dir`` and the validation files of ``config``; each panel
    shows the weights (L_p, L_h) with which a premise token attends to the hypothesis tokens
    (rows sum to 1). Writes ``<output_dir>/attention.png`` and returns its path.

    Raises
    ------
    ValueError
        ``count`` is not an integer in [1, :data:`MAX_PLOT_PAIRS`] or exceeds the number of
        validation pairs, or there is no trained model.
    ImportError
        matplotlib is not installed (``pip install gluon_attention[plots]``).
    """
    checks.check_positive_int('N', count)           # N: the command line's name of count
    if count > MAX_PLOT_PAIRS:
        checks.fail('plot-attention draws at most {} pairs (one panel each, in one row)'.format(
            MAX_PLOT_PAIRS), N=count)
    plt = _import_pyplot()
    ctx = parse_ctx(config.ctx)[0]
    valid = load_valid(config)
    if count > len(valid):
        checks.fail('N must be at most the number of validation pairs, {} in {}'.format(
            len(valid), valid.source), N=count)
    model, vocab, model_config = load_model(config.output_dir, ctx)
    fig, axes = plt.subplots(1, count, figsize=(5 * count, 5), squeeze=False)
    for k, ax in enumerate(axes[0]):
        one = snli.NLIPairs(valid.premises[k:k + 1], valid.hypotheses[k:k + 1],
                            valid.labels[k:k + 1])
        batch = next(snli.iter_batches(snli.encode_pairs(one, vocab, model_config['max_length']),
                                       1))
        weights = model.alignment(*_to_mx(batch, ctx))[0][0].asnumpy()   # (L_p, L_h)
        ax.imshow(weights, cmap='viridis', vmin=0, vmax=1)
        ax.set_yticks(range(weights.shape[0]), snli.tokenize(valid.premises[k])[:weights.shape[0]])
        ax.set_xticks(range(weights.shape[1]),
                      snli.tokenize(valid.hypotheses[k])[:weights.shape[1]], rotation=90)
        ax.set_title('gold: {}'.format(snli.LABELS[valid.labels[k]]))
    fig.tight_layout()
    path = os.path.join(config.output_dir, 'attention.png')
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=80, format='png')
    plt.close(fig)
    print('wrote', path)
    return path


@mx.util.use_np
def evaluate(config, path, output=''):
    """Score the model of ``config.output_dir`` on the labelled pairs of ``path`` (either format).

    Writes the metrics (as :func:`~gluon_attention.data.snli.classification_metrics`, plus the
    data source and the number of ``-`` pairs skipped) to ``output`` (default
    ``<output_dir>/eval_metrics.json``) and returns them. Raises ValueError for a missing model or
    a malformed data file.
    """
    ctx = parse_devices(config.ctx)[0]
    model, vocab, model_config = load_model(config.output_dir, ctx)
    pairs = snli.read_snli(path)
    checked = check_not_trained_on(model_config, pairs, config.output_dir)
    encoded = snli.encode_pairs(pairs, vocab, model_config['max_length'])
    logits = predict_logits(model, snli.iter_batches(encoded, EVAL_BATCH_SIZE), len(pairs), ctx)
    metrics = snli.classification_metrics(encoded[2], logits.argmax(1),
                                          model_config['majority_label'])
    metrics.update({'data': pairs.source, 'skipped_dash': pairs.num_skipped}, **checked)
    output = output or os.path.join(config.output_dir, 'eval_metrics.json')
    atomic_write_json(output, metrics)
    print('{}: {} pairs, accuracy {:.4f} (majority-class baseline {:.4f}) -> {}'.format(
        pairs.source, len(pairs), metrics['accuracy'], metrics['majority_baseline']['accuracy'],
        output))
    return metrics


@mx.util.use_np
def predict(config, premise, hypothesis):
    """Class probabilities ``{label: p}`` (summing to 1) of one sentence pair; prints the label."""
    ctx = parse_devices(config.ctx)[0]
    model, vocab, model_config = load_model(config.output_dir, ctx)
    pairs = snli.NLIPairs([premise], [hypothesis], [0])
    encoded = snli.encode_pairs(pairs, vocab, model_config['max_length'])
    logits = predict_logits(model, snli.iter_batches(encoded, 1), 1, ctx)[0].astype('float64')
    probs = onp.exp(logits - logits.max())
    probs /= probs.sum()
    print(snli.LABELS[int(probs.argmax())], ' '.join(
        '{}={:.4f}'.format(name, p) for name, p in zip(snli.LABELS, probs)))
    return dict(zip(snli.LABELS, probs.tolist()))
