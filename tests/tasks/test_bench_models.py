"""The benchmark's whole-model rows (squad_step, qa_inference) at tiny sizes: their schema, their
throughput arithmetic, the exported model they time, the answers they keep, and the table they
print.

A random 1-layer encoder with the real tokenizer (tests/tasks/squad_tiny.py), also saved as a
fine-tuned model folder (random heads, a null threshold); the PyTorch peer runs only where an
interpreter with torch and transformers is found (``.venv-peer`` as ``make bench`` creates it,
or this one), and is skipped otherwise (the qa_inference rows then check the line saying so).
"""
import contextlib
import functools
import json
import os
import shutil
import sys

import mxnet as mx
import numpy as onp
import pytest

from gluon_attention.core.matmul import bfloat16_problem
from gluon_attention.data import squad
from gluon_attention.models.qa import QAInference
from jobs.bench import models as bench_models, qa as bench_qa
from gluon_attention.pipelines import load_qa_folder, load_qa_model
from gluon_attention.pipelines.features import run_batches

from squad_tiny import ROOT, make_tiny_bert, make_tiny_qa_folder, script_module

KEYS = {'config', 'shape', 'mode', 'impl', 'median_s', 'gflops', 'ratio', 'peak_mb',
        'throughput', 'unit', 'answers_kept', 'f1'}
TINY_QA = dict(max_questions=3, max_seq_length=64, batch_size=4)
PEER_SCRIPT = str(ROOT / 'scripts' / 'bench_qa_torch_peer.py')
ONNX_ROWS = {'onnxruntime', 'onnxruntime_ours_optimized', 'ours_int8'}
PEER_ROWS = {'torch_transformers', 'torch_transformers_bfloat16', 'onnxruntime_hf_optimized',
             'onnxruntime_hf_int8'}


@pytest.fixture(scope='module')
def tiny_bert(tmp_path_factory):
    return make_tiny_bert(tmp_path_factory.mktemp('tiny_bert'))


@functools.lru_cache(maxsize=None)
def _peer_python():
    for python in (str(ROOT / '.venv-peer' / 'bin' / 'python'), sys.executable):
        if os.path.exists(python) and bench_models.has_transformers(python):
            return python
    return None


def _check_rows(rows, config, mode, unit, amount):
    for row in rows:
        assert set(row) == KEYS and row['config'] == config and row['mode'] == mode
        assert row['gflops'] is None and row['peak_mb'] is None and row['unit'] == unit
        assert row['median_s'] > 0
        assert row['throughput'] == pytest.approx(amount / row['median_s'])
        assert row['impl'] not in row['ratio']
        medians = {r['impl']: r['median_s'] for r in rows}
        for peer, ratio in row['ratio'].items():
            assert ratio == pytest.approx(medians[peer] / row['median_s'])


def _printed(capsys):
    return [line for line in capsys.readouterr().out.splitlines()
            if line.startswith('qa_inference:')]


def test_qa_inference_rows_time_every_question_and_say_which_rows_are_left_out(
        tiny_bert, monkeypatch, capsys):
    monkeypatch.setattr(bench_qa, 'ONNX_MODULES', ('onnxruntime', 'ga_no_such_module'))
    rows = bench_qa.qa_inference_rows('unused', 1, None, rounds=1, warmup=0,
                                      model_dir=tiny_bert, **TINY_QA)
    bfloat16 = [bench_qa.BFLOAT16_ROW] if bfloat16_problem() is None else []
    assert [r['impl'] for r in rows] == ['ours_exported'] + bfloat16
    assert rows[0]['ratio'] == {} and rows[0]['answers_kept'] == 1.0
    assert all(r['f1'] is None for r in rows)                           # random heads: no F1
    assert all(0 <= r['answers_kept'] <= 1 for r in rows)
    _check_rows(rows, 'qa_inference', 'infer', 'questions/s', 3)
    questions, batches = bench_qa.eval_batches(model_dir=tiny_bert, **TINY_QA)
    assert questions == 3 and all(r['shape'] == [4, 64] for r in rows)
    lengths = [b['input_ids'].shape[1] for b in batches]
    assert lengths == sorted(lengths) and all(t % 8 == 0 and t <= 64 for t in lengths)
    model, *bfloat16_line, onnx, peer = _printed(capsys)
    assert len(bfloat16_line) == (not bfloat16)
    assert 'random heads' in model and 'no F1' in model
    assert onnx.startswith('qa_inference: no onnxruntime, onnxruntime_ours_optimized, ours_int8, '
                           'onnxruntime_hf_optimized, onnxruntime_hf_int8 rows: ')
    assert 'ga_no_such_module' in onnx
    assert peer.startswith('qa_inference: no torch_transformers, torch_transformers_bfloat16 '
                           'rows: no interpreter with torch')


