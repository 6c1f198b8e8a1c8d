"""The NLI alignment with an empty first sentence (L_A = 0): each sentence is the other's memory,
so an empty one is a clear ValueError before any graph runs, never a raw MXNet error."""
import pytest

from block_utils import initialized, ints, rand
from gluon_attention.models.nli import Attend


def test_attend_with_empty_first_sentence_is_a_value_error():
    with pytest.raises(ValueError, match='Received:'):
        initialized(Attend(5))(rand(2, 0, 4), rand(2, 5, 4), ints([0, 0]), ints([5, 2]))
