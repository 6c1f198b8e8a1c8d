"""The SQuAD job's commands on a tiny random encoder: the saved model folder reloads in a fresh
process with identical predictions, predict works without answers, a rerun with other options is
refused, SQuAD 1.1 mode never predicts '', a folder without weights is a one-line error."""
import importlib.util
import json
import math
import os
import shutil

import numpy as onp
import pytest

from conftest import squad_file
from gluon_attention.data import squad
from gluon_attention.models.checkpoint import _bert_name_map, read_checkpoint
from jobs.squad.config import TrainConfig
from squad_tiny import (SCRIPT, TIMING_KEYS, make_tiny_bert, make_train_file, read_json,
                        run_script, tiny_args)

_spec = importlib.util.spec_from_file_location('run_squad_script', str(SCRIPT))
run_squad = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(run_squad)


@pytest.fixture(scope='module')
def tiny(tmp_path_factory):
    """A tiny encoder, a small training file and one finished train run (with export check)."""
    root = tmp_path_factory.mktemp('squad_tiny')
    model, train_file = make_tiny_bert(root / 'bert'), make_train_file(root / 'train.json')
    args = tiny_args(model, train_file)
    proc = run_script('train', '--output-dir', root / 'run', *args)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return {'root': root, 'args': args, 'run': root / 'run', 'stdout': proc.stdout}


def test_train_writes_config_model_folder_and_threshold_from_heldout_articles(tiny):
    run = tiny['run']
    config = read_json(run / 'run_config.json')
    assert config['threshold_titles'] == 'Huguenot' and config['max_steps'] == 3
    metrics = read_json(run / 'metrics.json')
    saved = read_json(run / 'model' / 'qa_config.json')
    assert metrics['null_threshold_source'] == saved['null_threshold_source'] == \
        'held-out articles Huguenot'
    assert metrics['null_threshold'] == saved['null_threshold']
    assert saved['heldout_total'] == len(squad.read_squad(
        os.path.join(tiny['root'], 'train.json'), titles=['Huguenot']))
    assert 0 <= metrics['null_odds_auc'] <= 1
    # '' exactly where the null score difference exceeds the threshold used
    predictions, null_odds = read_json(run / 'predictions.json'), read_json(run / 'null_odds.json')
    nbest = read_json(run / 'nbest_predictions.json')
    for qid, text in predictions.items():
        if null_odds[qid] > metrics['null_threshold']:
            assert text == ''
        else:
            assert text == (nbest[qid][0]['text'] if nbest[qid] else '')
    assert read_json(run / 'export' / 'check.json')['status'] == 'ok'


def test_train_without_progress_bars_logs_every_step_of_a_short_run_and_says_where_it_wrote(tiny):
    rows = [json.loads(line) for line in (tiny['run'] / 'train_log.jsonl').read_text().splitlines()]
    assert [row['step'] for row in rows] == [1, 2, 3]           # 3 steps: a row each
    assert {'loss', 'span', 'answerable', 'lr', 'grad_norm', 'features_per_second',
            'train_seconds', 'seconds_left'} <= set(rows[0])
    lines = [line for line in tiny['stdout'].splitlines() if line.startswith('step ')]
    assert [line.split(':')[0] for line in lines] == ['step 1/3', 'step 2/3', 'step 3/3']
    for row, line in zip(rows, lines):
        assert row['loss'] == pytest.approx(row['span'] + row['answerable'], rel=1e-5)
        assert 'loss {:.4f} (span {:.4f}, answerable {:.4f}), lr {:.2e}, '.format(
            row['loss'], row['span'], row['answerable'], row['lr']) in line
        assert 'features/s' in line and line.endswith(' left')
    assert tiny['stdout'].splitlines()[-1].startswith('model folder: {}; metrics: {}'.format(
        tiny['run'] / 'model', tiny['run'] / 'metrics.json'))


def test_saved_encoder_has_standard_bert_names_and_shapes(tiny):
    config, tensors, _ = read_checkpoint(tiny['run'] / 'model')
    assert set(tensors) == set(_bert_name_map(config['num_layers']))
    assert tensors['encoder.layer.0.attention.self.query.weight'].shape == (16, 16)
    assert tensors['embeddings.LayerNorm.weight'].shape == (16,)
    assert config['units'] == 16 and config['hidden_size'] == 32
    umask = os.umask(0)
    os.umask(umask)
    for name in ('model.safetensors', 'qa_head.safetensors', 'qa_config.json'):
        assert (tiny['run'] / 'model' / name).stat().st_mode & 0o777 == 0o666 & ~umask, name


