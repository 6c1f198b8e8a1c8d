"""The ``bert_models_train`` rows at a tiny size (2 layers, width 16, V = 40): the 0.10 training
step holds the converted encoder's weights and learns a fixed batch, and the runs are the
script's command lines with the rows left out named; the script's --impl gluonnlp prints the
JSON line of the other implementations."""
import json
import sys

import mxnet as mx
import numpy as onp
import pytest

pytest.importorskip('gluonnlp')

from gluon_attention.core.matmul import bfloat16_problem  # noqa: E402
from gluon_attention.hardware import amx_in_use  # noqa: E402
from gluon_attention.models.encoder import BertEncoder  # noqa: E402
from jobs.bench import bert_models, bert_train, step_010  # noqa: E402
from jobs.bench.gluonnlp010 import legacy  # noqa: E402
from squad_tiny import script_module  # noqa: E402

TINY = dict(num_layers=2, units=16, hidden_size=24, num_heads=2, max_length=512)


def _batch(batch=3, length=12):
    rng = onp.random.RandomState(5)
    ids = rng.randint(5, 40, (batch, length))
    start = rng.randint(1, length - 4, batch)
    return ids, (start, start + rng.randint(0, 3, batch))


def test_the_010_step_holds_the_converted_weights_and_learns_a_fixed_batch(tmp_path):
    _, ours = bert_models.gluonnlp_bert(bert_models.MODELS[0], TINY, 40, tmp_path, seed=4)
    ids, spans = _batch()
    net = step_010._net(ours)         # pylint: disable=protected-access
    valid = onp.array([12, 7, 9])
    with legacy():
        theirs = net.bert(*[mx.nd.array(x) for x in (ids, onp.zeros_like(ids), valid)])
        theirs = theirs.asnumpy()
    encoder = BertEncoder.from_pretrained(ours, dropout=0.0, attention_dropout=0.0)
    mine = encoder(*[mx.np.array(x, dtype='int32') for x in (ids, onp.zeros_like(ids),
                                                               valid)]).asnumpy()
    for row, length in enumerate(valid):
        onp.testing.assert_allclose(mine[row, :length], theirs[row, :length], atol=1e-5, rtol=0)
    step = step_010.gluonnlp_step(ours, ids, spans, lr=1e-2)
    losses = [step() for _ in range(8)]
    assert losses[0] > 0 and losses[-1] < 0.7 * losses[0]


def test_runs_are_the_step_script_at_base_shape_and_name_the_rows_left_out():
    runs, skipped = bert_train.train_runs('step.py', 'model', 2)
    names = ['ours'] + ['ours_bfloat16'] * (bfloat16_problem() is None) + ['gluonnlp_0.10']
    assert list(runs) == names
    assert runs['gluonnlp_0.10'][:4] == [sys.executable, 'step.py', '--impl', 'gluonnlp']
    for cmd in runs.values():
        assert cmd[4:8] == ['--shape', 'base', '--model-dir', 'model']
        assert cmd[cmd.index('--batch-size') + 1] == '16'
        assert cmd[cmd.index('--seq-length') + 1] == '128'
    assert skipped[-1].startswith('bert_models_train: no torch_transformers, '
                                  'torch_transformers_bfloat16 rows: no interpreter')
    runs, _ = bert_train.train_runs('step.py', 'model', 2, torch_python='peer')
    assert runs['torch_transformers'][:4] == ['peer', 'step.py', '--impl', 'torch']
    assert runs['torch_transformers_bfloat16'][-2:] == ['--matmul-dtype', 'bfloat16']


def test_the_step_script_runs_the_010_step_and_prints_shape_and_amx(tmp_path, capsys):
    # the script's token ids go up to 20000: a vocabulary that holds them
    _, ours = bert_models.gluonnlp_bert(bert_models.MODELS[0], TINY, 20001, tmp_path, seed=4)
    script = script_module('squad_step_speed')
    assert script.main(['--impl', 'gluonnlp', '--shape', 'base', '--model-dir', ours,
                        '--batch-size', '2', '--seq-length', '32', '--steps', '1', '--warmup',
                        '1', '--threads', '1']) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed['impl'] == 'gluonnlp' and printed['shape'] == 'base'
    assert printed['amx'] is amx_in_use() and printed['features_per_second'] > 0
