"""Parameter names and shapes of GluonNLP 0.10's BERT-family models (``save_parameters`` form),
and their standard BERT names (Hugging Face's, as :mod:`gluon_attention.models.checkpoint`
reads them).

0.10 names (``gluonnlp/model/bert.py``): ``word_embed.0.weight`` (V, D),
``token_type_embed.0.weight`` (types, D), ``encoder.position_weight`` (max_length, D),
``encoder.layer_norm.{gamma, beta}`` (the embedding LayerNorm), per layer
``encoder.transformer_cells.{i}.attention_cell.proj_{query,key,value}.{weight (D, D), bias}``,
``.proj.*``, ``.layer_norm.*``, ``.ffn.ffn_1.{weight (H, D), bias}``, ``.ffn.ffn_2.*``,
``.ffn.layer_norm.*``; dense weights are (out, in) as in the standard names, so values copy
unchanged.
"""
import re

__all__ = ['prefix_of', 'split_head', 'backbone_shapes', 'head_shapes', 'to_bert_names',
           'from_bert_names', 'head_to_ours', 'head_to_gluonnlp']

_EMBEDDINGS = {'word_embed.0.weight': 'embeddings.word_embeddings.weight',
               'token_type_embed.0.weight': 'embeddings.token_type_embeddings.weight',
               'encoder.position_weight': 'embeddings.position_embeddings.weight',
               'encoder.layer_norm.gamma': 'embeddings.LayerNorm.weight',
               'encoder.layer_norm.beta': 'embeddings.LayerNorm.bias'}
_LAYER = {'attention_cell.proj_query': 'attention.self.query',
          'attention_cell.proj_key': 'attention.self.key',
          'attention_cell.proj_value': 'attention.self.value',
          'proj': 'attention.output.dense', 'layer_norm': 'attention.output.LayerNorm',
          'ffn.ffn_1': 'intermediate.dense', 'ffn.ffn_2': 'output.dense',
          'ffn.layer_norm': 'output.LayerNorm'}
_LEAVES = {'weight': 'weight', 'bias': 'bias', 'gamma': 'weight', 'beta': 'bias'}
_PRETRAINING = re.compile(r'^(decoder\..*|classifier\.(weight|bias)|pooler\.(weight|bias))$')
_CLASSIFIER = re.compile(r'^classifier\.(\d+)\.(weight|bias)$')


def _name_map(config):
    """0.10 backbone name -> standard BERT name."""
    out = {k: v for k, v in _EMBEDDINGS.items()
           if config['num_token_types'] or not k.startswith('token_type')}
    for i in range(config['num_layers']):
        for ours, bert in _LAYER.items():
            norm = ours.endswith('layer_norm')
            for leaf in (('gamma', 'beta') if norm else ('weight', 'bias')):
                out['encoder.transformer_cells.{}.{}.{}'.format(i, ours, leaf)] = \
                    'encoder.layer.{}.{}.{}'.format(i, bert, _LEAVES[leaf])
    return out


def _shape(name, config):
    d, h = config['units'], config['hidden_size']
    rows = {'word_embed.0.weight': config['vocab_size'], 'encoder.position_weight':
            config['max_length'], 'token_type_embed.0.weight': config['num_token_types']}
    if name in rows:
        return (rows[name], d)
    if '.ffn.ffn_1.' in name:
        return (h, d) if name.endswith('weight') else (h,)
    if '.ffn.ffn_2.' in name:
        return (d, h) if name.endswith('weight') else (d,)
    return (d, d) if name.endswith('weight') and 'layer_norm' not in name else (d,)


def backbone_shapes(config, pooler=False):
    """0.10 backbone name -> expected shape; ``pooler``: with ``pooler.{weight, bias}``."""
    shapes = {name: _shape(name, config) for name in _name_map(config)}
    if pooler:
        shapes.update({'pooler.weight': (config['units'],) * 2,
                       'pooler.bias': (config['units'],)})
    return shapes


def prefix_of(raw):
    """'bert.' or 'roberta.' when the backbone sits under it (a fine-tuned model), else ''."""
    for prefix in ('bert.', 'roberta.'):
        if any(name.startswith(prefix) for name in raw):
            return prefix
    return ''


