"""The benchmark's implementations run and agree with each other on a tiny configuration."""
import mxnet as mx
import numpy as onp
import pytest
from mxnet import np

from gluon_attention import multi_head_dot_attn
from gluon_attention.core import fused
from gluon_attention.core.matmul import bfloat16_problem
from jobs.bench import attention as bench


@pytest.fixture
def tiny(monkeypatch):
    monkeypatch.setitem(bench.CONFIGS, 'tiny', (2, 3, 8, 8, 4))
    return 'tiny'


@pytest.mark.parametrize('mode', ['fwd', 'fwdbwd'])
def test_every_implementation_runs(tiny, mode):
    impls = bench.implementations(tiny, mode)
    expected = {'ours_fn_NKT', 'ours_cell_NKT', 'ours_cell_NKT_vl', 'ours_cell_TNK_vl',
                'gluonnlp_dot', 'batch_dot_ceiling', 'gemm_softmax_floor'}
    if fused.available():
        expected |= {'ours_fused_NKT', 'ours_fused_TNK'}
        if bfloat16_problem() is None:
            expected.add('ours_fused_bfloat16_NKT')
    assert expected <= set(impls)
    medians = bench.interleaved_medians(impls, repeats=1, warmup=0)
    assert set(medians) == set(impls) and all(t > 0 for t in medians.values())


def test_valid_length_rows_compute_the_masked_attention(tiny):
    """The `_vl` rows feed the cell the same key padding as the mask rows."""
    q, k, v, lengths = (np.array(x) for x in bench.make_inputs(tiny))
    assert lengths.asnumpy().tolist() == [8, 7]
    mask = np.array(onp.arange(8)[None, None, :] < lengths.asnumpy()[:, None, None])
    by_mask, (_, weights) = multi_head_dot_attn(q, k, v, mask)
    by_length, (_, weights_vl) = multi_head_dot_attn(q, k, v, valid_length=lengths)
    onp.testing.assert_allclose(by_length.asnumpy(), by_mask.asnumpy(), rtol=1e-5, atol=1e-6)
    assert onp.all(weights_vl.asnumpy()[1, :, :, 7] == 0)
