"""No evaluation data in training: train refuses training and evaluation sets that share an
article title or a paragraph (the articles held out for the threshold count as neither), before
any work; a model folder records the titles and paragraphs it was trained on, with those of the
folder it started from, and evaluate refuses them (a paragraph under any title); a folder without
a record is checked on what it records and says so."""
import hashlib
import json
import shutil

import pytest

from conftest import squad_file
from gluon_attention.data.squad import SquadExample
from jobs.squad.data import check_not_trained_on
from jobs.squad.train import prepare_train
from squad_tiny import make_tiny_bert, make_train_file, read_json, script_module, tiny_args

run_squad = script_module()


@pytest.fixture(scope='module')
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp('overlap')
    return {'root': root, 'bert': make_tiny_bert(root / 'bert'),
            'train': make_train_file(root / 'train.json')}


def _squad(path, articles):
    path.write_text(json.dumps({'version': 'v2.0', 'data': articles}), encoding='utf-8')
    return str(path)


def _articles(name, titles, paragraphs=1):
    raw = json.loads(squad_file(name).read_text(encoding='utf-8'))['data']
    return [dict(a, paragraphs=a['paragraphs'][:paragraphs]) for a in raw if a['title'] in titles]


def _refused(args, capsys):
    """The one error line of a run_squad.py command refused before any work."""
    with pytest.raises(SystemExit) as info:
        run_squad.main(args)
    assert info.value.code == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    return line


def test_train_refuses_a_shared_title_or_paragraph_before_any_work(files, tmp_path, capsys):
    normans = _articles('haystack-small', {'Normans'})
    renamed = [dict(normans[0], title='Not_the_Normans')]
    ids = [qa['id'] for qa in normans[0]['paragraphs'][0]['qas']]
    listed = 'question_ids={}, num_questions={}'.format(ids[:10], len(ids))
    cases = ((normans, "shared_titles=['Normans'], shared_paragraphs=1, "
                       "titles_to_fix=['Normans'], " + listed),
             (renamed, "shared_titles=[], shared_paragraphs=1, "
                       "titles_to_fix=['Not_the_Normans'], " + listed))
    for index, (extra, received) in enumerate(cases):
        extra_file = _squad(tmp_path / 'extra{}.json'.format(index), extra)
        out = tmp_path / 'out{}'.format(index)
        args = tiny_args(files['bert'], files['train']) + ['--extra-train-file', extra_file]
        line = _refused(['train', '--output-dir', str(out)] + args, capsys)
        assert line == (
            'run_squad.py: error: training and evaluation must share no article and no '
            'paragraph (leave the listed articles out of training with --exclude-titles, or use '
            'other articles). Received: {}'.format(received))
        assert not out.exists()


def test_threshold_articles_are_not_counted_as_shared(files, tmp_path, capsys):
    """Huguenot is held out of training for the threshold and is in the evaluation file."""
    eval_file = _squad(tmp_path / 'eval.json', _articles('cs224n-16articles', {'Huguenot'}))
    args = tiny_args(files['bert'], files['train']) + ['--eval-file', eval_file]
    config = run_squad.parse_config(['train', '--output-dir', str(tmp_path / 'out')] + args)[1]
    job = prepare_train(config)
    assert job.overlap == {'train_eval_shared_titles': 0, 'train_eval_shared_paragraphs': 0}
    assert job.trained_titles == ['Steam_engine']
    assert 'Huguenot' in capsys.readouterr().err      # the note: threshold chosen on them