def _rows_and_printed(folder, torch_python, tmp_path):
    capture = tmp_path / 'printed.txt'
    with open(capture, 'w') as out, contextlib.redirect_stdout(out):
        rows = bench_qa.qa_inference_rows(PEER_SCRIPT, 1, torch_python, rounds=1, warmup=0,
                                          model_dir=folder, max_questions=3, batch_size=4)
    return {r['impl']: r for r in rows}, capture.read_text().splitlines()


@pytest.fixture(scope='module')
def tuned_rows(tiny_bert, tmp_path_factory):
    """qa_inference rows (by name) of the tiny fine-tuned folder without the peer, what they
    printed, and the folder."""
    pytest.importorskip('onnxruntime')
    folder = make_tiny_qa_folder(tmp_path_factory.mktemp('tuned') / 'model', tiny_bert)
    return _rows_and_printed(folder, None, tmp_path_factory.mktemp('printed')) + (folder,)


def _check_quality(byname, names):
    for name in names:
        kept = byname[name]['answers_kept']
        assert kept * 3 == pytest.approx(round(kept * 3)) and 0 <= kept <= 1
        assert 0 <= byname[name]['f1'] <= 100
        assert name == 'onnxruntime' or 'onnxruntime' in byname[name]['ratio']


def test_qa_inference_rows_of_a_fine_tuned_folder_give_answers_kept_and_f1(tuned_rows):
    byname, printed, folder = tuned_rows
    bfloat16 = {bench_qa.BFLOAT16_ROW} if bfloat16_problem() is None else set()
    assert set(byname) == {'ours_exported'} | ONNX_ROWS | bfloat16
    _check_rows(list(byname.values()), 'qa_inference', 'infer', 'questions/s', 3)
    assert all(r['shape'] == [4, 64] for r in byname.values())   # the folder's eval length
    # the reference: the job's own evaluation path on the folder (threshold 0.5)
    found = bench_qa.eval_set(3, 4, 64, 16, folder)
    inference = QAInference(load_qa_model(load_qa_folder(folder), [mx.cpu()]), 5, 5)
    outputs = run_batches(inference, found['features'], 4, mx.cpu())
    final = squad.decode_predictions(found['examples'], found['features'], outputs, 20, 30,
                                     0.5)[1]
    want_f1 = squad.squad_evaluate(found['examples'], final)['f1']
    assert byname['ours_exported']['answers_kept'] == 1.0
    assert byname['ours_exported']['f1'] == pytest.approx(want_f1)
    assert byname['onnxruntime']['answers_kept'] == 1.0      # float32, equal within 1e-4
    _check_quality(byname, ONNX_ROWS | bfloat16)
    assert printed[0].startswith('qa_inference: the fine-tuned model ') and 'F1' in printed[0]
    assert printed[1 + (not bfloat16):] == [
        'qa_inference: no torch_transformers, torch_transformers_bfloat16, '
        'onnxruntime_hf_optimized, onnxruntime_hf_int8 rows: no interpreter with torch and '
        'transformers (make bench installs .venv-peer; benchmark.py --torch-python)']


@pytest.mark.slow          # the peer's torch.onnx.export alone takes about 10 s
def test_the_peer_writes_the_hf_rows_from_the_same_weights(tuned_rows, tmp_path):
    python = _peer_python()
    if python is None or not bench_models.imports(python, ('onnx',)):
        pytest.skip('no interpreter with torch, transformers and onnx (make bench creates '
                    '.venv-peer)')
    byname, printed = _rows_and_printed(tuned_rows[2], python, tmp_path)
    bfloat16 = {bench_qa.BFLOAT16_ROW} if bfloat16_problem() is None else set()
    assert set(byname) == {'ours_exported'} | ONNX_ROWS | PEER_ROWS | bfloat16
    assert len(printed) == 1 + (not bfloat16)
    _check_rows(list(byname.values()), 'qa_inference', 'infer', 'questions/s', 3)
    _check_quality(byname, ONNX_ROWS | PEER_ROWS - {'torch_transformers',
                                                    'torch_transformers_bfloat16'})
    assert byname['onnxruntime_hf_optimized']['answers_kept'] == 1.0   # float32, same model
    assert byname['torch_transformers']['answers_kept'] is None
    assert byname['torch_transformers_bfloat16']['answers_kept'] is None
    assert byname['ours_int8']['ratio'].keys() == set(bench_models.PEERS) - {'ours'}


