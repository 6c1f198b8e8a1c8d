"""``attend`` over an empty context (N = 0): a finite zero output of shape (B, M, D)."""
import numpy as onp

from block_utils import rand
from gluon_attention.compat.attend import attend


def test_attend_over_empty_context_gives_zero_output():
    out = attend(rand(2, 3, 4), rand(2, 0, 4))
    assert out.shape == (2, 3, 4)
    assert onp.all(out.asnumpy() == 0)
