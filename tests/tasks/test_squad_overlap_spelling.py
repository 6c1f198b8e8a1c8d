"""Leakage through title spelling and copied paragraphs: titles compared normalised (case,
whitespace runs, '_', Unicode NFC), training paragraphs checked against the threshold articles
as against the evaluation ones, and a refusal that names the titles and question ids to fix."""
import json

import pytest

from conftest import squad_file
from gluon_attention.data.squad import SquadExample
from gluon_attention.data.squad_overlap import find_overlap, normalize_title, paragraph_key
from jobs.squad.data import check_not_trained_on
from jobs.squad.train import prepare_train
from squad_tiny import make_tiny_bert, make_train_file, script_module, tiny_args

run_squad = script_module()


@pytest.fixture(scope='module')
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp('spelling')
    return {'bert': make_tiny_bert(root / 'bert'), 'train': make_train_file(root / 'train.json')}


def _article(name, title, paragraphs=1):
    raw = json.loads(squad_file(name).read_text(encoding='utf-8'))['data']
    [article] = [a for a in raw if a['title'] == title]
    return dict(article, paragraphs=article['paragraphs'][:paragraphs])


def _squad(path, articles):
    path.write_text(json.dumps({'version': 'v2.0', 'data': articles}), encoding='utf-8')
    return str(path)


def _config(files, tmp_path, *extra):
    args = tiny_args(files['bert'], files['train']) + list(extra)
    return run_squad.parse_config(['train', '--output-dir', str(tmp_path / 'out')] + args)[1]


@pytest.mark.parametrize('a, b, same', [
    ('Huguenot', 'huguenot ', True),
    ('Steam_engine', '  steam \t ENGINE', True),
    ('Caf\u00e9', 'Cafe\u0301', True),             # NFC: one code point or base + accent
    ('Normans', 'Norman', False),
    ('Cafe', 'Caf\u00e9', False),
])
def test_normalize_title(a, b, same):
    assert (normalize_title(a) == normalize_title(b)) is same


def test_another_spelling_of_a_threshold_article_is_not_trained_on(files, tmp_path):
    """Huguenot is held out for the threshold; 'huguenot ' (another case, a trailing space) in
    the extra training file was trained on."""
    copy = dict(_article('cs224n-16articles', 'Huguenot', 2), title='huguenot ')
    extra = _squad(tmp_path / 'extra.json', [copy])
    job = prepare_train(_config(files, tmp_path, '--extra-train-file', extra))
    assert job.trained_titles == ['Steam_engine']


def test_a_threshold_paragraph_under_another_title_is_refused(files, tmp_path):
    copy = dict(_article('cs224n-16articles', 'Huguenot', 1), title='Protestants_of_France')
    extra = _squad(tmp_path / 'extra.json', [copy])
    ids = [qa['id'] for qa in copy['paragraphs'][0]['qas']]
    with pytest.raises(ValueError) as err:
        prepare_train(_config(files, tmp_path, '--extra-train-file', extra))
    assert str(err.value).startswith('training and the threshold articles must share no article')
    assert "shared_titles=[], shared_paragraphs=1, titles_to_fix=['Protestants_of_France']" \
        in str(err.value)
    assert 'question_ids={}, num_questions={}'.format(ids[:10], len(ids)) in str(err.value)


def test_an_evaluation_article_in_another_spelling_is_refused_with_what_to_fix(files, tmp_path):
    """The evaluation file holds Normans; training holds 'NORMANS' (other paragraphs) and a copy
    of a Normans paragraph titled Vikings: the refusal names both titles and their questions."""
    normans = _article('haystack-small', 'Normans', 3)
    spelt = dict(normans, title='NORMANS', paragraphs=normans['paragraphs'][1:2])
    copied = dict(normans, title='Vikings', paragraphs=normans['paragraphs'][:1])
    extra = _squad(tmp_path / 'extra.json', [spelt, copied])
    ids = [qa['id'] for p in (spelt, copied) for qa in p['paragraphs'][0]['qas']]
    with pytest.raises(ValueError) as err:
        prepare_train(_config(files, tmp_path, '--extra-train-file', extra))
    message = str(err.value)
    assert "shared_titles=['NORMANS'], shared_paragraphs=2, titles_to_fix=['NORMANS', " \
        "'Vikings'], question_ids={}, num_questions={}".format(ids[:10], len(ids)) in message


def test_evaluate_refuses_a_trained_title_in_another_spelling():
    examples = [SquadExample('q1', 'normans\u00a0', 'q', 'A context.', [], True),
                SquadExample('q2', 'Other', 'q', 'Another context.', [], True)]
    with pytest.raises(ValueError, match=r"shared_titles=\['normans\\xa0'\], shared_paragraphs=0, "
                                         r"titles_to_fix=\['normans\\xa0'\], "
                                         r"question_ids=\['q1'\], num_questions=1"):
        check_not_trained_on({'trained_titles': ['Normans'], 'trained_paragraphs': []},
                             examples, 'f')
    found = find_overlap(examples, (), [paragraph_key(' Another\tcontext. ')])
    assert (found.shared_paragraphs, found.titles_to_fix, found.question_ids) == (
        1, ['Other'], ['q2'])
