"""The NLI job: decomposable attention (Parikh et al., 2016) trained, scored and exported on SNLI.

:func:`train`, :func:`evaluate`, :func:`predict` and :func:`plot_attention` take an
:class:`~gluon_attention.tasks.nli.config.NLIConfig`; ``scripts/train_nli.py`` is their command
line. The run folder ``config.output_dir`` holds ``run_config.json`` (the options),
``checkpoints/`` (one per epoch: a killed run rerun with the same options resumes after its last
finished epoch), the model (``best.params``, ``vocab.json`` and ``config.json``, the model's own
configuration), ``metrics.json`` and the export ``model-symbol.json`` / ``model-0000.params`` /
``model-inputs.json``. Labels: 0 entailment, 1 contradiction, 2 neutral.
"""
import dataclasses
import os
import time

import mxnet as mx
import numpy as onp

from ... import _checks
from ...data import glove as glove_io
from ...data import snli
from ...models.nli import DecomposableAttention
from ..engine.common import atomic_path, atomic_write_json, parse_devices, seed_step
from ..engine.config import write_run_config
from ..engine.distributed import DataParallel
from ..engine.training import CheckpointManager, check_engine_state, check_kvstore
from ..export.block import export_and_check
from .config import RUN_OPTIONS, check_config
from .model import (EVAL_BATCH_SIZE, INPUT_DTYPES, INPUT_NAMES, load_data, load_model,
                        plot_attention, predict_logits, save_model_config)

__all__ = ['train', 'evaluate', 'predict', 'plot_attention', 'check_resume', 'load_data',
           'load_model', 'predict_logits', 'INPUT_NAMES', 'INPUT_DTYPES']


def _glove(model, config, train_pairs, vocab):
    """Fill the embedding from ``config.glove`` (unless 'none'); returns the coverage report."""
    if config.glove.lower() == 'none':
        return None
    path = snli.default_paths()['glove'] if config.glove == 'sample' else config.glove
    counts = {}
    for sentence in train_pairs.premises + train_pairs.hypotheses:
        for token in snli.tokenize(sentence):
            counts[token] = counts.get(token, 0) + 1
    coverage = glove_io.load_glove_embedding(model.embedding, path, vocab.idx_to_token, counts)
    print('GloVe: {found}/{vocab_size} vocabulary rows ({coverage:.1%}), {token_coverage:.1%} '
          'of training tokens'.format(**coverage))
    return coverage


def _recipe(config):
    """The options that shape the trained model (a checkpoint resumes only the same recipe)."""
    return {k: v for k, v in dataclasses.asdict(config).items() if k not in RUN_OPTIONS}


def check_resume(config):
    """The latest intact checkpoint in ``<output_dir>/checkpoints`` (None when there is none).

    Raises ValueError when it belongs to a run with other options (other than
    :data:`~gluon_attention.tasks.nli.config.RUN_OPTIONS`) or holds an optimizer state of an
    older version, and for a ``--kvstore`` this process cannot use
    (:func:`~gluon_attention.tasks.engine.training.check_kvstore`); nothing is written.
    """
    check_kvstore(config.kvstore)
    folder = os.path.join(config.output_dir, 'checkpoints')
    if not os.path.isdir(folder):
        return None
    manager = CheckpointManager(folder)
    entry = manager.latest()
    if entry is None:
        return None
    saved, wanted = entry['meta']['recipe'], _recipe(config)
    changed = sorted(k for k in set(saved) | set(wanted) if saved.get(k) != wanted.get(k))
    if changed:
        differ = '; '.join('--{}: {!r} there, {!r} now'.format(
            k.replace('_', '-'), saved.get(k), wanted.get(k)) for k in changed)
        _checks.fail('{} holds the checkpoints of a run with other options ({}); rerun with them '
                     'or use another --output-dir'.format(folder, differ), options=changed)
    check_engine_state(manager, entry)
    return entry


def _engine(model, config, ctx, encoded):
    """The engine over ``model``'s parameters (Adam), after one forward pass on the first
    training pair fixes the deferred Dense shapes (initialised from ``(seed, 0)``)."""
    first = next(snli.iter_batches([part[:1] for part in encoded], 1))
    seed_step(config.seed, 0)
    model(*[mx.np.array(x, dtype='int32', ctx=ctx[0]) for x in first[:4]])
    return DataParallel(model.collect_params(), config.kvstore, optimizer='adam',
                        optimizer_params={'learning_rate': config.lr, 'wd': config.weight_decay})


