"""``seed_step(seed, step)`` makes the dropout masks of a step a function of (seed, step) only."""
import numpy as onp
from mxnet import autograd

from block_utils import rand
import gluon_attention as ga
from jobs.engine.common import seed_step


def test_dropout_masks_repeat_for_the_same_seed_and_step():
    block = ga.DotProductAttention(dropout=0.5)
    q, k, v = rand(2, 3, 4), rand(2, 5, 4), rand(2, 5, 6)
    runs = []
    for _ in range(2):
        masks = []
        for step in (0, 1, 0):
            seed_step(7, step)
            with autograd.record(train_mode=True):
                masks.append(block(q, k, v)[1].asnumpy())
        runs.append(masks)
    for a, b in zip(*runs):
        onp.testing.assert_array_equal(a, b)
    onp.testing.assert_array_equal(runs[0][0], runs[0][2])
    assert not onp.array_equal(runs[0][0], runs[0][1])