def test_qa_inference_refuses_a_folder_trained_on_the_questions(tiny_bert, tuned_rows,
                                                                 tmp_path):
    folder = tmp_path / 'model'
    shutil.copytree(tuned_rows[2], folder)
    config = json.loads((folder / 'qa_config.json').read_text())
    config['trained_titles'] = ['Normans']
    (folder / 'qa_config.json').write_text(json.dumps(config))
    with pytest.raises(ValueError, match="no article and no paragraph the model was trained on.*"
                                         r"shared_titles=\['Normans'\]"):
        bench_qa.qa_inference_rows('unused', 1, None, model_dir=str(folder), **TINY_QA)


def test_answer_quality_counts_identical_texts_and_scores_the_official_f1():
    def example(qid, answers):
        return squad.SquadExample(qid, 't', 'q?', 'In 911 Normandy', answers, not answers)
    examples = [example('a', [('Normandy', 7)]), example('b', [('in 911', 0)]), example('c', [])]
    reference = {'a': 'Normandy', 'b': 'in 911', 'c': ''}
    answers = {'a': 'Normandy', 'b': 'in the year 911', 'c': ''}
    kept, f1 = bench_qa.answer_quality(examples, reference, answers)
    # b: tokens (in, year, 911) against (in, 911) once 'the' is dropped: P 2/3, R 1, F1 0.8
    assert kept == pytest.approx(2 / 3) and f1 == pytest.approx(100 * (1 + 0.8 + 1) / 3)
    assert bench_qa.answer_quality(examples, reference, reference, f1=False) == (1.0, None)


def test_exported_runner_gives_the_unexported_outputs(tiny_bert, tmp_path):
    _, batches = bench_qa.eval_batches(model_dir=tiny_bert, **TINY_QA)
    inference, paths = bench_qa.export_random_qa(str(tmp_path / 'qa'), batches[-1], tiny_bert,
                                                 onnx=False)
    assert paths['onnx'] is None and os.path.exists(paths['symbol'])
    run = bench_qa.ours_runner(str(tmp_path / 'qa'))
    for batch in batches:
        seconds, got = run(batch)
        want = inference(*[mx.np.array(batch[k], dtype=batch[k].dtype)
                           for k in ('input_ids', 'token_types', 'valid_length', 'p_mask')])
        assert seconds > 0 and len(got) == 5
        for w, g in zip(want, got):
            onp.testing.assert_allclose(g, w.asnumpy(), rtol=1e-5, atol=1e-5)


def test_squad_step_rows_report_features_per_second(tiny_bert):
    rows = bench_models.squad_step_rows(str(ROOT / 'scripts' / 'squad_step_speed.py'), 1,
                                        None, rounds=1, batch_size=2, seq_length=32, steps=1,
                                        warmup=1, model_dir=tiny_bert)
    bfloat16 = ['ours_bfloat16'] if bfloat16_problem() is None else []
    assert [r['impl'] for r in rows] == ['ours'] + bfloat16 and rows[0]['ratio'] == {}
    assert all(r['shape'] == [2, 32] for r in rows)
    _check_rows(rows, 'squad_step', 'train', 'features/s', 2)


def test_model_table_prints_ratios_to_each_peer_answers_kept_and_f1():
    rows = [dict(config=c, mode='infer', impl=impl, median_s=s, throughput=t,
                 unit='questions/s', ratio=r, answers_kept=k, f1=f)
            for c, impl, s, t, r, k, f in (
                ('qa_inference', 'ours_int8', 2.0, 313.0,
                 {'torch_transformers': 1.5, 'onnxruntime': 0.9, 'onnxruntime_hf_int8': 1.25,
                  'ours_exported': 1.75, 'torch_transformers_bfloat16': 0.8}, 0.875, 53.971),
                ('qa_inference', 'torch_transformers', 3.0, 208.7, {}, None, None),
                ('squad_step', 'ours_bfloat16', 1.0, 16.0, {'ours': 1.6}, None, None))]
    table = bench_models.model_table(rows + [dict(config='bert128')])
    assert table[1].endswith('| vs ours float32 | vs torch + transformers | vs torch bfloat16 '
                             'autocast | vs ONNX Runtime | vs HF fused (ONNX Runtime) | vs HF '
                             'INT8 (ONNX Runtime) | answers kept | F1 |')
    assert table[-3] == ('| qa_inference | infer | ours_int8 | 2.000 | 313.00 questions/s '
                         '| 1.75x | 1.50x | 0.80x | 0.90x | - | 1.25x | 87.5% | 53.97 |')
    assert table[-2].endswith('| - | - | - | - | - | - | - | - |') and len(table) == 6
    # our float32 row of squad_step ('ours') shares the column of qa_inference's
    assert table[-1].endswith('| ours_bfloat16 | 1.000 | 16.00 questions/s | 1.60x | - | - | '
                              '- | - | - | - | - |')
    assert all(line.count('|') == table[1].count('|') for line in table[1:])
    assert bench_models.model_table([dict(config='bert128')]) == []