def _resume(entry, checkpoints, model, engine, ctx):
    """Progress ``{epoch, step, history, best}`` of ``entry`` (from :func:`check_resume`),
    restored into ``model`` and ``engine``; a fresh start when ``entry`` is None."""
    if entry is None:
        return {'epoch': 0, 'step': 0, 'history': [], 'best': -1.0}
    checkpoints.restore(entry, model, engine, ctx)
    if engine.is_chief:
        print('resuming after epoch {} (step {})'.format(entry['meta']['epoch'], entry['step']))
    return {'epoch': entry['meta']['epoch'], 'step': entry['step'],
            'history': entry['meta']['history'], 'best': entry['meta']['best']}


_FIELDS = tuple(INPUT_NAMES) + ('label',)


def _train_epoch(model, engine, batches, config, step, desc):
    """One pass over ``batches`` (global batches: each worker trains on its rows); returns
    ``(step, {train_loss, train_accuracy})`` of this worker's rows."""
    from tqdm import tqdm
    loss_fn = mx.gluon.loss.SoftmaxCrossEntropyLoss()
    total_loss = correct = seen = 0
    bar = tqdm(batches, desc=desc, disable=not (config.progress and engine.is_chief))
    for batch in bar:
        if config.max_steps and step >= config.max_steps:
            break
        seed_step(config.seed, step * engine.num_workers + engine.rank)   # dropout masks
        rows = engine.shard(onp.arange(len(batch.labels)))
        logits = []

        def summed(part):
            logits.append((model(*[part[name] for name in INPUT_NAMES]), part['label']))
            return loss_fn(logits[-1][0], part['label']).sum()

        total_loss += engine.forward_backward(summed, {
            name: onp.asarray(x, 'int32')[rows] for name, x in zip(_FIELDS, batch[:5])})
        engine.step(len(batch.labels), config.lr)
        step += 1
        correct += sum(int((o.argmax(axis=1).astype('int32') == y).sum()) for o, y in logits)
        seen += len(rows)
        bar.set_postfix(loss='{:.3f}'.format(total_loss / max(seen, 1)),
                        acc='{:.3f}'.format(correct / max(seen, 1)))
    return step, {'train_loss': total_loss / max(seen, 1), 'train_accuracy': correct / max(seen, 1)}


def _valid_accuracy(model, valid_encoded, ctx):
    logits = predict_logits(model, snli.iter_batches(valid_encoded, EVAL_BATCH_SIZE),
                            len(valid_encoded[2]), ctx)
    return float(onp.mean(logits.argmax(1) == valid_encoded[2]))


def _checkpoint_meta(config, state):
    return {'recipe': _recipe(config), 'epoch': state['epoch'], 'history': state['history'],
            'best': state['best']}


def _end_epoch(model, config, valid_encoded, ctx, state, record, start):
    """The chief's end of an epoch: validation, the log line, ``best.params``."""
    record.update(valid_accuracy=_valid_accuracy(model, valid_encoded, ctx[0]),
                  elapsed_s=round(time.time() - start, 1))
    print('epoch {epoch}: train loss {train_loss:.4f} acc {train_accuracy:.4f} | valid acc '
          '{valid_accuracy:.4f} | {elapsed_s}s'.format(**record))
    state['history'].append(record)
    if record['valid_accuracy'] > state['best']:
        state['best'] = record['valid_accuracy']
        with atomic_path(os.path.join(config.output_dir, 'best.params')) as tmp:
            model.save_parameters(tmp)


def _fit(config, ctx, encoded, valid_encoded, model, entry):
    """Train ``model`` for the epochs ``config`` asks, resuming after checkpoint ``entry`` when
    given; the chief keeps the best validation epoch in ``best.params`` and writes the
    checkpoints. Returns (the per-epoch history, whether this process is the chief)."""
    engine = _engine(model, config, ctx, encoded)
    checkpoints = CheckpointManager(os.path.join(config.output_dir, 'checkpoints'))
    state = _resume(entry, checkpoints, model, engine, ctx)
    start = time.time()
    for epoch in range(state['epoch'], config.epochs):
        if config.max_steps and state['step'] >= config.max_steps:
            break
        shuffle = seed_step(config.seed, state['step'])     # the same on every worker
        batches = list(snli.iter_batches(encoded, config.batch_size, shuffle))
        state['step'], record = _train_epoch(model, engine, batches, config, state['step'],
                                             'epoch {}'.format(epoch + 1))
        record.update(epoch=epoch + 1, steps=state['step'])
        state['epoch'] = epoch + 1
        if engine.is_chief:
            _end_epoch(model, config, valid_encoded, ctx, state, record, start)
            checkpoints.save(state['step'], model, engine, _checkpoint_meta(config, state))
    return state['history'], engine.is_chief


_UNCHECKED = object()