def test_model_folder_reloads_in_fresh_process_with_identical_predictions(tiny, tmp_path):
    proc = run_script('evaluate', '--model-dir', tiny['run'] / 'model', '--output-dir', tmp_path,
                      '--max-eval-examples', '12', '--threads', '1', '--no-progress')
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name in ('predictions.json', 'null_odds.json', 'nbest_predictions.json'):
        assert read_json(tmp_path / 'evaluate' / name) == read_json(tiny['run'] / name), name
    before = read_json(tiny['run'] / 'metrics.json')
    after = read_json(tmp_path / 'evaluate' / 'metrics.json')
    assert after['matmul_dtype'] == 'float32'
    run_keys = TIMING_KEYS + ('model_dir', 'matmul_dtype', 'amx', 'amx_reason')  # evaluate's own
    assert {k: v for k, v in after.items() if k not in run_keys} == \
        {k: before[k] for k in after if k not in run_keys}


def test_predict_file_without_answers_and_one_question(tiny, tmp_path, capsys):
    raw = json.loads(squad_file('haystack-small').read_text(encoding='utf-8'))
    paragraph = raw['data'][0]['paragraphs'][0]
    bare = {'data': [{'paragraphs': [{'context': paragraph['context'], 'qas': [
        {'id': qa['id'], 'question': qa['question']} for qa in paragraph['qas']]}]}]}
    (tmp_path / 'questions.json').write_text(json.dumps(bare))
    common = ['--model-dir', str(tiny['run'] / 'model'), '--threads', '1', '--no-progress']
    assert run_squad.main(['predict', '--predict-file', str(tmp_path / 'questions.json'),
                           '--output-dir', str(tmp_path / 'out')] + common) == 0
    predictions, evaluated = read_json(tmp_path / 'out' / 'predict' / 'predictions.json'), \
        read_json(tiny['run'] / 'predictions.json')
    assert set(predictions) == {qa['id'] for qa in paragraph['qas']}
    assert {k: evaluated[k] for k in predictions} == predictions      # the same 9 questions
    assert set(read_json(tmp_path / 'out' / 'predict' / 'null_odds.json')) == set(predictions)
    question, context = paragraph['qas'][0]['question'], paragraph['context']
    lines = {}
    for threshold in ('1000000', '-1000000'):
        capsys.readouterr()
        assert run_squad.main(['predict', '--question', question, '--context', context,
                               '--null-score-diff-threshold', threshold] + common) == 0
        lines[threshold] = capsys.readouterr().out.strip().splitlines()[-1]
    assert lines['-1000000'].startswith('no answer (best span ')
    assert lines['-1000000'].endswith('> threshold -1000000.000)')
    answer = lines['1000000']
    assert answer.startswith("answer: '"), answer
    start, end = (int(x) for x in answer.split('(characters ')[1].split(' ')[0].split('-'))
    assert 0 <= start < end <= len(context)
    assert answer.startswith('answer: {!r} (characters {}-{}'.format(context[start:end], start,
                                                                    end))


def test_evaluate_and_predict_with_default_folders_leave_the_train_run_files_unchanged(
        tiny, tmp_path, monkeypatch):
    run = tmp_path / 'runs' / 'squad'                  # the default --output-dir
    shutil.copytree(tiny['run'], run, ignore=shutil.ignore_patterns('checkpoints', 'export'))
    files = ('metrics.json', 'predictions.json', 'null_odds.json', 'nbest_predictions.json',
             'run_config.json')
    before = {name: (run / name).read_bytes() for name in files}
    (tmp_path / 'questions.json').write_text(json.dumps({'data': [{'paragraphs': [{
        'context': 'The Normans came from Normandy.',
        'qas': [{'id': 'q1', 'question': 'Where did the Normans come from?'}]}]}]}))
    monkeypatch.chdir(tmp_path)
    common = ['--threads', '1', '--no-progress']
    assert run_squad.main(['evaluate', '--max-eval-examples', '4'] + common) == 0
    assert run_squad.main(['predict', '--predict-file', 'questions.json'] + common) == 0
    assert {name: (run / name).read_bytes() for name in files} == before
    assert read_json(run / 'evaluate' / 'metrics.json')['total'] == 4
    assert list(read_json(run / 'predict' / 'predictions.json')) == ['q1']


def test_eval_or_predict_file_without_questions_is_a_one_line_error(tiny, tmp_path, capsys):
    empty = tmp_path / 'empty.json'
    empty.write_text('{"data": []}')
    common = ['--model-dir', str(tiny['run'] / 'model'), '--output-dir', str(tmp_path / 'out'),
              '--threads', '1', '--no-progress']
    for command, flag in (('evaluate', '--eval-file'), ('predict', '--predict-file')):
        with pytest.raises(SystemExit) as exit_info:
            run_squad.main([command, flag, str(empty)] + common)
        error = capsys.readouterr().err.strip().splitlines()
        assert exit_info.value.code == 2 and len(error) == 1, error
        assert error[0] == ('run_squad.py: error: {} must hold at least one question. Received: '
                            '{}={!r}'.format(flag, flag[2:].replace('-', '_'), str(empty)))
    assert not (tmp_path / 'out').exists()


