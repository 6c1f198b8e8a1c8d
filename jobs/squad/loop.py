"""The training loop of the SQuAD job on the data-parallel engine: the schedule of steps, the
refusal to mix runs in one output folder, the loss, checkpoints and resuming.

Every function takes a :class:`~jobs.squad.config.TrainConfig`; the data are in
:mod:`~jobs.squad.data`, the commands in :mod:`~jobs.squad.train`
and :mod:`~jobs.squad.infer`. The steps run on
:class:`~jobs.engine.distributed.DataParallel` (kvstore ``--kvstore``): a step
holds ``--batch-size x --grad-accum-steps x workers`` features (the *features per step*), each
worker takes its slice, splits it into ``--grad-accum-steps`` forward passes and each pass over its
``--ctx`` devices.
"""
import collections
import os
import time

import mxnet as mx
import numpy as onp
from tqdm import tqdm

from gluon_attention.checks import fail
from gluon_attention.data import squad
from gluon_attention.models.qa import qa_loss_parts

from ..engine.checkpoints import check_resume
from ..engine.config import recipe
from ..engine.distributed import DataParallel
from ..engine.launch import check_kvstore
from ..engine.loop import StepConfig, train_steps
from ..engine.train_log import LossParts, TrainLog
from .data import INPUT_NAMES

__all__ = ['schedule', 'features_per_step', 'check_resumable', 'train',
           'TrainResult']

#: What :func:`train` returns: steps of the whole run, steps run by this call, training seconds
#: of the whole run (summed over resumed calls), features per step (all workers), and whether
#: this process is the chief (rank 0: it evaluates and writes the model).
TrainResult = collections.namedtuple('TrainResult',
                                     'steps steps_run seconds features_per_step is_chief')

#: Recipe options whose product with the number of workers is compared instead of each value.
_LAYOUT = ('batch_size', 'grad_accum_steps')


def features_per_step(config, workers=1):
    """Training features of one step, all workers together."""
    return config.batch_size * config.grad_accum_steps * workers


def schedule(features, config, workers=1):
    """Feature indices of every step of the run: shuffled per epoch, each step's features drawn
    from a pool of similar lengths so little is padded.

    A step holds :func:`features_per_step` features. ``--max-steps`` > 0 gives the number of
    steps; 0 gives ``ceil(epochs * len(features) / features per step)``. The schedule depends
    on the layout only through the features per step.
    """
    if not features:
        fail('expected at least one training feature (check --train-file, --extra-train-file '
             'and the keep ratios)', num_features=0)
    size = features_per_step(config, workers)
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


def _compared(options, per_step):
    """Recipe options as compared between runs: ``--batch-size`` and ``--grad-accum-steps``
    give way to the features per step, so a run resumes under another layout."""
    compared = {k: v for k, v in options.items() if k not in _LAYOUT}
    compared['features per step (--batch-size x --grad-accum-steps x workers)'] = per_step
    return compared


def _recorded(before, meta):
    """A checkpoint's recipe as compared (an older one did not record its features per step)."""
    single = before.get('batch_size', 0) * before.get('grad_accum_steps', 1)
    return _compared(before, meta.get('features_per_step', single))


def check_resumable(config):
    """Refuse to mix runs: checkpoints in ``<output-dir>/checkpoints`` must have been written
    with the same recipe options (:func:`~jobs.engine.config.recipe`), with
    ``--batch-size`` and ``--grad-accum-steps`` compared through the features per step (a
    2-worker run with ``--batch-size 8`` resumes in one process with ``--batch-size 16``).

    Returns the checkpoint entry to resume, or None (see
    :func:`~jobs.engine.checkpoints.check_resume`).

    Raises
    ------
    ValueError
        Naming every differing option with its value there and now; as
        :func:`~jobs.engine.launch.check_kvstore`;
        or for checkpoints whose optimizer state an older version of the job wrote.
    """
    workers = check_kvstore(config.kvstore)
    return check_resume(os.path.join(config.output_dir, 'checkpoints'),
                        _compared(recipe(config), features_per_step(config, workers)),
                        defaults=recipe(type(config)()), compared=_recorded)