@mx.util.use_np
def train(config, data=None, entry=_UNCHECKED):
    """Train on SNLI, keep the best epoch, export it, check the reload and write the metrics.

    Parameters
    ----------
    config : NLIConfig
        Checked with :func:`~gluon_attention.tasks.nli.config.check_config`.
    data : tuple, optional
        What :func:`load_data` returns for ``config`` (read here when None).
    entry : dict or None, optional
        What :func:`check_resume` returned for ``config``, when the caller already called it
        (so that a damaged checkpoint is reported once); called here when not given.

    Returns
    -------
    dict or None
        The metrics also written to ``metrics.json``: accuracy, macro F1, per-class precision /
        recall / F1, confusion matrix, majority-class baseline, data counts, GloVe coverage,
        per-epoch history, best epoch, export parity (max absolute logit difference of the
        reloaded graph over the validation set, same predictions) and wall time in seconds.
        None in the workers other than rank 0 of a ``dist_*`` job (``--kvstore``): they train
        their share of every batch; rank 0 validates, keeps the best epoch, writes the
        checkpoints, exports and scores.

    Raises
    ------
    ValueError
        A bad option, a malformed data file, or checkpoints in ``output_dir`` from a run with
        other options.
    """
    check_config(config)
    ctx = parse_devices(config.ctx)
    start = time.time()
    train_pairs, valid_pairs, removed = data or load_data(config)
    print('train: {} pairs ({} removed: also in the validation files); valid: {} pairs ({} "-" '
          'skipped)'.format(len(train_pairs), removed, len(valid_pairs), valid_pairs.num_skipped))
    vocab = snli.Vocab.from_pairs(train_pairs, min_count=config.min_count)
    encoded = snli.encode_pairs(train_pairs, vocab, config.max_length)
    valid_encoded = snli.encode_pairs(valid_pairs, vocab, config.max_length)
    if entry is _UNCHECKED:                              # before anything is written
        entry = check_resume(config)
    write_run_config(config.output_dir, config)
    save_model_config(config, vocab, int(onp.bincount(encoded[2], minlength=3).argmax()))
    seed_step(config.seed, 0)                            # the initial weights
    model = DecomposableAttention(len(vocab), embed_size=config.embed_size,
                                  num_hiddens=config.num_hiddens, dropout=config.dropout)
    model.initialize(mx.init.Xavier(), ctx=ctx)
    coverage = _glove(model, config, train_pairs, vocab)
    model.hybridize()
    history, chief = _fit(config, ctx, encoded, valid_encoded, model, entry)
    if not chief:                   # rank 0 of a distributed job scores and writes
        return None
    metrics = _final_metrics(config, ctx[0], valid_encoded)
    metrics.update({
        'data': {'train': train_pairs.source, 'valid': valid_pairs.source,
                 'train_pairs': len(train_pairs), 'removed_overlap': removed,
                 'valid_skipped_dash': valid_pairs.num_skipped, 'vocab_size': len(vocab),
                 'train_label_counts': train_pairs.label_counts()},
        'glove': coverage, 'history': history,
        'best_epoch': max(history, key=lambda h: h['valid_accuracy'])['epoch'],
        'train_wall_time_s': round(time.time() - start, 1)})
    atomic_write_json(os.path.join(config.output_dir, 'metrics.json'), metrics)
    print('valid accuracy {:.4f} (majority-class baseline {:.4f}, {}); macro F1 {:.4f}; export '
          'parity max |diff| {:.2e}'.format(
              metrics['accuracy'], metrics['majority_baseline']['accuracy'],
              metrics['majority_baseline']['label'], metrics['macro_f1'],
              metrics['export']['max_abs_logit_diff']))
    return metrics


def _final_metrics(config, ctx, valid_encoded):
    """Scores of the best checkpoint on the validation pairs, after exporting it and checking
    that the reloaded graph gives the same logits."""
    model, _, model_config = load_model(config.output_dir, ctx)
    batches = list(snli.iter_batches(valid_encoded, EVAL_BATCH_SIZE))
    prefix = os.path.join(config.output_dir, 'model')
    reloaded, report = export_and_check(model, prefix, batches, INPUT_NAMES, INPUT_DTYPES, ctx)
    count = len(valid_encoded[2])
    predictions = predict_logits(model, batches, count, ctx).argmax(1)
    metrics = snli.classification_metrics(valid_encoded[2], predictions,
                                          model_config['majority_label'])
    metrics['export'] = {
        'prefix': prefix, 'max_abs_logit_diff': report['max_abs_diff'],
        'num_batches': report['num_batches'],
        'same_predictions': bool((predict_logits(reloaded, batches, count, ctx).argmax(1)
                                  == predictions).all())}
    return metrics


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
    encoded = snli.encode_pairs(pairs, vocab, model_config['max_length'])
    logits = predict_logits(model, snli.iter_batches(encoded, EVAL_BATCH_SIZE), len(pairs), ctx)
    metrics = snli.classification_metrics(encoded[2], logits.argmax(1),
                                          model_config['majority_label'])
    metrics.update({'data': pairs.source, 'skipped_dash': pairs.num_skipped})
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
