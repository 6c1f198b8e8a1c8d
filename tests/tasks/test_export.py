"""gluon_attention.export.block.export_and_check: export, reload with SymbolBlock.imports, compare.

The reloaded graph is checked against the float64 oracle at batch sizes and lengths other than the
export's; the report's difference is shown to be measured (a perturbed reload is caught); the
files are written whole (no temporary file left) in the documented inputs-JSON format.
"""
import json

import mxnet as mx
import numpy as onp
import pytest
from mxnet.gluon import nn

import reference as ref
from conftest import tol
from gluon_attention.core import cells, fused
from gluon_attention.export import block as export

NAMES, DTYPES = ['query', 'key', 'value', 'valid_length'], ['float32'] * 3 + ['int32']


def attention_batch(rng, batch, length_q, length_m, units=4):
    """(query, key, value, valid_length) NumPy inputs; valid lengths cover 1..L_m."""
    return (rng.normal(size=(batch, length_q, units)).astype('float32'),
            rng.normal(size=(batch, length_m, units)).astype('float32'),
            rng.normal(size=(batch, length_m, units + 1)).astype('float32'),
            onp.array([length_m - i % length_m for i in range(batch)], dtype='int32'))


def test_reload_matches_oracle_at_batch_sizes_and_lengths_other_than_the_export(tmp_path):
    rng = onp.random.RandomState(5)
    batches = [attention_batch(rng, 2, 3, 5), attention_batch(rng, 3, 4, 7),
               attention_batch(rng, 1, 6, 2)]
    block = cells.DotProductAttention()
    reloaded, report = export.export_and_check(block, str(tmp_path / 'dpa'), batches, NAMES,
                                               DTYPES)
    assert isinstance(reloaded, mx.gluon.SymbolBlock) and block._active
    assert report['num_batches'] == 3 and 0.0 <= report['max_abs_diff'] < 1e-6
    for batch in batches[1:]:
        context, weights = reloaded(*[mx.np.array(x, dtype=x.dtype) for x in batch])
        want_context, want_weights = ref.dot_product_attention(*batch)
        onp.testing.assert_allclose(context.asnumpy(), want_context, **tol())
        onp.testing.assert_allclose(weights.asnumpy(), want_weights, **tol())


def test_report_measures_the_difference_over_all_batches(tmp_path, monkeypatch):
    """A reload whose bias is shifted by 0.25 after the first batch's graph is built: the report
    carries that shift, so the difference is computed, not assumed."""
    real_import = export.import_block

    def shifted_import(prefix, ctx=None):
        block, spec = real_import(prefix, ctx)
        for name, param in block.collect_params().items():
            if name.endswith('bias'):
                param.set_data(param.data() + 0.25)
        return block, spec
    monkeypatch.setattr(export, 'import_block', shifted_import)
    dense = nn.Dense(3, flatten=False)
    dense.initialize(mx.init.Xavier())
    rng = onp.random.RandomState(2)
    batches = [(rng.normal(size=(b, length, 4)),) for b, length in ((2, 3), (5, 1))]
    _, report = export.export_and_check(dense, str(tmp_path / 'dense'), batches, ['x'],
                                        ['float32'])
    assert report['max_abs_diff'] == pytest.approx(0.25, abs=1e-6)


def test_files_are_whole_and_inputs_json_names_the_inputs(tmp_path):
    rng = onp.random.RandomState(1)
    _, report = export.export_and_check(cells.DotProductAttention(), str(tmp_path / 'm' / 'dpa'),
                                        [attention_batch(rng, 2, 3, 5)], NAMES, DTYPES)
    assert sorted(p.name for p in (tmp_path / 'm').iterdir()) == [
        'dpa-0000.params', 'dpa-inputs.json', 'dpa-symbol.json']
    spec = json.loads((tmp_path / 'm' / 'dpa-inputs.json').read_text())
    assert (spec['input_names'], spec['input_dtypes']) == (NAMES, DTYPES)
    assert spec['graph_input_names'] == ['data0', 'data1', 'data2', 'data3']
    assert 'custom_operators' not in spec
    assert report['inputs'] == str(tmp_path / 'm' / 'dpa-inputs.json')


@pytest.mark.skipif(not fused.available(), reason='fused kernel not built')
def test_graph_with_the_fused_kernel_is_noted_and_reloads(tmp_path):
    rng = onp.random.RandomState(4)
    q, k, v = (rng.normal(size=(2, 3, length, 4)).astype('float32') for length in (5, 6, 6))
    cell = cells.MultiHeadAttentionCell(layout='NKT', backend='fused')
    batches = [(q, k, v), (q[:1, :, :2], k[:1], v[:1])]
    _, report = export.export_and_check(cell, str(tmp_path / 'cell'), batches,
                                        ['query', 'key', 'value'], ['float32'] * 3)
    spec = json.loads((tmp_path / 'cell-inputs.json').read_text())
    assert fused.OP_NAME in spec['custom_operators'] and report['max_abs_diff'] < 1e-6


def test_no_batches_is_refused(tmp_path):
    with pytest.raises(ValueError, match='at least one batch. Received: num_batches=0'):
        export.export_and_check(cells.DotProductAttention(), str(tmp_path / 'x'), [], NAMES,
                                DTYPES)
