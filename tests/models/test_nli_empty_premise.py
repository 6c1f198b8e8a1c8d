"""The NLI alignment with an empty first sentence (L_A = 0): finite outputs of the right shape."""
import numpy as onp

from block_utils import initialized, ints, rand
from gluon_attention.models.nli import Attend


def test_attend_with_empty_first_sentence():
    beta, alpha = initialized(Attend(5))(rand(2, 0, 4), rand(2, 5, 4), ints([0, 0]), ints([5, 2]))
    assert beta.shape == (2, 0, 4) and alpha.shape == (2, 5, 4)
    assert onp.isfinite(beta.asnumpy()).all() and onp.isfinite(alpha.asnumpy()).all()