def _summed_loss(model, config, parts):
    """The loss of the engine: :func:`~gluon_attention.models.qa.qa_loss` (the sum of its span
    and answerable terms, each added to ``parts``) summed over a part."""
    def loss_fn(part):
        start, end, null = model(*[part[k] for k in INPUT_NAMES], part['start_position'])
        span, answerable = qa_loss_parts(
            start, end, null, part['start_position'], part['end_position'],
            part['is_impossible'], config.answerable_weight, part['answerable_loss_weight'])
        size = part['input_ids'].shape[0]
        parts.add(span=span * size, answerable=answerable * size)
        return (span + answerable) * size
    return loss_fn


def _engine(model, features, config, contexts):
    """The engine over the trainable parameters, after one forward pass fixes the QA heads'
    deferred shapes; the heads' parameters get ``lr_mult = --head-lr-mult``."""
    for param in model.collect_params().values():
        if param.grad_req != 'null':        # before the (static) graph is built
            param.grad_req = 'add'
    first = squad.batchify([features[0]], round_to=8)
    model(*[mx.np.array(first[k], dtype=first[k].dtype, ctx=contexts[0])
            for k in INPUT_NAMES + ('start_position',)])
    for head in (model.start_scores, model.end_scores, model.answerable_scores):
        for param in head.collect_params().values():
            param.lr_mult = config.head_lr_mult
    return DataParallel(model.collect_params(), config.kvstore,
                        optimizer_params={'learning_rate': config.lr, 'wd': config.weight_decay,
                                          'epsilon': config.adam_epsilon})


class _Progress:
    """The chief's progress bar, opened at the first step this call runs (a resumed run starts
    there): loss, learning rate and features per second of all workers every 10 steps."""

    def __init__(self, total, per_step, enabled):
        self.total, self.per_step, self.enabled = total, per_step, enabled
        self.bar, self.started, self.done = None, 0.0, 0

    def __call__(self, result):
        if self.bar is None:
            self.bar = tqdm(total=self.total, initial=result.step, desc='train', unit='step',
                            dynamic_ncols=True, disable=not self.enabled)
            self.started = time.time()
        self.bar.update(1)
        self.done += self.per_step
        if result.step % 10 == 0 or result.step + 1 == self.total:
            speed = self.done / max(time.time() - self.started, 1e-9)
            self.bar.set_postfix(loss='{:.3f}'.format(result.loss), lr='{:.1e}'.format(result.lr),
                                 feats_s='{:.1f}'.format(speed))

    def close(self):
        if self.bar is not None:
            self.bar.close()


def _step_config(config):
    """The options of the shared loop, from the job's."""
    return StepConfig(seed=config.seed, lr=config.lr, warmup_ratio=config.warmup_ratio,
                      max_grad_norm=config.max_grad_norm,
                      grad_accum_steps=config.grad_accum_steps,
                      checkpoint_every=config.checkpoint_every,
                      keep_checkpoints=config.keep_checkpoints)


def train(model, features, config, contexts):
    """Train, or resume the run whose checkpoints are in ``<output-dir>/checkpoints``, on the
    engine of ``--kvstore`` (every worker of a distributed job calls this with the same data).

    Returns
    -------
    TrainResult
        The chief (rank 0) saves the checkpoints; every worker resumes from them.
    """
    engine = _engine(model, features, config, contexts)
    per_step = features_per_step(config, engine.num_workers)
    batches = schedule(features, config, engine.num_workers)
    progress = _Progress(len(batches), per_step, config.progress and engine.is_chief)
    parts = LossParts()
    try:
        first, seconds = train_steps(
            model, engine, _summed_loss(model, config, parts), batches,
            lambda ids: squad.batchify([features[i] for i in ids], round_to=8),
            _step_config(config), checkpoint_dir=os.path.join(config.output_dir, 'checkpoints'),
            meta={'recipe': recipe(config), 'features_per_step': per_step}, on_step=progress,
            log=TrainLog(config.output_dir, config.log_every, 'features', parts))
    finally:
        progress.close()
    return TrainResult(len(batches), len(batches) - first, seconds, per_step, engine.is_chief)
