"""The benchmark's ``bert_models`` rows at a tiny size (2 layers, width 16, V = 40): the 0.10
model, our converted encoder and oneDNN's fused 0.10 graph compute the same hidden states, the
rows carry the whole-model keys with ratios against the fused 0.10 row, and the table prints them.
"""
import importlib.util

import numpy as onp
import pytest

pytest.importorskip('gluonnlp')

from gluon_attention.core.matmul import bfloat16_problem  # noqa: E402
from jobs.bench import bert_models  # noqa: E402
from squad_tiny import ROOT, script_module  # noqa: E402

TINY = dict(num_layers=2, units=16, hidden_size=24, num_heads=2, max_length=512)
KEYS = {'config', 'model', 'shape', 'mode', 'impl', 'median_s', 'gflops', 'ratio', 'peak_mb',
        'throughput', 'unit', 'isa', 'answers_kept', 'f1'}
BASE = bert_models.MODELS[0]


def test_every_row_computes_the_hidden_states_of_0_10(tmp_path):
    paths = bert_models.gluonnlp_bert(BASE, TINY, 40, tmp_path, seed=3)
    made = bert_models.runners(BASE, TINY, 40, paths, 128, bfloat16_problem() is None)
    assert {'ours', bert_models.REFERENCE, bert_models.INT8, 'gluonnlp_0.10'} <= set(made)
    outputs = {name: run().asnumpy() for name, run in made.items()}
    valid = bert_models.bert_inputs(128, 40)[2]
    assert sorted(set(valid)) == [112, 128]
    for name, out in outputs.items():
        assert out.shape == (8, 128, 16)
        # bfloat16 products: about 3 significant digits on activations of unit scale; INT8:
        # 8-bit activations and weights through 2 layers
        tolerance = {'ours_bfloat16': 5e-2, bert_models.INT8: 0.3}.get(name, 1e-5)
        for i, n in enumerate(valid):
            onp.testing.assert_allclose(out[i, :n], outputs['gluonnlp_0.10'][i, :n],
                                        atol=tolerance, rtol=0, err_msg=name)


def test_rows_give_ratios_against_the_fused_row_and_the_table_prints_them(capsys):
    rows = bert_models.bert_model_rows(rounds=1, models=(BASE,), lengths=(128, 32),
                                       sizes={BASE: TINY}, vocab_size=40)
    names = [(r['shape'][1], r['impl']) for r in rows]
    plain = [n for n in names if n[1] == 'gluonnlp_0.10']
    assert plain == [(128, 'gluonnlp_0.10')]            # base T=128 only
    for row in rows:
        assert set(row) == KEYS and row['config'] == 'bert_models' and row['mode'] == 'infer'
        assert row['model'] == BASE and row['shape'][0] == 8 and row['median_s'] > 0
        assert row['throughput'] == pytest.approx(8 / row['median_s'])
        reference = [r for r in rows if r['shape'] == row['shape']
                     and r['impl'] == bert_models.REFERENCE][0]
        peers = {r['impl']: r['median_s'] for r in rows if r['shape'] == row['shape']
                 and r['impl'] in bert_models.RATIO_PEERS and r['impl'] != row['impl']}
        assert row['ratio'] == {p: pytest.approx(s / row['median_s']) for p, s in peers.items()}
        if row is not reference:
            assert bert_models.REFERENCE in row['ratio']
        assert row['isa'] == bert_models.isa_of(row['impl'])
    table = bert_models.bert_models_table(rows + [dict(config='bert128')])
    assert len(table) == 3 + len(rows)
    assert all(line.count('|') == 13 for line in table[1:])
    assert table[3].startswith('| bert_12_768_12 | infer | 8 x 128 | ours | ')
    assert bert_models.bert_models_table([dict(config='bert128')]) == []
    assert 'bert_models bert_12_768_12 T=32 done' in capsys.readouterr().out


