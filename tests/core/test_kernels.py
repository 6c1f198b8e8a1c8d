"""The kernel choice (gluon_attention.Kernels): one default for every block, 'auto' resolved
by one function with the documented rules, the resolved value handed down unchanged, the
deprecated keywords translated with a warning that names the replacement and points at the
caller. Bad values: tests/errors/test_bad_inputs.py."""
import inspect
import warnings

import mxnet as mx
import pytest

import gluon_attention as ga
from gluon_attention.core import fused
from gluon_attention.core.fused_rowwise import DenseGELU

needs_kernel = pytest.mark.skipif(not fused.available(), reason='the fused kernel is not built')
BLOCKS = (ga.TransformerEncoderLayer, ga.TransformerEncoder, ga.BertEncoder,
          ga.MultiHeadAttentionCell, ga.MultiHeadAttention, ga.DotProductAttention,
          ga.AdditiveAttention,
          ga.ResidualLayerNorm, DenseGELU, ga.ModelForQAConditional)


@pytest.mark.parametrize('block', BLOCKS, ids=lambda b: b.__name__)
def test_every_block_takes_kernels_with_one_default(block):
    assert inspect.signature(block.__init__).parameters['kernels'].default == ga.Kernels()


def test_auto_follows_the_documented_rules():
    here = 'fused' if fused.available() else 'composed'
    auto = ga.Kernels()
    assert auto.resolve(mx.cpu()) == ga.Kernels(here, here, 'float32')
    assert auto.resolve(mx.cpu(), attention_dropout=0.1) == ga.Kernels('composed', here)
    assert auto.resolve(mx.cpu(), weights=True).attention == 'composed'
    assert auto.resolve(mx.gpu(0)) == ga.Kernels('composed', 'composed')
    assert auto.resolve([mx.cpu(), mx.gpu(0)]) == ga.Kernels('composed', 'composed')
    assert auto.resolve(mx.cpu(), like=ga.Kernels('chunked', 'composed')) == \
        ga.Kernels('chunked', 'composed')
    explicit = ga.Kernels('chunked', 'composed')
    assert explicit.resolve(mx.gpu(0), like=ga.Kernels('fused', 'fused')) == explicit
    assert not auto.resolved and explicit.resolved


@needs_kernel
def test_the_choice_is_resolved_once_and_handed_down():
    """An encoder's resolved choice reaches every layer, cell and LayerNorm; a QA head on it
    takes the backbone's rowwise choice for its 'auto'."""
    encoder = ga.BertEncoder(vocab_size=10, units=8, hidden_size=8, num_layers=2, num_heads=2,
                             attention_dropout=0.0, kernels=ga.Kernels(rowwise='composed'))
    assert encoder.kernels == ga.Kernels('fused', 'composed')
    assert not encoder.embed_ln.fused
    for layer in encoder.encoder.layers:
        assert layer.kernels == encoder.kernels
        assert layer.attention_cell.backend == 'fused'
        assert not layer.attn_ln.fused and not layer.ffn_1.fused
    head = ga.ModelForQAConditional(encoder, units=8)
    assert head.kernels.rowwise == 'composed' and not head.fused_rowwise


LEGACY = [
    ('TransformerEncoderLayer', 'fused_attention',
     lambda: ga.TransformerEncoderLayer(8, 16, 2, fused_attention=False),
     lambda b: b.kernels.attention == 'composed'),
    ('TransformerEncoder', 'fused_rowwise',
     lambda: ga.TransformerEncoder(1, 8, 16, 2, fused_rowwise=False),
     lambda b: b.kernels.rowwise == 'composed'),
    ('BertEncoder', 'matmul_dtype',
     lambda: ga.BertEncoder(10, 8, 8, 1, 2, matmul_dtype='float32'),
     lambda b: b.kernels.matmul_dtype == 'float32'),
    ('MultiHeadAttentionCell', 'backend',
     lambda: ga.MultiHeadAttentionCell(backend='chunked'), lambda b: b.backend == 'chunked'),
    ('ResidualLayerNorm', 'fused', lambda: ga.ResidualLayerNorm(fused=False),
     lambda b: not b.fused),
    ('DenseGELU', 'matmul_dtype', lambda: DenseGELU(4, matmul_dtype='float32'),
     lambda b: b.matmul_dtype == 'float32'),
    ('ModelForQAConditional', 'fused_rowwise',
     lambda: ga.ModelForQAConditional(ga.TransformerEncoder(1, 8, 16, 2), fused_rowwise=False),
     lambda b: not b.fused_rowwise),
]


@pytest.mark.parametrize('owner,keyword,build,check', LEGACY, ids=[r[0] + '-' + r[1]
                                                                   for r in LEGACY])
def test_deprecated_keywords_still_work_and_warn(owner, keyword, build, check):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        block = build()
    ours = [w for w in caught if issubclass(w.category, DeprecationWarning)
            and '{}({}=...)'.format(owner, keyword) in str(w.message)]
    assert len(ours) == 1, [str(w.message) for w in caught]
    assert 'kernels=Kernels(' in str(ours[0].message)
    assert ours[0].filename == __file__           # points at the caller's line
    assert check(block)


def test_a_bad_deprecated_keyword_is_named_as_given():
    """fused_rowwise='yes' used to be refused with a message about fused_attention."""
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', DeprecationWarning)
        for keyword in ('fused_attention', 'fused_rowwise'):
            with pytest.raises(TypeError, match="Received: {}='yes'".format(keyword)) as err:
                ga.TransformerEncoder(1, 8, 16, 2, **{keyword: 'yes'})
            other = ({'fused_attention', 'fused_rowwise'} - {keyword}).pop()
            assert other not in str(err.value)
