"""Hugging Face RoBERTa and DistilBERT checkpoints in the standard BERT form that
:mod:`gluon_attention.models.checkpoint` reads (config keys and tensor names).

RoBERTa (Liu et al., 2019) is a BERT without a second segment: its ``roberta.`` tensors carry
the BERT names; transformers numbers the positions of non-padding tokens from
``pad_token_id + 1``, so the rows above are dropped and position t reads row
``pad_token_id + 1 + t`` (an input must not hold the padding id at a valid position); its one
token type row is kept (added at every position). DistilBERT (Sanh et al., 2019) is a post-norm
BERT without token types whose tensors are named ``transformer.layer.{i}.attention.q_lin`` ...;
its LayerNorm epsilon is 1e-12. Task heads beside the ``roberta.`` / ``distilbert.`` backbone
(``lm_head.``, ``classifier.``, ``qa_outputs.``, ...) are dropped.
"""
__all__ = ['bert_form']

_DISTILBERT_CONFIG = {'dim': 'hidden_size', 'hidden_dim': 'intermediate_size',
                      'n_layers': 'num_hidden_layers', 'n_heads': 'num_attention_heads',
                      'activation': 'hidden_act', 'dropout': 'hidden_dropout_prob',
                      'attention_dropout': 'attention_probs_dropout_prob'}
_DISTILBERT_LAYER = {'attention.q_lin': 'attention.self.query',
                     'attention.k_lin': 'attention.self.key',
                     'attention.v_lin': 'attention.self.value',
                     'attention.out_lin': 'attention.output.dense',
                     'sa_layer_norm': 'attention.output.LayerNorm',
                     'ffn.lin1': 'intermediate.dense', 'ffn.lin2': 'output.dense',
                     'output_layer_norm': 'output.LayerNorm'}


def _backbone(tensors, prefix):
    """The tensors under ``prefix`` (without it) when any name has it, else all of them."""
    if not any(name.startswith(prefix) for name in tensors):
        return dict(tensors)
    return {name[len(prefix):]: value for name, value in tensors.items()
            if name.startswith(prefix)}


def _roberta(raw, tensors):
    tensors = _backbone(tensors, 'roberta.')
    offset = int(raw.get('pad_token_id', 1)) + 1
    name = 'embeddings.position_embeddings.weight'
    if name in tensors:
        tensors[name] = tensors[name][offset:]
    tensors.pop('embeddings.token_type_ids', None)
    return dict(raw, model_type='bert', position_embedding_type='absolute',
                max_position_embeddings=raw['max_position_embeddings'] - offset), tensors


def _distilbert_name(name):
    parts = name.split('.')
    if parts[:2] != ['transformer', 'layer'] or len(parts) < 5:
        return name
    stem, leaf = '.'.join(parts[3:-1]), parts[-1]
    return 'encoder.layer.{}.{}.{}'.format(parts[2], _DISTILBERT_LAYER.get(stem, stem), leaf)


def _distilbert(raw, tensors):
    tensors = {_distilbert_name(name): value
               for name, value in _backbone(tensors, 'distilbert.').items()}
    config = {bert: raw[key] for key, bert in _DISTILBERT_CONFIG.items() if key in raw}
    config.update(vocab_size=raw.get('vocab_size'), type_vocab_size=0, layer_norm_eps=1e-12,
                  max_position_embeddings=raw.get('max_position_embeddings'), model_type='bert')
    return config, tensors


def bert_form(raw, tensors):
    """``(config dict, tensors)`` of a checkpoint in the standard BERT form: RoBERTa and
    DistilBERT (``model_type``) converted as the module docstring says, others unchanged."""
    kind = raw.get('model_type')
    if kind == 'roberta':
        return _roberta(raw, tensors)
    if kind == 'distilbert':
        return _distilbert(raw, tensors)
    return raw, tensors