def test_rerun_with_other_options_is_refused_and_checkpoints_kept(tiny, capsys):
    folder = tiny['run'] / 'checkpoints'
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    with pytest.raises(SystemExit) as exit_info:
        run_squad.main(['train', '--output-dir', str(tiny['run'])] + tiny['args']
                       + ['--lr', '0.001', '--grad-accum-steps', '2'])
    message = capsys.readouterr().err.strip().splitlines()[-1]
    assert exit_info.value.code == 2 and message.startswith('run_squad.py: error: ')
    assert '--lr: 0.0002 there, 0.001 now' in message
    assert ('features per step (--batch-size x --grad-accum-steps x workers): 4 there, 8 now'
            in message and '--seed' not in message)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before


def test_damaged_newest_checkpoint_is_reported_once_and_the_older_one_resumed(
        tiny, tmp_path, capsys):
    run = tmp_path / 'run'
    shutil.copytree(tiny['run'], run)
    newest = read_json(run / 'checkpoints' / 'checkpoints.json')[-1]
    (run / 'checkpoints' / newest['files']['params']['file']).write_bytes(b'damaged')
    capsys.readouterr()
    assert run_squad.main(['train', '--output-dir', str(run), '--skip-export']
                          + tiny['args']) == 0
    out, err = capsys.readouterr()
    assert err.count('checkpoint of step {} in'.format(newest['step'])) == 1, err
    assert 'fails its sha256 check' in err and 'resuming from step 2 of 3' in out


def test_version_1_reports_squad_1_keys_and_never_predicts_empty(tiny, tmp_path):
    assert run_squad.main(['train', '--output-dir', str(tmp_path), '--version-2-with-negative',
                           '0', '--skip-export'] + tiny['args']) == 0
    metrics = read_json(tmp_path / 'metrics.json')
    assert {'exact', 'f1', 'total'} <= set(metrics)
    assert not {k for k in metrics if 'HasAns' in k or 'NoAns' in k or 'best' in k
                or 'null' in k}
    gold = [e for e in squad.read_squad(str(squad_file('haystack-small')))
            if e.answers][:12]
    assert metrics['total'] == 12
    predictions, nbest = read_json(tmp_path / 'predictions.json'), read_json(
        tmp_path / 'nbest_predictions.json')
    assert set(predictions) == {e.qas_id for e in gold}
    assert all(text == nbest[qid][0]['text'] for qid, text in predictions.items() if nbest[qid])
    assert read_json(tmp_path / 'model' / 'qa_config.json')['null_threshold'] is None


def test_model_dir_without_weights_is_a_one_line_error_before_reading_data(tmp_path, capsys):
    (tmp_path / 'config.json').write_text('{}')
    data = {'train': ['--train-file', 'absent.json'], 'evaluate': ['--eval-file', 'absent.json'],
            'predict': ['--predict-file', 'absent.json']}
    for command, data_file in data.items():
        with pytest.raises(SystemExit) as exit_info:
            run_squad.main([command, '--model-dir', str(tmp_path), '--threads', '1'] + data_file)
        assert exit_info.value.code == 2
        error = capsys.readouterr().err.strip().splitlines()
        assert error[-1].startswith('run_squad.py {}: error: --model-dir must be'.format(command))
        assert 'model.safetensors' in error[-1].split('missing: ')[1]
        assert 'absent.json' not in error[-1] and error[0].startswith('usage: ')


def test_max_steps_wins_over_epochs():
    from types import SimpleNamespace
    from jobs.squad.loop import schedule
    features = [SimpleNamespace(valid_length=10 + i % 7) for i in range(50)]
    assert len(schedule(features, TrainConfig(max_steps=7, epochs=3.0))) == 7
    by_epochs = schedule(features, TrainConfig(max_steps=0, epochs=2.0, batch_size=4,
                                               grad_accum_steps=3))
    assert len(by_epochs) == math.ceil(2 * 50 / 12)
    assert sorted(len(step) for step in by_epochs[:5]) == [2, 12, 12, 12, 12]   # one epoch
    assert sorted(onp.concatenate(by_epochs[:5]).tolist()) == list(range(50))


def _example(name):
    spec = importlib.util.spec_from_file_location(
        'example_' + name, str(SCRIPT.parents[1] / 'docs' / 'examples' / (name + '.py')))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize('question', [None, 'Who gave their name to Normandy?'])
def test_docs_examples_answer_from_raw_text_as_qapredictor_does(tiny, question, capsys):
    """docs/examples: the exported graph in MXNet and the ONNX model in plain ONNX Runtime, on
    inputs built from the tokenizer, decode to QAPredictor's answer, best span and scores."""
    argv = [str(tiny['run'])] + (['--question', question] if question else [])
    raw, answer = _example('qa_mxnet').main(argv)
    assert raw[:2] == (answer.text, answer.best_span)
    assert raw[2] == pytest.approx(answer.score, abs=1e-4)
    assert raw[3] == pytest.approx(answer.null_score_diff, abs=1e-4)
    pytest.importorskip('onnxruntime')
    onnx = _example('qa_onnx').main(argv)
    assert onnx[:2] == raw[:2] and onnx[2:] == pytest.approx(raw[2:], abs=1e-4)
    assert 'ONNX Runtime: ' in capsys.readouterr().out
