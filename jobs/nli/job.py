"""The NLI job: decomposable attention (Parikh et al., 2016) trained, scored and exported on SNLI.

:func:`train` takes an :class:`~jobs.nli.config.NLIConfig`, as do
:func:`~jobs.nli.model.evaluate`, ``predict`` and ``plot_attention``, which use the
trained model; ``scripts/train_nli.py`` is their command line. The steps run on the shared loop
(:func:`~jobs.engine.loop.train_steps`), whose end-of-epoch hook validates and
keeps the best epoch. The run folder ``config.output_dir`` holds ``run_config.json`` (the options),
``checkpoints/`` (one per epoch: a killed run rerun with the same options resumes after its last
finished epoch), the model (``best.params``, ``vocab.json`` and ``config.json``, the model's own
configuration), ``metrics.json`` and the export ``model-symbol.json`` / ``model-0000.params`` /
``model-inputs.json``. Labels: 0 entailment, 1 contradiction, 2 neutral.
"""
import os
import time

import mxnet as mx
import numpy as onp

from gluon_attention import checks
from gluon_attention.data import glove as glove_io
from gluon_attention.data import snli
from gluon_attention.export.block import export_and_check
from gluon_attention.models.nli import DecomposableAttention

from ..engine.checkpoints import check_resume
from ..engine.common import atomic_path, atomic_write_json, parse_devices, seed_step
from ..engine.config import recipe, write_run_config
from ..engine.distributed import DataParallel
from ..engine.launch import check_kvstore
from ..engine.loop import StepConfig, train_steps
from ..engine.train_log import TRAIN_LOG, TrainLog
from .config import NLIConfig, check_config
from .model import (EVAL_BATCH_SIZE, INPUT_DTYPES, INPUT_NAMES, data_paths, load_data,
                    load_model, predict_logits, save_model_config)

__all__ = ['train', 'check_resumable']


def _glove(model, config, train_pairs, vocab):
    """Fill the embedding from ``config.glove`` (unless 'none'); returns the coverage report."""
    path = data_paths(config)['glove']
    if path is None:
        return None
    counts = {}
    for sentence in train_pairs.premises + train_pairs.hypotheses:
        for token in snli.tokenize(sentence):
            counts[token] = counts.get(token, 0) + 1
    coverage = glove_io.load_glove_embedding(model.embedding, path, vocab.idx_to_token, counts)
    print('GloVe: {found}/{vocab_size} vocabulary rows ({coverage:.1%}), {token_coverage:.1%} '
          'of training tokens'.format(**coverage))
    return coverage


def check_resumable(config):
    """The latest intact checkpoint in ``<output_dir>/checkpoints`` that this run may resume
    (None when there is none); nothing is written.

    Raises
    ------
    ValueError
        As :func:`~jobs.engine.checkpoints.check_resume` (a checkpoint of a run
        with other recipe options, or an optimizer state of an older version) and
        :func:`~jobs.engine.launch.check_kvstore` (a ``--kvstore`` this
        process cannot use).
    """
    check_kvstore(config.kvstore)
    return check_resume(os.path.join(config.output_dir, 'checkpoints'), recipe(config),
                        defaults=recipe(NLIConfig()))


def _engine(model, config, ctx, encoded):
    """The engine over ``model``'s parameters (Adam), after one forward pass on the first
    training pair fixes the deferred Dense shapes (initialised from ``(seed, 0)``)."""
    first = next(snli.iter_batches([part[:1] for part in encoded], 1))
    seed_step(config.seed, 0)
    model(*[mx.np.array(x, dtype='int32', ctx=ctx[0]) for x in first[:4]])
    return DataParallel(model.collect_params(), config.kvstore, optimizer='adam',
                        optimizer_params={'learning_rate': config.lr, 'wd': config.weight_decay})


