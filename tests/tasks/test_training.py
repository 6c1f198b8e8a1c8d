"""Training utilities: the engine's clipped AdamW step against a float64 reference, the
schedule, the shared loop's epochs, contexts."""
import json
import math

import mxnet as mx
import numpy as onp
import pytest
from mxnet import gluon

from jobs.engine.common import parse_ctx
from jobs.engine.distributed import DataParallel
from jobs.engine.loop import (StepConfig, TrainingInterrupted, linear_warmup_decay,
                                              train_steps)


def _adamw_steps(weight, grads, lr, wd, betas=(0.9, 0.999), eps=1e-6):
    """float64 AdamW (decoupled decay, bias correction, epsilon on sqrt(v)) over ``grads``."""
    m = onp.zeros_like(weight)
    v = onp.zeros_like(weight)
    for t, g in enumerate(grads, 1):
        m = betas[0] * m + (1 - betas[0]) * g
        v = betas[1] * v + (1 - betas[1]) * g * g
        alpha = math.sqrt(1 - betas[1] ** t) / (1 - betas[0] ** t)
        weight = weight - lr * (alpha * m / (onp.sqrt(v) + eps) + wd * weight)
    return weight


@pytest.mark.parametrize('contexts', [[mx.cpu(0)], [mx.cpu(0), mx.cpu(1)]])
def test_engine_step_matches_float64_adamw_with_clipping_and_decay(contexts):
    """DataParallel.step: mean of the summed gradient, clipped to a global norm of 0.5 (it
    acts: the norms are > 0.5), AdamW with decay on the weight only, on every context."""
    net = gluon.nn.Dense(3, in_units=5)
    net.initialize(mx.init.Normal(1.0), ctx=contexts)
    weights = {'weight': net.weight.data(contexts[0]).asnumpy().astype('float64'),
               'bias': net.bias.data(contexts[0]).asnumpy().astype('float64')}
    engine = DataParallel(net.collect_params(), optimizer_params={'wd': 0.1})
    rng = onp.random.RandomState(0)
    seen = {'weight': [], 'bias': []}
    for _ in range(3):
        x = rng.normal(size=(4, 5)) * 3
        current = {n: p.data(contexts[0]).asnumpy().astype('float64')
                   for n, p in (('weight', net.weight), ('bias', net.bias))}
        y = x @ current['weight'].T + current['bias']          # loss: sum of y ** 2
        mean = {'weight': 2 * y.T @ x / 4, 'bias': 2 * y.sum(0) / 4}
        norm = math.sqrt(sum((g ** 2).sum() for g in mean.values()))
        assert norm > 0.5
        engine.forward_backward(lambda part: (net(part['x']) ** 2).sum(),
                                {'x': x.astype('float32')})
        assert engine.step(4, 0.01, max_grad_norm=0.5) == pytest.approx(norm, rel=1e-5)
        for n in seen:
            seen[n].append(mean[n] * 0.5 / norm)
    for name, param, wd in (('weight', net.weight, 0.1), ('bias', net.bias, 0.0)):
        expected = _adamw_steps(weights[name], seen[name], 0.01, wd)
        for ctx in contexts:        # every context holds the same updated weights
            onp.testing.assert_allclose(param.data(ctx).asnumpy(), expected, rtol=1e-5,
                                        atol=1e-6)


def test_linear_warmup_then_decay_to_zero():
    lrs = [linear_warmup_decay(s, 20, 1.0, 0.1) for s in range(20)]
    assert lrs[0] == pytest.approx(0.5) and lrs[1] == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(lrs[1:], lrs[2:]))
    assert lrs[-1] == pytest.approx(1 / 18)


def _tiny_run(folder, steps, on_epoch_end=None, epoch_ends=(5, 10, 12), on_step=None):
    """A Dense layer trained on 12 batches of 2 examples with epochs of 5, 5 and 2 steps."""
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(2, in_units=3))
    net.initialize(mx.init.Constant(0.5))
    engine = DataParallel(net.collect_params())
    x = onp.arange(24 * 3, dtype='float32').reshape(24, 3) / 50
    batches = [[2 * s, 2 * s + 1] for s in range(steps)]
    train_steps(net, engine, lambda part: (net(part['x']) ** 2).sum(), batches,
                lambda ids: {'x': x[ids]}, StepConfig(keep_checkpoints=0),
                checkpoint_dir=str(folder), meta={'job': 'tiny'}, on_step=on_step,
                epoch_ends=epoch_ends, on_epoch_end=on_epoch_end)
    return net


