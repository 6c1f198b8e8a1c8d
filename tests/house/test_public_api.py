"""The curated public API: the top level exports exactly the documented names (README's API
section lists the same), and each name the API change replaced still works for one release
with a DeprecationWarning naming its replacement (CHANGELOG.md lists them)."""
import importlib
import warnings

import pytest

import gluon_attention as ga

DOCUMENTED = sorted([
    'attention', 'multi_head_dot_attn', 'attend',
    'masked_softmax', 'masked_log_softmax',
    'gen_self_attn_mask', 'gen_mem_attn_mask', 'valid_length_to_mask', 'combine_masks',
    'DotProductAttention', 'AdditiveAttention', 'MultiHeadAttentionCell', 'MultiHeadAttention',
    'TransformerEncoderLayer', 'TransformerEncoder', 'BertEncoder', 'ResidualLayerNorm',
    'Kernels', 'set_matmul_dtype',
    'DecomposableAttention', 'ModelForQAConditional', 'QAInference', 'qa_loss',
    'qa_loss_parts', 'QAPredictor', 'hardware'])

# (module, old name, the object it must still give as 'module:attribute')
DEPRECATED = [
    ('gluon_attention', 'mask_fill_like', 'gluon_attention.core.masking:mask_fill_like'),
    ('gluon_attention', 'l2_normalize', 'gluon_attention.core.functional:l2_normalize'),
    ('gluon_attention', 'dot_attn_score', 'gluon_attention.core.functional:dot_attn_score'),
    ('gluon_attention', 'select_vectors_by_position',
     'gluon_attention.core.functional:select_vectors_by_position'),
    ('gluon_attention', 'chunked_dot_attn', 'gluon_attention.core.chunked:_chunked_dot_attn'),
    ('gluon_attention', 'fused_dot_attn', 'gluon_attention.core.fused:_fused_dot_attn'),
    ('gluon_attention', 'mask3d', 'gluon_attention.compat.attend:mask3d'),
    ('gluon_attention', 'fill_context_mask', 'gluon_attention.compat.attend:fill_context_mask'),
    ('gluon_attention', 'dot', 'gluon_attention.compat.attend:dot'),
    ('gluon_attention', 'Attend', 'gluon_attention.models.nli:Attend'),
    ('gluon_attention', 'Compare', 'gluon_attention.models.nli:Compare'),
    ('gluon_attention', 'Aggregate', 'gluon_attention.models.nli:Aggregate'),
    ('gluon_attention.core.backends', 'composed_attn', 'gluon_attention.core.backends:_composed'),
    ('gluon_attention.core.backends', 'fused_attn',
     'gluon_attention.core.backends:_fused_backend'),
    ('gluon_attention.core.backends', 'chunked_attn', 'gluon_attention.core.backends:_chunked'),
    ('gluon_attention.core.backends', 'attend_in_chunks',
     'gluon_attention.core.backends:_attend_in_chunks'),
    ('gluon_attention.core.backends', 'get_backend', 'gluon_attention.core.backends:_get_backend'),
    ('gluon_attention.core.backends', 'resolve_backend',
     'gluon_attention.core.backends:_resolve_backend'),
    ('gluon_attention.core.functional', 'compose_attention',
     'gluon_attention.core.functional:_compose_attention'),
    ('gluon_attention.core.fused', 'fused_dot_attn', 'gluon_attention.core.fused:_fused_dot_attn'),
    ('gluon_attention.core.fused', 'resolve', 'gluon_attention.core.fused:_resolve'),
    ('gluon_attention.fused', 'fused_dot_attn', 'gluon_attention.core.fused:_fused_dot_attn'),
    ('gluon_attention.fused', 'resolve', 'gluon_attention.core.fused:_resolve'),
    ('gluon_attention.core.chunked', 'chunked_dot_attn',
     'gluon_attention.core.chunked:_chunked_dot_attn'),
]


def test_top_level_exports_exactly_the_documented_names():
    assert sorted(ga.__all__) == DOCUMENTED
    for name in ga.__all__:
        assert getattr(ga, name) is not None
    public = {n for n in vars(ga) if not n.startswith('_')}
    modules = {n for n in public if type(getattr(ga, n)).__name__ == 'module'}
    assert public - modules <= set(DOCUMENTED)


@pytest.mark.parametrize('module,name,target', DEPRECATED,
                         ids=['{}.{}'.format(m, n) for m, n, _ in DEPRECATED])
def test_each_deprecated_name_warns_and_still_works(module, name, target):
    path, attribute = target.split(':')
    want = getattr(importlib.import_module(path), attribute)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        got = getattr(importlib.import_module(module), name)
    assert got is want
    messages = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
    assert len(messages) == 1 and '{}.{} is deprecated'.format(module, name) in messages[0]
    assert 'use ' in messages[0]
    assert name not in getattr(importlib.import_module(module), '__all__', [])


def test_unknown_names_still_raise_attribute_error():
    with pytest.raises(AttributeError, match='no_such_name'):
        ga.no_such_name  # pylint: disable=pointless-statement
