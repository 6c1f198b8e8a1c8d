"""The training loop of the SQuAD job: the schedule of steps, the refusal to mix runs in one
output folder, forward/backward with gradient accumulation, AdamW, checkpoints and resuming.

Every function takes a :class:`~gluon_attention.tasks.squad_config.TrainConfig`; the data are in
:mod:`~gluon_attention.tasks.squad_data`, the commands in :mod:`~gluon_attention.tasks.squad_train`
and :mod:`~gluon_attention.tasks.squad_infer`.
"""
import os
import time

import numpy as onp
from mxnet import autograd
from tqdm import tqdm

from .._checks import fail
from ..data import squad
from ..models.qa import qa_loss
from .common import seed_step
from .squad_config import recipe
from .squad_data import INPUT_NAMES
from .training import AdamW, CheckpointManager, linear_warmup_decay, split_batch

__all__ = ['schedule', 'check_resumable', 'train']


def schedule(features, config):
    """Feature indices of every step of the run: shuffled per epoch, each step's features drawn
    from a pool of similar lengths so little is padded.

    A step holds ``batch_size * grad_accum_steps`` features. ``--max-steps`` > 0 gives the number
    of steps; 0 gives ``ceil(epochs * len(features) / features per step)``.
    """
    if not features:
        fail('expected at least one training feature (check --train-file, --extra-train-file '
             'and the keep ratios)', num_features=0)
    size = config.batch_size * config.grad_accum_steps
    total = config.max_steps or int(onp.ceil(config.epochs * len(features) / size))
    lengths = onp.array([f.valid_length for f in features])
    batches, epoch = [], 0
    while len(batches) < total:
        rng = onp.random.RandomState(config.seed + epoch)
        order = rng.permutation(len(features))
        pool = size * 16
        epoch_batches = []
        for lo in range(0, len(order), pool):
            part = order[lo:lo + pool]
            part = part[onp.argsort(lengths[part], kind='stable')]
            epoch_batches += [part[i:i + size] for i in range(0, len(part), size)]
        batches += [epoch_batches[i] for i in rng.permutation(len(epoch_batches))]
        epoch += 1
    return batches[:total]


def check_resumable(config):
    """Refuse to mix runs: checkpoints in ``<output-dir>/checkpoints`` must have been written
    with the same recipe options (:func:`~gluon_attention.tasks.squad_config.recipe`).

    Raises
    ------
    ValueError
        Naming every differing option with its value there and now.
    """
    folder = os.path.join(config.output_dir, 'checkpoints')
    entry = CheckpointManager(folder).latest() if os.path.isdir(folder) else None
    if entry is None:
        return
    before, now = entry['meta'].get('recipe'), recipe(config)
    if before is None:
        differ = 'options not recorded (an older version wrote them)'
    else:
        differ = '; '.join('--{}: {!r} there, {!r} now'.format(k.replace('_', '-'),
                                                              before.get(k), v)
                           for k, v in sorted(now.items()) if before.get(k) != v)
    if differ:
        fail('{} holds the checkpoints of a run with other options ({}); resume it with those '
             'options, or use another --output-dir (or delete that folder) to start a new '
             'run'.format(folder, differ), output_dir=config.output_dir)


def _forward_loss(model, part, config, scale):
    start, end, answerable = model(*[part[k] for k in INPUT_NAMES], part['start_position'])
    loss = qa_loss(start, end, answerable, part['start_position'], part['end_position'],
                   part['is_impossible'], config.answerable_weight,
                   part['answerable_loss_weight'])
    return loss * scale


def _backward(model, features, indices, config, contexts):
    """Forward and backward of one step's features in ``grad_accum_steps`` micro-batches, each
    split over the contexts; gradients add up to those of the mean loss of the whole step."""
    losses = []
    for lo in range(0, len(indices), config.batch_size):
        arrays = squad.batchify([features[i] for i in indices[lo:lo + config.batch_size]],
                                round_to=8)
        with autograd.record():
            part_losses = [_forward_loss(model, part, config, len(part['input_ids']) / len(indices))
                           for part in split_batch(arrays, contexts)]
        autograd.backward(part_losses)
        losses += part_losses
    return losses


def _optimizer(model, features, first_step, config, contexts):
    """AdamW over the trainable parameters, after one forward pass materialises their shapes.

    With gradient accumulation the trainable parameters add up their gradients (``grad_req='add'``,
    set before the graph is built); :func:`train` zeroes them before each step.
    """
    if config.grad_accum_steps > 1:
        for param in model.collect_params().values():
            if param.grad_req != 'null':
                param.grad_req = 'add'
    first = squad.batchify([features[i] for i in first_step[:len(contexts)]], round_to=8)
    for part in split_batch(first, contexts):
        _forward_loss(model, part, config, 1.0)
    heads = set()
    for head in (model.start_scores, model.end_scores, model.answerable_scores):
        heads |= set(head.collect_params().values())
    params = [p for p in model.collect_params().values() if p.grad_req != 'null']
    return AdamW(params, weight_decay=config.weight_decay,
                 lr_mult=[config.head_lr_mult if p in heads else 1.0 for p in params])


def train(model, features, config, contexts):
    """Train, or resume the run whose checkpoints are in ``<output-dir>/checkpoints``.

    Returns (steps of the whole run, steps run by this call, training seconds of the whole run):
    the seconds are summed over resumed calls through the checkpoints' metadata.
    """
    started = time.time()
    batches = schedule(features, config)
    optimizer = _optimizer(model, features, batches[0], config, contexts)
    manager = CheckpointManager(os.path.join(config.output_dir, 'checkpoints'))
    begin, seconds = 0, 0.0
    entry = manager.latest()
    if entry is not None:                       # check_resumable has compared the recipes
        manager.restore(entry, model, optimizer, contexts)
        begin, seconds = entry['step'], float(entry['meta'].get('train_seconds', 0.0))
        print('resuming from step {} of {}'.format(begin, len(batches)))
        if begin == len(batches):
            return len(batches), 0, seconds
    earlier = seconds
    progress = tqdm(range(begin, len(batches)), initial=begin, total=len(batches), desc='train',
                    unit='step', dynamic_ncols=True, disable=not config.progress)
    loop_start, features_done = time.time(), 0
    for step in progress:
        seed_step(config.seed, step)
        if config.grad_accum_steps > 1:     # Parameter.zero_grad fails on mx.np arrays
            for grad in (g for p in optimizer.params for g in p.list_grad()):
                grad[:] = 0
        losses = _backward(model, features, batches[step], config, contexts)
        lr = linear_warmup_decay(step, len(batches), config.lr, config.warmup_ratio)
        optimizer.step(lr, config.max_grad_norm)
        features_done += len(batches[step])
        if step % 10 == 0 or step + 1 == len(batches):
            speed = features_done / max(time.time() - loop_start, 1e-9)
            progress.set_postfix(loss='{:.3f}'.format(sum(float(l) for l in losses)),
                                 lr='{:.1e}'.format(lr), feats_s='{:.1f}'.format(speed))
        if (step + 1) % config.checkpoint_every == 0 or step + 1 == len(batches):
            seconds = round(earlier + time.time() - started, 1)
            manager.save(step + 1, model, optimizer, {'recipe': recipe(config),
                                                      'train_seconds': seconds})
    return len(batches), len(batches) - begin, seconds    # the last step always saves
