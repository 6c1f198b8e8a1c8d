"""The training log of the shared loop (jobs.engine.train_log): the SQuAD job's logged loss
against a float64 recomputation from the checkpointed parameters, and what a resumed run keeps
of the rows of the run it resumes."""
import json

import mxnet as mx
import numpy as onp
import pytest

from gluon_attention.data import squad
from jobs.engine.train_log import (TRAIN_LOG, TrainLog, default_log_every,
                                                    read_train_log)
from jobs.engine.loop import StepResult
from jobs.squad.config import TrainConfig
from jobs.squad.data import INPUT_NAMES, load_training_features
from jobs.squad.loop import schedule, train
from jobs.squad.model import build_model
from squad_tiny import make_tiny_bert, make_train_file


def _oracle_parts(start, end, answerable, arrays, weight):
    """float64 span and answerable terms of the SQuAD loss (mean over the features)."""
    rows = onp.arange(len(start))
    start, end, answerable = (onp.asarray(x.asnumpy(), 'float64') for x in (start, end, answerable))
    span = -0.5 * onp.mean(start[rows, arrays['start_position']]
                           + end[rows, arrays['end_position']])
    null = -weight * onp.mean(arrays['answerable_loss_weight']
                              * answerable[rows, arrays['is_impossible']])
    return span, null


def test_logged_squad_loss_equals_the_loss_recomputed_from_the_checkpoint(tmp_path, capsys):
    model_dir = make_tiny_bert(tmp_path / 'bert')
    config = TrainConfig(model_dir=model_dir, train_file=make_train_file(tmp_path / 'train.json'),
                         extra_train_file='', exclude_titles='', threshold_titles='Huguenot',
                         max_seq_length=64, doc_stride=24, max_query_length=16, max_steps=3,
                         batch_size=5, dropout=0.0, classifier_dropout=0.0, progress=False,
                         lr=1e-3, max_train_features=24, checkpoint_every=1, keep_checkpoints=0,
                         log_every=2, answerable_weight=2.5, output_dir=str(tmp_path / 'run'))
    features = load_training_features(config, squad.load_tokenizer(model_dir))[0]
    mx.random.seed(3)
    model = build_model(config.model_dir, config, [mx.cpu()])
    train(model, features, config, [mx.cpu()])
    rows = read_train_log(tmp_path / 'run' / TRAIN_LOG)
    assert [row['step'] for row in rows] == [2, 3]          # every 2 steps and the last
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith('step ')]
    assert [line.split(':')[0] for line in lines] == ['step 2/3', 'step 3/3']
    assert 'loss {:.4f} (span {:.4f}, answerable {:.4f})'.format(
        rows[1]['loss'], rows[1]['span'], rows[1]['answerable']) in lines[1]
    # step 3 ran batch 2 of the schedule from the parameters of the checkpoint of step 2
    index = json.loads((tmp_path / 'run' / 'checkpoints' / 'checkpoints.json').read_text())
    entry = next(e for e in index if e['step'] == 2)
    model.load_parameters(str(tmp_path / 'run' / 'checkpoints' / entry['files']['params']['file']),
                          ctx=mx.cpu())
    arrays = squad.batchify([features[i] for i in schedule(features, config)[2]], round_to=8)
    outputs = model(*[mx.np.array(arrays[k], dtype=arrays[k].dtype)
                      for k in INPUT_NAMES + ('start_position',)])
    span, null = _oracle_parts(*outputs, arrays, config.answerable_weight)
    assert rows[1]['span'] == pytest.approx(span, rel=1e-5)
    assert rows[1]['answerable'] == pytest.approx(null, rel=1e-5)
    assert rows[1]['loss'] == pytest.approx(span + null, rel=1e-5)
    assert rows[1]['lr'] == pytest.approx(1e-3 * 1 / 2)     # linear decay: 1 of 2 steps left
    assert rows[1]['features_per_second'] > 0 and rows[1]['seconds_left'] == 0


def _result(step, loss, examples=4):
    return StepResult(step, loss, 0.1, 1.0, examples, loss * examples)


def test_resumed_log_keeps_the_rows_up_to_its_checkpoint_and_averages_since_the_last_row(
        tmp_path, capsys):
    log = TrainLog(str(tmp_path), every=2, unit='pairs')
    log.open(0, 6, chief=True)
    for step, loss in enumerate([1.0, 3.0, 5.0, 7.0, 9.0]):   # killed after step 5
        log.record(_result(step, loss), step + 1.0, 0.5, 8)
    with open(tmp_path / TRAIN_LOG, 'a', encoding='utf-8') as handle:
        handle.write('{"step": 6, "lo')                        # a row cut short by the kill
    assert [r['loss'] for r in read_train_log(tmp_path / TRAIN_LOG)] == [2.0, 6.0]
    assert read_train_log(tmp_path / TRAIN_LOG)[0]['pairs_per_second'] == 16.0
    resumed = TrainLog(str(tmp_path), every=2, unit='pairs')
    resumed.open(3, 6, chief=True)                             # its checkpoint: step 3
    for step, loss in [(3, 20.0), (4, 30.0), (5, 40.0)]:
        resumed.record(_result(step, loss), step + 1.0, 0.5, 8)
    rows = read_train_log(tmp_path / TRAIN_LOG)
    assert [(r['step'], r['loss']) for r in rows] == [(2, 2.0), (4, 20.0), (6, 35.0)]
    assert 'step 6/6: loss 35.0000, lr 1.00e-01, 16.0 pairs/s' in capsys.readouterr().out
    worker = TrainLog(str(tmp_path / 'worker'), every=1)
    worker.open(0, 2, chief=False)
    worker.record(_result(0, 1.0), 1.0, 0.5, 8)
    assert not (tmp_path / 'worker').exists()


def test_default_interval_gives_about_twenty_rows():
    assert [default_log_every(n) for n in (1, 3, 20, 21, 520, 1000)] == [1, 1, 1, 2, 26, 50]
    assert default_log_every(520, 7) == 7
    with pytest.raises(ValueError, match=r'log every must be an integer >= 0.*Received: every=-1'):
        TrainLog(every=-1)
