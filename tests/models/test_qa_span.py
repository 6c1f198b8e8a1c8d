"""top_spans (the plain start/end head's inference outputs) against a float64 enumeration of
every valid pair, and its null score difference for a SQuAD 2.0 model."""
import mxnet as mx
import numpy as onp
import pytest

from gluon_attention.models.qa_span import top_spans


def _valid_pairs(start, end, p_mask, max_answer_length):
    """(score, s, e) of every valid span of one row, best first (float64 enumeration)."""
    length = len(start)
    pairs = [(float(start[s]) + float(end[e]), s, e) for s in range(1, length)
             for e in range(s, min(length, s + max_answer_length)) if p_mask[s] and p_mask[e]]
    return sorted(pairs, key=lambda pair: -pair[0])


@pytest.mark.parametrize('version_2', [False, True])
def test_top_spans_are_the_best_valid_pairs(version_2):
    rng = onp.random.RandomState(4)
    start, end = (rng.normal(0, 3, (3, 9)).astype('float32') for _ in range(2))
    p_mask = (rng.rand(3, 9) < 0.7).astype('float32')
    p_mask[:, 0] = 1                                      # [CLS] may be marked: never a span
    outputs = [x.asnumpy() for x in top_spans(*(mx.np.array(x) for x in (start, end, p_mask)),
                                              top_k=4, max_answer_length=3,
                                              version_2=version_2)]
    s_logit, s_index, e_logit, e_index, answerable = outputs
    assert s_logit.shape == s_index.shape == (3, 4) and e_index.shape == (3, 4, 1)
    for row in range(3):
        want = _valid_pairs(start[row], end[row], p_mask[row], 3)
        assert len(want) >= 4
        got = [(int(s), int(e)) for s, e in zip(s_index[row], e_index[row, :, 0])]
        assert got == [(s, e) for _, s, e in want[:4]]
        onp.testing.assert_allclose(s_logit[row] + e_logit[row, :, 0],
                                    [score for score, _, _ in want[:4]], rtol=0, atol=1e-5)
        if version_2:     # (best span, [CLS] span): null score difference = null - best
            onp.testing.assert_allclose(answerable[row], [want[0][0], start[row, 0] +
                                                          end[row, 0]], rtol=0, atol=1e-5)
        else:
            assert answerable[row, 0] == 0 and answerable[row, 1] == -onp.inf
