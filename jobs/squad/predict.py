"""How ``run_squad.py predict --question ... --context ...`` shows its answer."""
__all__ = ['describe_answer']


def describe_answer(answer):
    """One line about a :class:`~gluon_attention.pipelines.predictor.QAAnswer`: the answer,
    its character offsets [start, end) in the context and its span score; or 'no answer' with
    why, showing the best non-null span beside the decision when there is one."""
    decision = 'null score difference {:.3f} {} threshold {:.3f}'.format(
        answer.null_score_diff, '<=' if answer.text else '>', answer.threshold)
    if answer.text:
        return 'answer: {!r} (characters {}-{} of the context; span score {:.3f}; {})'.format(
            answer.text, answer.start, answer.end, answer.score, decision)
    if answer.null_score_diff == float('inf') and answer.score is None:
        return 'no answer (blank question or context)'
    if answer.score is None:
        return 'no answer (no span inside the context)'
    return 'no answer (best span {!r}, characters {}-{}, span score {:.3f}; {})'.format(
        answer.best_span, answer.best_span_start, answer.best_span_end, answer.score, decision)