def test_the_folder_records_its_titles_and_evaluate_refuses_them(files, tmp_path, capsys):
    start = tmp_path / 'start'
    shutil.copytree(files['bert'], start)
    (start / 'qa_config.json').write_text(json.dumps({'trained_titles': ['Packet_switching'],
                                                      'trained_paragraphs': ['0' * 16]}))
    out = tmp_path / 'run'
    args = tiny_args(start, files['train']) + ['--skip-export']
    assert run_squad.main(['train', '--output-dir', str(out)] + args) == 0
    titles = ['Packet_switching', 'Steam_engine']
    saved = read_json(out / 'model' / 'qa_config.json')
    assert saved['trained_titles'] == titles
    steam = _articles('cs224n-16articles', {'Steam_engine'}, paragraphs=3)[0]['paragraphs']
    assert saved['trained_paragraphs'] == sorted(
        [_sha16(p['context']) for p in steam] + ['0' * 16])
    metrics = read_json(out / 'metrics.json')
    assert (metrics['train_eval_shared_titles'], metrics['train_eval_shared_paragraphs']) == (0, 0)

    trained = _squad(tmp_path / 'trained.json', _articles('cs224n-16articles', {
        'Normans', 'Steam_engine', 'Packet_switching'}))
    line = _refused(['evaluate', '--model-dir', str(out / 'model'), '--eval-file', trained,
                     '--output-dir', str(tmp_path / 'e'), '--threads', '1'], capsys)
    expected = ('run_squad.py: error: --eval-file must hold no article and no paragraph the '
                'model was trained on (the trained_titles and trained_paragraphs of its '
                'qa_config.json; a paragraph whatever its title). Received: eval_file={!r}, '
                'shared_titles={}, shared_paragraphs=1, titles_to_fix={}'.format(
                    trained, titles, ['Steam_engine', 'Packet_switching']))
    assert line.startswith(expected)
    assert not (tmp_path / 'e').exists()

    # a trained paragraph under another title, its spaces changed, is refused too
    copied = _articles('cs224n-16articles', {'Steam_engine'}, paragraphs=2)[0]
    copied['paragraphs'][1]['context'] = copied['paragraphs'][1]['context'].replace(
        ' ', '\t', 3) + ' \n'
    renamed = _squad(tmp_path / 'renamed.json', _articles('cs224n-16articles', {'Normans'})
                     + [dict(copied, title='Warszawa')])
    line = _refused(['evaluate', '--model-dir', str(out / 'model'), '--eval-file', renamed,
                     '--output-dir', str(tmp_path / 'e'), '--threads', '1'], capsys)
    assert line.startswith(
        'run_squad.py: error: --eval-file must hold no article and no paragraph the model was '
        'trained on (the trained_titles and trained_paragraphs of its qa_config.json; a '
        'paragraph whatever its title). Received: eval_file={!r}, shared_titles=[], '
        "shared_paragraphs=2, titles_to_fix=['Warszawa'], question_ids=".format(renamed))
    assert not (tmp_path / 'e').exists()

    # a folder started from this one is refused on Packet_switching too, before any work
    inherited = _squad(tmp_path / 'inherited.json', _articles('cs224n-16articles', {
        'Normans', 'Packet_switching'}))
    line = _refused(['train', '--output-dir', str(tmp_path / 'again')]
                    + tiny_args(out / 'model', files['train'])
                    + ['--eval-file', inherited, '--max-eval-examples', '0'], capsys)
    assert "shared_titles=['Packet_switching'], shared_paragraphs=0" in line


def _sha16(context):
    return hashlib.sha1(' '.join(context.split()).encode('utf-8')).hexdigest()[:16]


def test_a_folder_written_before_the_paragraph_record_checks_titles_and_says_so(capsys):
    examples = [SquadExample('q', 'Warszawa', 'Where?', 'A paragraph seen in training.', [], True)]
    assert check_not_trained_on({'trained_titles': ['Normans']}, examples, 'f') == {
        'train_eval_shared_titles': 0}
    assert capsys.readouterr().err == (
        'note: the model folder records no trained paragraphs (written before they were '
        'recorded): only article titles are checked against its training data\n')
    assert check_not_trained_on({}, examples, 'f') == {}
    assert 'nothing is checked' in capsys.readouterr().err
    # a converted folder was never trained here: said so, not 'written before'
    assert check_not_trained_on({}, examples, 'f', 'bert_12_768_12') == {}
    assert capsys.readouterr().err == (
        'note: the model folder records no trained paragraphs (converted from the GluonNLP 0.10 '
        'model bert_12_768_12, it has no training record): nothing is checked against its '
        'training data\n')
    record = {'trained_titles': [],
              'trained_paragraphs': [_sha16(' A paragraph  seen in\ttraining.')]}
    with pytest.raises(ValueError, match="shared_paragraphs=1, titles_to_fix=.'Warszawa'.,"):
        check_not_trained_on(record, examples * 2, 'f')


def test_a_converted_folder_is_told_by_its_gluonnlp_record(tmp_path):
    from jobs.squad.infer import converted_from
    assert converted_from(str(tmp_path)) is None                  # no config.json
    (tmp_path / 'config.json').write_text('{"hidden_size": 8}')
    assert converted_from(str(tmp_path)) is None                  # trained or pretrained
    (tmp_path / 'config.json').write_text('{"gluonnlp_model": "roberta_12_768_12"}')
    assert converted_from(str(tmp_path)) == 'roberta_12_768_12'
