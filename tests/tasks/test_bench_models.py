"""The benchmark's whole-model rows (squad_step, qa_inference) at tiny sizes: their schema, their
throughput arithmetic, the exported model they time, and the table they print.

A random 1-layer encoder with the real tokenizer (tests/tasks/squad_tiny.py); the PyTorch peer
runs only where an interpreter with torch and transformers is found (``.venv-peer`` as
``make bench`` creates it, or this one), and is skipped otherwise.
"""
import importlib.util
import os
import sys

import mxnet as mx
import numpy as onp
import pytest

from gluon_attention.tasks.bench import models as bench_models, qa as bench_qa

from squad_tiny import ROOT, make_tiny_bert

KEYS = {'config', 'shape', 'mode', 'impl', 'median_s', 'gflops', 'ratio', 'peak_mb',
        'throughput', 'unit'}
TINY_QA = dict(max_questions=3, max_seq_length=64, batch_size=4)


@pytest.fixture(scope='module')
def tiny_bert(tmp_path_factory):
    return make_tiny_bert(tmp_path_factory.mktemp('tiny_bert'))


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


def test_qa_inference_rows_time_every_question_of_each_runtime(tiny_bert):
    rows = bench_qa.qa_inference_rows('unused', 1, None, rounds=1, warmup=0,
                                      model_dir=tiny_bert, **TINY_QA)
    impls = {r['impl'] for r in rows}
    has_onnx = importlib.util.find_spec('onnxruntime') is not None
    assert impls == ({'ours_exported', 'onnxruntime'} if has_onnx else {'ours_exported'})
    _check_rows(rows, 'qa_inference', 'infer', 'questions/s', 3)
    questions, batches = bench_qa.eval_batches(model_dir=tiny_bert, **TINY_QA)
    assert questions == 3 and all(r['shape'] == [4, 64] for r in rows)
    lengths = [b['input_ids'].shape[1] for b in batches]
    assert lengths == sorted(lengths) and all(t % 8 == 0 and t <= 64 for t in lengths)
    if has_onnx:
        assert rows[0]['ratio'].keys() == {'onnxruntime'}


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
    assert [r['impl'] for r in rows] == ['ours'] and rows[0]['ratio'] == {}
    assert rows[0]['shape'] == [2, 32]
    _check_rows(rows, 'squad_step', 'train', 'features/s', 2)


def test_model_table_prints_ratios_to_each_peer():
    rows = [dict(config='qa_inference', mode='infer', impl=impl, median_s=s, throughput=t,
                 unit='questions/s', ratio=r) for impl, s, t, r in (
                     ('ours_exported', 2.0, 313.0, {'torch_transformers': 1.5,
                                                    'onnxruntime': 0.9}),
                     ('torch_transformers', 3.0, 208.7, {}))]
    table = bench_models.model_table(rows + [dict(config='bert128')])
    assert table[-2] == ('| qa_inference | infer | ours_exported | 2.000 | 313.00 questions/s '
                         '| 1.50x | 0.90x |')
    assert table[-1].endswith('| - | - |') and len(table) == 5
    assert bench_models.model_table([dict(config='bert128')]) == []


def test_torch_peer_computes_our_outputs(tiny_bert, tmp_path):
    python = _peer_python()
    if python is None:
        pytest.skip('no interpreter with torch and transformers (make bench creates .venv-peer)')
    _, batches = bench_qa.eval_batches(model_dir=tiny_bert, **TINY_QA)
    inference, _ = bench_qa.export_random_qa(str(tmp_path / 'qa'), batches[-1], tiny_bert,
                                             onnx=False)
    weights = {'head/' + k: v for k, v in bench_qa.head_weights(inference).items()}
    path = bench_qa.save_batches(str(tmp_path / 'batches.npz'), batches, weights)
    peer = bench_qa._TorchQAPeer(python, str(ROOT / 'scripts' / 'bench_qa_torch_peer.py'),
                                 1, tiny_bert, path)
    try:
        peer.proc.stdin.write('{"batch": 0, "save": "%s"}\n' % (tmp_path / 'out.npz'))
        peer.proc.stdin.flush()
        assert peer._reply()['seconds'] > 0
    finally:
        peer.close()
    want = inference(*[mx.np.array(batches[0][k], dtype=batches[0][k].dtype)
                       for k in ('input_ids', 'token_types', 'valid_length', 'p_mask')])
    with onp.load(tmp_path / 'out.npz') as got:
        for j, w in enumerate(want):
            onp.testing.assert_allclose(got['arr_%d' % j], w.asnumpy(), rtol=1e-4, atol=1e-4)


def _benchmark_script():
    spec = importlib.util.spec_from_file_location('benchmark', ROOT / 'scripts' / 'benchmark.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_make_bench_runs_the_model_rows_by_default_and_configs_skips_them():
    script = _benchmark_script()
    assert {'squad_step', 'qa_inference'} <= set(script.parse_args([]).configs)
    assert script.parse_args(['--configs', 'bert128,decode']).configs == ['bert128', 'decode']
    row = dict(config='squad_step', shape=[16, 128], mode='train', impl='ours', median_s=1.6,
               gflops=None, ratio={'torch_transformers': 1.25}, peak_mb=None,
               throughput=10.0, unit='features/s')
    info = dict(threads=2, OMP_NUM_THREADS='2', cpu_count=2, mxnet='1.9.1', numpy='1.23.5',
                gluonnlp=None, torch='2.13.0', python='3.11', commit='abc', fused_isa='avx2',
                cpu_features='avx2 fma')
    table = script.markdown([row], info, 100.0)
    assert 'Fused kernel: avx2 path (CPU instruction sets: avx2 fma)' in table
    assert '| squad_step | train | ours | 1.600 | 10.00 features/s | 1.25x | - |' in table


@pytest.mark.parametrize('argv', [['--configs', ''], ['--configs', ' , '],
                                  ['--configs', 'squad_step,bogus'], ['--model-rounds', '0']])
def test_benchmark_refuses_no_config_an_unknown_one_and_zero_rounds(argv, capsys):
    with pytest.raises(SystemExit):
        _benchmark_script().parse_args(argv)
    assert 'configs must be one or more of' in capsys.readouterr().err


def test_benchmark_configs_may_have_spaces_around_the_names():
    configs = _benchmark_script().parse_args(['--configs', ' squad_step , qa_inference']).configs
    assert configs == ['squad_step', 'qa_inference']
