"""Runs in the interpreter with torch and transformers (.venv-peer): small random BertModel,
RobertaModel and DistilBertModel folders and their last hidden states on the given inputs.
Usage: python hf_peer_make.py OUT_DIR INPUTS.npz (INPUTS: ids, token_types, valid_length);
writes OUT_DIR/{bert,roberta,distilbert}/ (save_pretrained: safetensors), the same as
OUT_DIR/{kind}-bin/ with torch.save's pytorch_model.bin instead, and OUT_DIR/hidden.npz."""
import os
import sys

import numpy as np
import torch
import transformers

SIZES = dict(vocab_size=40, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
             intermediate_size=24)


def _models():
    bert = transformers.BertModel(transformers.BertConfig(max_position_embeddings=30,
                                                          type_vocab_size=2, **SIZES))
    roberta = transformers.RobertaModel(transformers.RobertaConfig(
        max_position_embeddings=32, pad_token_id=1, type_vocab_size=1, layer_norm_eps=1e-5,
        **SIZES))
    distil = transformers.DistilBertModel(transformers.DistilBertConfig(
        vocab_size=40, dim=16, n_layers=2, n_heads=2, hidden_dim=24, max_position_embeddings=30))
    return {'bert': bert, 'roberta': roberta, 'distilbert': distil}


def _randomize(model, seed):
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in sorted(model.named_parameters()):
            scale = 1.2 / param.shape[1] ** 0.5 if param.dim() == 2 else 0.3
            norm_gain = name.endswith('weight') and ('LayerNorm' in name or 'layer_norm' in name)
            param.copy_(torch.randn(param.shape, generator=generator) * scale + norm_gain)


def main(out_dir, inputs):
    data = np.load(inputs)
    ids = torch.tensor(data['ids'], dtype=torch.long)
    mask = torch.tensor(np.arange(ids.shape[1])[None] < data['valid_length'][:, None],
                        dtype=torch.long)
    hidden = {}
    for seed, (kind, model) in enumerate(sorted(_models().items())):
        _randomize(model, seed)
        model.eval()
        folder = '{}/{}'.format(out_dir, kind)
        model.save_pretrained(folder)
        model.save_pretrained(folder + '-bin')    # the older form: torch.save's state dict
        torch.save(model.state_dict(), folder + '-bin/pytorch_model.bin')
        os.remove(folder + '-bin/model.safetensors')
        extra = {} if kind == 'distilbert' else {
            'token_type_ids': torch.tensor(data['token_types'] * (kind == 'bert'))}
        with torch.no_grad():
            hidden[kind] = model(input_ids=ids, attention_mask=mask,
                                 **extra).last_hidden_state.numpy()
    np.savez('{}/hidden.npz'.format(out_dir), **hidden)


if __name__ == '__main__':
    main(*sys.argv[1:3])