def test_isa_names_the_vector_level_and_amx_for_bfloat16_rows(monkeypatch):
    monkeypatch.setattr(bert_models, 'cpu_flags', lambda: ('avx2', 'avx512f', 'amx_tile'))
    monkeypatch.setattr(bert_models, 'amx_in_use', lambda: True)
    assert bert_models.isa_of('ours') == 'avx512'
    assert bert_models.isa_of('ours_bfloat16') == 'avx512+amx'
    monkeypatch.setattr(bert_models, 'amx_in_use', lambda: False)
    monkeypatch.setattr(bert_models, 'cpu_flags', lambda: ('avx512f', 'avx512_bf16'))
    assert bert_models.isa_of('ours_bfloat16') == 'avx512+avx512_bf16 (no amx)'
    monkeypatch.setattr(bert_models, 'cpu_flags', lambda: ('avx2',))
    assert bert_models.isa_of('ours_bfloat16') == 'avx2 (no bfloat16 instructions)'
    assert bert_models.isa_of(bert_models.REFERENCE) == 'avx2'
    assert bert_models.isa_of(bert_models.INT8) == 'avx2'
    monkeypatch.setattr(bert_models, 'cpu_flags', lambda: ('avx512f', 'avx512_vnni'))
    monkeypatch.setattr(bert_models, 'amx_in_use', lambda: True)
    assert bert_models.isa_of(bert_models.INT8) == 'avx512+vnni (amx allowed)'
    assert bert_models.isa_of('onnxruntime_hf_int8') == 'avx512+vnni'       # not MXNet's AMX
    assert bert_models.isa_of('onnxruntime_hf_optimized') == 'avx512'
    assert bert_models.isa_of('torch_transformers_bfloat16') == (
        'avx512 (no bfloat16 instructions)')
    # MXNet's AMX refused (hardware decision), PyTorch's oneDNN uses AMX where the CPU has it
    monkeypatch.setattr(bert_models, 'cpu_flags', lambda: ('avx512f', 'avx512_bf16', 'amx_bf16'))
    monkeypatch.setattr(bert_models, 'amx_in_use', lambda: False)
    assert bert_models.isa_of('torch_transformers_bfloat16') == 'avx512+amx'
    assert bert_models.isa_of('ours_bfloat16') == 'avx512+avx512_bf16 (no amx)'


def test_benchmark_runs_bert_models_by_default_and_prints_their_table():
    spec = importlib.util.spec_from_file_location('benchmark', ROOT / 'scripts' / 'benchmark.py')
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert 'bert_models' in script.parse_args([]).configs
    assert script.parse_args(['--configs', 'bert_models']).configs == ['bert_models']
    row = dict(config='bert_models', model=BASE, shape=[8, 384], mode='infer', impl='ours',
               median_s=2.0, gflops=None, peak_mb=None, throughput=4.0, unit='features/s',
               isa='avx512', ratio={bert_models.REFERENCE: 1.5}, answers_kept=None, f1=None)
    info = dict(threads=2, OMP_NUM_THREADS='2', cpu_count=2, mxnet='1.9.1', numpy='1.23.5',
                gluonnlp='0.10.0', torch=None, python='3.11', commit='abc', fused_isa='avx512',
                cpu_features='avx512f', amx=False, amx_reason='the CPU has no AMX')
    table = script.markdown([row], info, 100.0)
    assert ('| bert_12_768_12 | infer | 8 x 384 | ours | avx512 | 2.000 | 4.00 features/s | '
            '1.50x | - | - | - | - |') in table
    assert '| bert_models |' not in table        # not in the attention table


def test_the_whole_model_table_and_the_bert_models_table_print_side_by_side():
    script = script_module('benchmark')
    step = dict(config='squad_step', shape=[16, 128], mode='train', impl='ours_bfloat16',
                median_s=0.5, gflops=None, peak_mb=None, throughput=32.0, unit='features/s',
                ratio={'ours': 2.5, 'torch_transformers_bfloat16': 1.25}, answers_kept=None,
                f1=None)
    train = dict(step, config='bert_models_train', model=BASE, median_s=4.0, throughput=4.0,
                 isa='avx512+amx', ratio={bert_models.PLAIN: 2.0})
    info = dict(threads=2, OMP_NUM_THREADS='2', cpu_count=2, mxnet='1.9.1', numpy='1.23.5',
                gluonnlp='0.10.0', torch='2.13.0', torch_amx=True, python='3.11', commit='abc',
                fused_isa='avx512', cpu_features='avx512f amx_bf16', amx=True,
                amx_reason='granted')
    table = script.markdown([step, train], info, 100.0)
    whole = ('| squad_step | train | ours_bfloat16 | 0.500 | 32.00 features/s | 2.50x | - | '
             '1.25x | - | - | - | - | - |')
    goal = 'goal: squad_step ours_bfloat16 vs ours: 2.50x (>= 2.0x): met'
    bert = ('| bert_12_768_12 | train | 16 x 128 | ours_bfloat16 | avx512+amx | 4.000 | '
            '4.00 features/s | 2.00x | - | - | - | - |')
    assert table.index(whole) < table.index(goal) < table.index(bert)
    assert 'PyTorch 2.13.0 may use AMX tiles (granted)' in table