def test_torch_peer_computes_our_outputs_in_float32_and_close_in_bfloat16(tiny_bert, tmp_path):
    python = _peer_python()
    if python is None:
        pytest.skip('no interpreter with torch and transformers (make bench creates .venv-peer)')
    _, batches = bench_qa.eval_batches(model_dir=tiny_bert, **TINY_QA)
    inference, _ = bench_qa.export_random_qa(str(tmp_path / 'qa'), batches[-1], tiny_bert,
                                             onnx=False)
    weights = {'head/' + k: v for k, v in bench_qa.head_weights(inference).items()}
    path = bench_qa.save_batches(str(tmp_path / 'batches.npz'), batches, weights)
    peer = bench_qa.torch_qa_peer(python, str(ROOT / 'scripts' / 'bench_qa_torch_peer.py'),
                                  1, tiny_bert, path)
    try:
        for autocast in (None, 'bfloat16'):
            reply = peer.ask({'batch': 0, 'autocast': autocast,
                              'save': str(tmp_path / ('out-%s.npz' % autocast))})
            assert reply['seconds'] > 0
    finally:
        peer.close()
    assert set(peer.ready) == {'ready', 'torch', 'amx'}
    want = inference(*[mx.np.array(batches[0][k], dtype=batches[0][k].dtype)
                       for k in ('input_ids', 'token_types', 'valid_length', 'p_mask')])
    with onp.load(tmp_path / 'out-None.npz') as got:
        for j, w in enumerate(want):
            onp.testing.assert_allclose(got['arr_%d' % j], w.asnumpy(), rtol=1e-4, atol=1e-4)
    with onp.load(tmp_path / 'out-bfloat16.npz') as got:
        # the start log-probabilities: float32 outputs of bfloat16 products (8 mantissa bits)
        assert got['arr_0'].dtype == onp.float32
        onp.testing.assert_allclose(got['arr_0'], want[0].asnumpy(), rtol=0.05, atol=0.05)


def test_make_bench_runs_the_model_rows_by_default_and_configs_skips_them():
    script = script_module('benchmark')
    assert {'squad_step', 'qa_inference'} <= set(script.parse_args([]).configs)
    assert script.parse_args(['--configs', 'bert128,decode']).configs == ['bert128', 'decode']
    row = dict(config='squad_step', shape=[16, 128], mode='train', impl='ours', median_s=1.6,
               gflops=None, ratio={'torch_transformers': 1.25}, peak_mb=None,
               throughput=10.0, unit='features/s')
    info = dict(threads=2, OMP_NUM_THREADS='2', cpu_count=2, mxnet='1.9.1', numpy='1.23.5',
                gluonnlp=None, torch='2.13.0', python='3.11', commit='abc', fused_isa='avx2',
                cpu_features='avx2 fma', amx=False, amx_reason='the CPU has no AMX')
    table = script.markdown([row], info, 100.0)
    assert 'Fused kernel: avx2 path (CPU instruction sets: avx2 fma)' in table
    assert 'AMX not used for the bfloat16 rows (the CPU has no AMX).' in table
    assert ('| squad_step | train | ours | 1.600 | 10.00 features/s | - | 1.25x | - | - | - | - '
            '| - | - |' in table)


@pytest.mark.parametrize('argv', [['--configs', ''], ['--configs', ' , '],
                                  ['--configs', 'squad_step,bogus'], ['--model-rounds', '0']])
def test_benchmark_refuses_no_config_an_unknown_one_and_zero_rounds(argv, capsys):
    with pytest.raises(SystemExit):
        script_module('benchmark').parse_args(argv)
    assert 'configs must be one or more of' in capsys.readouterr().err


def test_benchmark_configs_may_have_spaces_around_the_names():
    configs = script_module('benchmark').parse_args(['--configs', ' squad_step , qa_inference']).configs
    assert configs == ['squad_step', 'qa_inference']


def test_benchmark_refuses_a_qa_model_dir_without_a_model_before_timing(tmp_path, capsys,
                                                                       monkeypatch):
    monkeypatch.setenv('OMP_NUM_THREADS', '1')     # main sets it from --threads
    with pytest.raises(SystemExit, match='must be a pretrained BERT folder'):
        script_module('benchmark').main(['--threads', '1', '--configs', 'qa_inference',
                                  '--qa-model-dir', str(tmp_path)])
    assert script_module('benchmark').parse_args([]).qa_model_dir == ''
