"""Bad input of the SQuAD scoring and data checks, in the style of ``test_bad_inputs.py``: one
table of (what is wrong, call, exception type, message fragments); each call raises exactly that
type, its message says ``Received:`` and contains every fragment."""
import pytest

from gluon_attention.data import squad
from gluon_attention.data.squad import SquadExample
from gluon_attention.export.onnx_calibrate import activation_ranges
from gluon_attention.export.onnx_optimize import check_node_names
from jobs.squad.combine import combine, mean_null_odds, read_run_outputs
from jobs.squad.data import check_no_shared_data, check_not_trained_on
from refusal import assert_refusal


def _example(qid, *golds):
    return SquadExample(qid, 'T', 'q', 'c', [(t, 0) for t in golds], not golds)


BAD = [
    ('f1_score-unknown-version', lambda: squad.f1_score('a', 'a', '3.0'), ValueError,
     ["version='3.0'", "'1.1'"]),
    ('gold_answers-unknown-version', lambda: squad.gold_answers(_example('q', 'a'), 1.1),
     ValueError, ['version=1.1']),
    ('squad_v11_evaluate-unanswerable-question',
     lambda: squad.squad_v11_evaluate([_example('q1', 'a'), _example('q2')],
                                      {'q1': 'a', 'q2': ''}),
     ValueError, ['unanswerable=1', "first_unanswerable='q2'"]),
    ('squad_v11_evaluate-missing-prediction',
     lambda: squad.squad_v11_evaluate([_example('q1', 'a')], {}), ValueError,
     ["first_missing='q1'"]),
    ('squad_evaluate-constant-null-odds',
     lambda: squad.squad_evaluate([_example('q1', 'a'), _example('q2')], {'q1': 'a', 'q2': ''},
                                  na_probs={'q1': 0.0, 'q2': 0.0}),
     ValueError, ['constant no-answer scores', 'num_questions=2', 'first_value=0.0']),
    ('check_no_shared_data-title-in-another-case',
     lambda: check_no_shared_data([_example('t1', 'a')], [SquadExample('e1', ' t ', 'q', 'd', [],
                                                                      True)]),
     ValueError, ["shared_titles=['T']", "titles_to_fix=['T']", "question_ids=['t1']"]),
    ('check_node_names-unknown-name-lists-near-names',
     lambda: check_node_names(['encoderlayer1_dense'], ['encoderlayer1_dense3_matmul',
                                                        'encoderlayer10_dense3_matmul', 'other']),
     ValueError, ["exclude='encoderlayer1_dense'", 'nearest: encoderlayer1_dense3_matmul']),
    ('activation_ranges-no-batches', lambda: activation_ranges('m.onnx', []), ValueError,
     ['num_batches=0']),
    ('check_not_trained_on-title-in-another-case',
     lambda: check_not_trained_on({'trained_titles': ['t']}, [_example('e1', 'a')], 'f'),
     ValueError, ["shared_titles=['T']", "question_ids=['e1']", 'num_questions=1']),
    ('mean_null_odds-no-runs', lambda: mean_null_odds([]), ValueError, ['num_runs=0']),
    ('mean_null_odds-other-questions',
     lambda: mean_null_odds([{'q1': 0.0, 'q2': 1.0}, {'q1': 0.0, 'q3': 1.0}]), ValueError,
     ['same questions', 'run=1', "missing=['q2']", "extra=['q3']"]),
    ('combine-one-heldout-output-per-run',
     lambda: combine([_example('h', 'a')], [_example('e', 'a')], [({'h': 'a'}, {'h': 0.0})], []),
     ValueError, ['num_runs=0', 'num_heldout=1']),
    ('combine-question-without-null-odds',
     lambda: combine([_example('h', 'a')], [_example('e', 'a')], [({'h': 'a'}, {'h': 0.0})],
                     [({'x': 'a'}, {'x': 0.0})]),
     ValueError, ['every evaluation question', "first_missing='e'"]),
    ('read_run_outputs-not-a-run-folder', lambda: read_run_outputs('no-such-folder'),
     ValueError, ['nbest_predictions.json', "folder='no-such-folder'"]),
]


@pytest.mark.parametrize('call,kind,fragments', [row[1:] for row in BAD],
                         ids=[row[0] for row in BAD])
def test_bad_input_raises_with_received(call, kind, fragments):
    with pytest.raises(Exception) as err:
        call()
    assert_refusal(err.value, kind, fragments)