def _schedule(encoded, config):
    """The global batches of the run (example indices) and the step counts that end its epochs.

    Epoch e (0-based) shuffles with ``seed_step(seed, its first step)``, the same on every
    worker; ``--max-steps`` cuts the run, and its last epoch, short.
    """
    lengths = [max(len(p), len(h)) for p, h in zip(encoded[0], encoded[1])]
    if not lengths:
        checks.fail('expected at least one training pair', train=config.train)
    per_epoch = -(-len(lengths) // config.batch_size)
    total = config.epochs * per_epoch
    total = min(total, config.max_steps) if config.max_steps else total
    batches, ends = [], []
    while len(batches) < total:
        shuffle = seed_step(config.seed, len(batches))
        batches += snli.bucket_batches(lengths, config.batch_size, shuffle)
        ends.append(min(len(batches), total))
    return batches[:total], ends


def _loader(encoded):
    """``load(ids)`` -> the engine's arrays of those pairs (padded to their longest sentence)."""
    premises, hypotheses, labels = encoded

    def load(ids):
        premise, premise_length = snli.pad_batch([premises[i] for i in ids])
        hypothesis, hypothesis_length = snli.pad_batch([hypotheses[i] for i in ids])
        return dict(zip(_FIELDS, (premise, hypothesis, premise_length, hypothesis_length,
                                  onp.asarray(labels[ids], 'int32'))))
    return load


_FIELDS = tuple(INPUT_NAMES) + ('label',)


class _Epochs:
    """The NLI job around the shared loop: the summed loss of a step's pairs, each epoch's
    progress bar, loss and accuracy (this worker's pairs); at the end of an epoch the chief
    validates, logs, keeps ``best.params`` and gives the checkpoint its metadata."""

    def __init__(self, model, config, valid_encoded, ctx, state, is_chief, ends):
        self.model, self.config, self.valid, self.ctx = model, config, valid_encoded, ctx
        self.state, self.is_chief, self.start = state, is_chief, time.time()
        self.sizes = dict(enumerate(b - a for a, b in zip([0] + ends, ends)))   # steps per epoch
        self.cross_entropy = mx.gluon.loss.SoftmaxCrossEntropyLoss()
        self.outputs, self.bar = [], None
        self.total_loss = self.correct = self.seen = 0

    def loss_fn(self, part):
        """The cross-entropy summed over ``part``; its logits are kept for the accuracy."""
        self.outputs.append((self.model(*[part[name] for name in INPUT_NAMES]), part['label']))
        return self.cross_entropy(self.outputs[-1][0], part['label']).sum()

    def on_step(self, result):
        if self.bar is None:
            from tqdm import tqdm  # pylint: disable=import-outside-toplevel
            self.bar = tqdm(total=self.sizes.get(self.state['epoch']),
                            desc='epoch {}'.format(self.state['epoch'] + 1),
                            disable=not (self.config.progress and self.is_chief))
        self.total_loss += result.loss_sum
        self.correct += sum(int((o.argmax(axis=1).astype('int32') == y).sum())
                            for o, y in self.outputs)
        self.seen += result.examples
        self.outputs.clear()
        self.bar.update(1)
        self.bar.set_postfix(loss='{:.3f}'.format(self.total_loss / max(self.seen, 1)),
                             acc='{:.3f}'.format(self.correct / max(self.seen, 1)))

    def on_epoch_end(self, epoch, steps):
        """The epoch's record; the chief's validation and ``best.params``; the checkpoint meta."""
        record = {'train_loss': self.total_loss / max(self.seen, 1),
                  'train_accuracy': self.correct / max(self.seen, 1), 'epoch': epoch,
                  'steps': steps}
        self.bar.close()
        self.bar, self.total_loss, self.correct, self.seen = None, 0, 0, 0
        self.state['epoch'] = epoch
        if self.is_chief:
            _end_epoch(self.model, self.config, self.valid, self.ctx, self.state, record,
                       self.start)
        return {'recipe': recipe(self.config), 'epoch': epoch, 'history': self.state['history'],
                'best': self.state['best']}


def _valid_accuracy(model, valid_encoded, ctx):
    logits = predict_logits(model, snli.iter_batches(valid_encoded, EVAL_BATCH_SIZE),
                            len(valid_encoded[2]), ctx)
    return float(onp.mean(logits.argmax(1) == valid_encoded[2]))


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
    """Train ``model`` for the epochs ``config`` asks on the shared loop, resuming after
    checkpoint ``entry`` (from :func:`check_resumable`) when given; the chief keeps the best
    validation epoch in ``best.params`` and writes a checkpoint per epoch. Returns (the
    per-epoch history, whether this process is the chief)."""
    engine = _engine(model, config, ctx, encoded)
    meta = entry['meta'] if entry else {'epoch': 0, 'history': [], 'best': -1.0}
    state = {'epoch': meta['epoch'], 'history': meta['history'], 'best': meta['best']}
    batches, epoch_ends = _schedule(encoded, config)
    epochs = _Epochs(model, config, valid_encoded, ctx, state, engine.is_chief, epoch_ends)
    try:
        train_steps(model, engine, epochs.loss_fn, batches, _loader(encoded),
                    StepConfig(seed=config.seed, max_grad_norm=0.0),
                    checkpoint_dir=os.path.join(config.output_dir, 'checkpoints'),
                    schedule=lambda step, total: config.lr, epoch_ends=epoch_ends,
                    on_step=epochs.on_step, on_epoch_end=epochs.on_epoch_end,
                    log=TrainLog(config.output_dir, config.log_every, 'pairs'))
    finally:
        if epochs.bar is not None:
            epochs.bar.close()
    return state['history'], engine.is_chief


_UNCHECKED = object()


@mx.util.use_np
def train(config, data=None, entry=_UNCHECKED):
    """Train on SNLI, keep the best epoch, export it, check the reload and write the metrics.

    Parameters
    ----------
    config : NLIConfig
        Checked with :func:`~jobs.nli.config.check_config`.
    data : tuple, optional
        What :func:`load_data` returns for ``config`` (read here when None).
    entry : dict or None, optional
        What :func:`check_resumable` returned for ``config``, when the caller already called it
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
        entry = check_resumable(config)
    write_run_config(config.output_dir, config)
    save_model_config(config, vocab, int(onp.bincount(encoded[2], minlength=3).argmax()),
                      train_pairs)
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
    out = config.output_dir
    print('model: {} (config.json, vocab.json beside it); metrics: {}; training log: {}; '
          'export: {}-*'.format(os.path.join(out, 'best.params'),
                                os.path.join(out, 'metrics.json'), os.path.join(out, TRAIN_LOG),
                                os.path.join(out, 'model')))
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