def split_head(raw, prefix):
    """(backbone tensors without ``prefix``, head) where head is None or a dict with ``kind``
    ('span', 'classifier' or 'unknown'), ``style`` (the prefix) and its ``tensors``."""
    backbone = {n[len(prefix):]: v for n, v in raw.items() if n.startswith(prefix)}
    rest = {n: v for n, v in raw.items() if not n.startswith(prefix)}
    if not prefix or not rest:
        return {n: v for n, v in backbone.items() if not _PRETRAINING.match(n)}, None
    if set(rest) == {'span_classifier.weight', 'span_classifier.bias'}:
        kind = 'span'
    else:
        kind = 'classifier' if all(_CLASSIFIER.match(n) for n in rest) else 'unknown'
    if kind != 'classifier' or prefix == 'roberta.':
        backbone = {n: v for n, v in backbone.items() if not _PRETRAINING.match(n)}
    return backbone, dict(kind=kind, style=prefix, tensors=rest)


def _classifier_indices(head):
    return sorted({int(_CLASSIFIER.match(n).group(1)) for n in head['tensors']})


def head_shapes(head, units):
    """0.10 head name -> expected shape (empty for no head or an unknown one)."""
    if head is None or head['kind'] == 'unknown':
        return {}
    if head['kind'] == 'span':
        return {'span_classifier.weight': (2, units), 'span_classifier.bias': (2,)}
    indices = _classifier_indices(head)
    last = 'classifier.{}.weight'.format(indices[-1])
    weight = head['tensors'].get(last)
    classes = weight.shape[0] if weight is not None and weight.ndim else 0
    shapes = {last: (classes, units), 'classifier.{}.bias'.format(indices[-1]): (classes,)}
    if head['style'] == 'roberta.':  # its first dense layer is the pooler
        first = indices[0] if len(indices) > 1 else indices[0] - 1
        shapes.update({'classifier.{}.weight'.format(first): (units, units),
                       'classifier.{}.bias'.format(first): (units,)})
    return shapes


def head_to_ours(head, backbone):
    """The head's tensors under :mod:`gluon_attention.models.heads` names."""
    tensors = head['tensors']
    if head['kind'] == 'span':
        return {'span.weight': tensors['span_classifier.weight'],
                'span.bias': tensors['span_classifier.bias']}
    indices = _classifier_indices(head)
    out = {'classifier.' + leaf: tensors['classifier.{}.{}'.format(indices[-1], leaf)]
           for leaf in ('weight', 'bias')}
    pooler = ({'pooler.' + leaf: tensors['classifier.{}.{}'.format(indices[0], leaf)]
               for leaf in ('weight', 'bias')} if head['style'] == 'roberta.' else
              {'pooler.' + leaf: backbone['pooler.' + leaf] for leaf in ('weight', 'bias')})
    out.update(pooler)
    return out


def to_bert_names(backbone, config):
    """The backbone's 0.10 tensors under the standard BERT names (pooler left out)."""
    return {bert: backbone[ours] for ours, bert in _name_map(config).items()}


def from_bert_names(tensors, config):
    """Standard BERT tensors (canonical names) -> the 0.10 backbone names."""
    return {ours: tensors[bert] for ours, bert in _name_map(config).items()}


def head_to_gluonnlp(kind, tensors, roberta=False):
    """Our head's tensors under the names of 0.10's SQuAD model (span), of a ``BERTClassifier``
    built with ``dropout=0`` (classifier) or, with ``roberta``, of a ``RoBERTaClassifier`` built
    with ``dropout=0`` (its two dense layers ``classifier.0``, ``classifier.1``)."""
    if kind == 'span':
        return {'span_classifier.' + leaf: tensors['span.' + leaf] for leaf in ('weight', 'bias')}
    pooler = 'classifier.0.' if roberta else 'bert.pooler.'
    out = {pooler + leaf: tensors['pooler.' + leaf] for leaf in ('weight', 'bias')}
    out.update({'classifier.{}.{}'.format(int(roberta), leaf): tensors['classifier.' + leaf]
                for leaf in ('weight', 'bias')})
    return out
