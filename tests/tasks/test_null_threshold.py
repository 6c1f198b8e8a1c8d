"""NullThreshold, the null threshold's one form: what each spelling becomes, what a folder's
record gives, the resolution order, and the command line's translation of its error."""
import math

import pytest

from gluon_attention.pipelines import NullThreshold
from gluon_attention.pipelines.threshold import NEVER_NULL
from jobs.engine.config import as_flags
from jobs.squad.config import EvaluateConfig, PredictConfig

SAVED = {'null_threshold': -1.25, 'null_threshold_source': 'held-out articles Huguenot'}


@pytest.mark.parametrize('given, value, source', [
    (None, None, 'auto'), ('auto', None, 'auto'), (0.5, 0.5, 'argument'), (2, 2.0, 'argument'),
    (math.inf, math.inf, 'argument'), ('-3.5', -3.5, 'argument')])
def test_each_spelling_becomes_one_value(given, value, source):
    assert NullThreshold.of(given) == NullThreshold(value, source)


def test_a_threshold_is_returned_as_it_is_and_a_record_round_trips():
    given = NullThreshold(0.25, 'flag')
    assert NullThreshold.of(given) is given
    assert NullThreshold.saved(SAVED) == NullThreshold(-1.25, 'held-out articles Huguenot')
    assert NullThreshold.saved(SAVED).record() == SAVED
    assert NullThreshold.saved({'null_threshold': None}).value is None


def test_resolve_prefers_the_given_value_then_the_saved_one_and_squad_1_1_never_null():
    assert NullThreshold.of(0.5).resolve(SAVED, 1) == NullThreshold(0.5, 'argument')
    assert NullThreshold.of('auto').resolve(SAVED, 1) == NullThreshold.saved(SAVED)
    assert NullThreshold.of('auto').resolve(NullThreshold.saved(SAVED), True).value == -1.25
    assert NullThreshold.of(0.5).resolve(SAVED, 0) == NullThreshold(math.inf, NEVER_NULL)


def test_the_job_options_parse_into_a_null_threshold_once():
    assert EvaluateConfig(null_score_diff_threshold='1.5').null_threshold == NullThreshold(
        1.5, 'flag')
    assert PredictConfig().null_threshold == NullThreshold(None, 'auto')


def test_the_command_line_names_its_flags_in_library_errors():
    with pytest.raises(ValueError) as err:
        EvaluateConfig(null_score_diff_threshold='nan')
    message = as_flags(err.value, EvaluateConfig)
    assert message.startswith("--null-score-diff-threshold must be 'auto' or a finite number")
    assert message.endswith("Received: null_score_diff_threshold='nan'")
    assert as_flags('model_dir must be x; threshold must be y', EvaluateConfig) == (
        '--model-dir must be x; threshold must be y')