def test_epoch_hook_runs_after_each_epochs_last_step_and_its_meta_is_checkpointed(tmp_path):
    calls, steps = [], []

    def on_epoch_end(epoch, done):
        calls.append((epoch, done, list(steps)))
        return {'epoch': epoch}
    _tiny_run(tmp_path, 12, on_epoch_end, on_step=lambda result: steps.append(result.step))
    assert [c[:2] for c in calls] == [(1, 5), (2, 10), (3, 12)]
    assert [c[2][-1] for c in calls] == [4, 9, 11]           # after the epoch's last step
    index = json.loads((tmp_path / 'checkpoints.json').read_text())
    assert [(e['step'], e['meta']['epoch'], e['meta']['job']) for e in index] == [
        (5, 1, 'tiny'), (10, 2, 'tiny'), (12, 3, 'tiny')]


def test_a_run_resumed_at_an_epoch_end_ends_as_a_straight_run(tmp_path, capsys):
    straight = _tiny_run(tmp_path / 'straight', 12)[0].weight.data().asnumpy()
    folder = tmp_path / 'resumed'
    _tiny_run(folder, 12)
    index = json.loads((folder / 'checkpoints.json').read_text())
    (folder / 'checkpoints.json').write_text(json.dumps(index[:1]))   # as if killed at step 5
    capsys.readouterr()
    resumed = _tiny_run(folder, 12)[0].weight.data().asnumpy()
    assert 'resuming from step 5 of 12 (after epoch 1)' in capsys.readouterr().out
    onp.testing.assert_array_equal(resumed, straight)
    assert not onp.array_equal(straight, onp.full_like(straight, 0.5))


@pytest.mark.parametrize('epoch_ends', [(5, 5), (0, 12), (5, 13)])
def test_epoch_ends_must_increase_within_the_run(tmp_path, epoch_ends):
    with pytest.raises(ValueError, match=r'epoch_ends must be increasing step counts in \[1, '
                                         r'12\]. Received: epoch_ends='):
        _tiny_run(tmp_path, 12, epoch_ends=epoch_ends)


@pytest.mark.parametrize('text, expected', [
    ('cpu', [mx.cpu(0)]), ('gpu', [mx.gpu(0)]), ('gpu(1)', [mx.gpu(1)]), ('cpu(3)', [mx.cpu(3)]),
    ('cpu(0),cpu(1)', [mx.cpu(0), mx.cpu(1)]), (' gpu(0), gpu(1) ', [mx.gpu(0), mx.gpu(1)])])
def test_parse_ctx_accepts_the_one_grammar(text, expected):
    assert parse_ctx(text) == expected


@pytest.mark.parametrize('text', ['tpu', 'gpu0', 'cpu1', 'cpu(0', 'cpu0)', 'cpu()', '', 'cpu,',
                                  'gpu(-1)', 'cpu,cpu', 'cpu(0),cpu'])
def test_parse_ctx_rejects_every_other_form_naming_the_accepted_ones(text):
    with pytest.raises(ValueError, match=r"'cpu', 'gpu', 'cpu\(N\)', 'gpu\(N\)'") as info:
        parse_ctx(text)
    assert 'Received: ctx=' in str(info.value)


def test_ctrl_c_reports_the_steps_done_and_the_last_checkpoint(tmp_path):
    def ctrl_c(result):
        if result.step == 6:
            raise KeyboardInterrupt
    with pytest.raises(TrainingInterrupted) as info:        # epochs end at steps 5, 10, 12
        _tiny_run(tmp_path, 12, on_step=ctrl_c)
    assert (info.value.done, info.value.total, info.value.checkpoint) == (7, 12, 5)
    assert info.value.message() == (
        'stopped at step 7 of 12; the last checkpoint is step 5 ({}): rerun the same command to '
        'resume from it'.format(tmp_path))
    with pytest.raises(TrainingInterrupted) as info:
        _tiny_run(tmp_path / 'fresh', 12, on_step=lambda result: ctrl_c(result._replace(step=6)))
    assert info.value.message() == ('stopped at step 1 of 12, before the first checkpoint: rerun '
                                    'the same command to start again')
