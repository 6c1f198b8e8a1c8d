"""QAPredictor on the model folder and exported graph written at da7f4ab
(tests/fixtures/legacy_da7f4ab): the in-process model and the exported graph give the same
answers, which are that commit's evaluation; offsets point at the text; the empty-input rule;
run_squad.py predict shows the best span beside 'no answer' and prints every field with --json."""
import importlib.util
import json
import math
import shutil
from pathlib import Path

import mxnet as mx
import numpy as onp
import pytest

from gluon_attention.data import squad
from gluon_attention.pipelines import QAAnswer, QAPredictor

from squad_tiny import SCRIPT, copy_legacy, read_json

LEGACY = Path(__file__).resolve().parents[1] / 'fixtures' / 'legacy_da7f4ab'

_spec = importlib.util.spec_from_file_location('run_squad_script', str(SCRIPT))
run_squad = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(run_squad)


@pytest.fixture(scope='module')
def legacy(tmp_path_factory):
    """The legacy model folder (with the tokenizer files it was trained with), both predictors
    and the first 12 questions of haystack-small (what the fixture's predictions are of)."""
    root = tmp_path_factory.mktemp('legacy')
    copy_legacy(root)
    examples = squad.read_squad(squad.default_data_path('haystack-small'))[:12]
    return {'folder': root / 'model', 'examples': examples,
            'model': QAPredictor.from_folder(root / 'model', batch_size=5),
            'graph': QAPredictor.from_folder(root / 'model', graph=root / 'export' / 'qa')}


def _pairs(examples):
    long_context = ' '.join(e.context for e in examples[:3] if e.context)   # several chunks
    return [(e.question, e.context) for e in examples] + [
        (examples[0].question, long_context), ('', 'Some context.'),
        ('Who?', ' \n\t'), ('   ', '')]


def test_in_process_and_exported_graph_give_the_answers_that_commit_evaluated(legacy):
    examples, pairs = legacy['examples'], _pairs(legacy['examples'])
    model, graph = (legacy[k].answer_batch(pairs) for k in ('model', 'graph'))
    assert len(model) == len(graph) == len(pairs)
    for a, b in zip(model, graph):
        assert (a.text, a.start, a.end, a.best_span, a.best_span_start, a.best_span_end) == \
            (b.text, b.start, b.end, b.best_span, b.best_span_start, b.best_span_end)
        assert a.threshold == b.threshold == read_json(LEGACY / 'model' / 'qa_config.json')[
            'null_threshold']
        if a.score is not None:
            assert abs(a.score - b.score) < 1e-4
        assert a.null_score_diff == pytest.approx(b.null_score_diff, abs=1e-4)
    want_text, want_odds = (read_json(LEGACY / name) for name in ('predictions.json',
                                                                  'null_odds.json'))
    assert [a.text for a in model[:12]] == [want_text[e.qas_id] for e in examples]
    onp.testing.assert_allclose([a.null_score_diff for a in model[:12]],
                                [want_odds[e.qas_id] for e in examples], atol=1e-4)
    # one call per pair gives what the batch gave
    single = legacy['model'].answer(*pairs[12])
    assert (single.best_span, single.best_span_start) == (model[12].best_span,
                                                         model[12].best_span_start)


def test_offsets_point_at_the_text_and_the_threshold_decides(legacy):
    pairs = _pairs(legacy['examples'])[:13]
    for threshold in (1e6, -1e6):
        predictor = QAPredictor.from_folder(legacy['folder'], threshold=threshold)
        assert predictor.threshold.source == 'argument'
        for (_, context), answer in zip(pairs, predictor.answer_batch(pairs)):
            assert answer.best_span and answer.score is not None and answer.threshold == threshold
            start, end = answer.best_span_start, answer.best_span_end
            assert 0 <= start < end <= len(context) and context[start:end] == answer.best_span
            if threshold > 0:
                assert (answer.text, answer.start, answer.end) == (answer.best_span, start, end)
            else:
                assert (answer.text, answer.start, answer.end) == ('', None, None)


def test_blank_question_or_context_is_the_null_answer_without_a_forward_pass(legacy):
    """Empty, white space, or only zero-width characters (U+200B space, U+200D joiner, U+FEFF
    BOM, U+2060 word joiner): the question asks nothing, so no span is given."""
    predictor = legacy['model']
    block = predictor.block

    def refuse(*args):
        raise AssertionError('no forward pass expected')
    predictor.block = refuse
    try:
        answers = predictor.answer_batch([('', 'Some context.'), ('Who?', ' \n'), (' ', ''),
                                          ('\u200b\u200d\ufeff', 'Some context.'),
                                          ('Who?', '\u200b \u2060\n')])
    finally:
        predictor.block = block
    blank = QAAnswer('', None, None, None, math.inf, predictor.threshold.value, '', None, None)
    assert answers == [blank] * 5
    assert json.loads(json.dumps(blank.to_dict(), allow_nan=False)) == {
        'text': '', 'start': None, 'end': None, 'score': None, 'null_score_diff': None,
        'threshold': predictor.threshold.value, 'best_span': '', 'best_span_start': None,
        'best_span_end': None}
    with pytest.raises(TypeError, match=r'pairs must be \(question, context\) pairs of str'):
        predictor.answer_batch([('Who?', None)])


def test_predict_one_question_shows_the_best_span_and_json(legacy, capsys):
    example = legacy['examples'][0]
    common = ['predict', '--model-dir', str(legacy['folder']), '--threads', '1',
              '--no-progress', '--question', example.question, '--context', example.context]
    want = legacy['model'].answer(example.question, example.context)
    capsys.readouterr()
    assert run_squad.main(common) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert want.text == '' and want.best_span
    assert line == ('no answer (best span {!r}, characters {}-{}, span score {:.3f}; null score '
                    'difference {:.3f} > threshold {:.3f})'.format(
                        want.best_span, want.best_span_start, want.best_span_end, want.score,
                        want.null_score_diff, want.threshold))
    assert run_squad.main(common + ['--json']) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed == json.loads(json.dumps(want.to_dict()))
    assert run_squad.main(common[:-4] + ['--question', ' ', '--context', example.context]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == \
        'no answer (blank question or context)'


def test_readme_example_runs_outside_numpy_mode(legacy, tmp_path, monkeypatch, capsys):
    """The QAPredictor example of docs/usage.md, as written, on a copy of the legacy folder as
    runs/squad/model, with MXNet's numpy mode off (a process without mx.npx.set_np())."""
    text = (Path(__file__).resolve().parents[2] / 'docs' / 'usage.md').read_text(encoding='utf-8')
    section = text.split('### Answering questions from Python', 1)[1]
    code = section.split('```python\n', 1)[1].split('```', 1)[0]
    shutil.copytree(legacy['folder'], tmp_path / 'runs' / 'squad' / 'model')
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    with mx.util.np_array(False), mx.util.np_shape(False):
        exec(compile(code, 'docs/usage.md', 'exec'), {})     # pylint: disable=exec-used
    want = legacy['model'].answer_batch([('Who ruled?', 'Duke Rollo ruled.'), ('', 'No question.')])
    assert capsys.readouterr().out.strip().splitlines()[-1] == str([a.to_dict() for a in want])