def test_one_at_a_time_builds_each_runner_after_the_previous_one_is_timed():
    events = []

    def factory(name):
        def make():
            events.append('build ' + name)
            return lambda: events.append('run ' + name)
        return make
    medians = bert_models._one_at_a_time({'a': factory('a'), 'b': factory('b')}, 2)
    assert set(medians) == {'a', 'b'} and min(medians.values()) >= 0
    assert events == ['build a'] + ['run a'] * 3 + ['build b'] + ['run b'] * 3  # 1 warm-up


def test_exported_and_onnx_rows_answer_as_the_converted_model_and_reuse_their_files(tmp_path):
    from gluon_attention.models.qa import QAInference
    from jobs.bench import bert_onnx, qa
    pytest.importorskip('onnxruntime')
    _, ours = bert_models.gluonnlp_bert(BASE, TINY, 40, tmp_path, seed=3)
    made, skipped = bert_onnx.onnx_factories(ours, str(tmp_path), 32, 40)
    assert set(made) == {'ours_exported', 'ours_int8'}          # no peer interpreter given
    assert skipped[0].startswith('bert_models: no onnxruntime_hf_optimized, onnxruntime_hf_int8 '
                                 'rows: no interpreter with torch')
    batch = bert_onnx.qa_batch(32, 40)
    assert batch['p_mask'][:, 0].all() and not batch['p_mask'][:, 1:16].any()
    assert batch['p_mask'][1].sum() == 1 + 16 - 4                 # [CLS] + valid second half
    # pylint: disable-next=protected-access
    expected = QAInference(qa._random_qa_model(ours, 0), 5, 5)(*qa._mx_inputs(batch))
    got = {name: make()()[1] for name, make in made.items()}
    for want, have in zip(expected, got['ours_exported']):
        onp.testing.assert_allclose(have, want.asnumpy(), atol=1e-5, rtol=0)
    assert (got['ours_int8'][1].shape == got['ours_exported'][1].shape == (8, 5))
    cache = tmp_path / 'qa-export' / 'files.json'
    stamp = cache.stat().st_mtime_ns
    assert bert_onnx.onnx_factories(ours, str(tmp_path), 128, 40)[1] == skipped
    assert cache.stat().st_mtime_ns == stamp                     # written once per folder


def test_a_failing_worker_is_an_error_quoting_its_output(tmp_path):
    from jobs.bench.bert_models import run_worker
    spec = dict(model='no_such_model', size=TINY, vocab_size=40, folder=str(tmp_path),
                length=32, rounds=1, int8=False, onnx=None, one_at_a_time=False)
    with pytest.raises(RuntimeError, match="(?s)bert_models no_such_model T=32 failed .*"
                                           "KeyError: 'no_such_model'"):
        run_worker(spec)


def test_the_onnx_rows_join_the_base_rows_of_the_worker(capsys):
    pytest.importorskip('onnxruntime')
    rows = bert_models.bert_model_rows(rounds=1, models=(BASE,), lengths=(32,),
                                       sizes={BASE: TINY}, vocab_size=40, int8=False,
                                       onnx=dict(threads=1))
    by_impl = {r['impl']: r for r in rows}
    assert {'ours', bert_models.REFERENCE, 'ours_exported', 'ours_int8'} <= set(by_impl)
    assert by_impl['ours_int8']['isa'] == bert_models.isa_of('ours_int8')
    assert set(by_impl['ours_exported']['ratio']) == {bert_models.REFERENCE}
    assert 'bert_models: no onnxruntime_hf_optimized, onnxruntime_hf_int8 rows' in (
        capsys.readouterr().out)
