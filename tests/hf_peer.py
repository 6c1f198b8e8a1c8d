"""Runs in the interpreter with torch and transformers (.venv-peer): a transformers folder's last
hidden states. Usage: python hf_peer.py FOLDER CLASS INPUTS.npz OUTPUT.npz [FOLDER CLASS ...]
(CLASS: BertModel or RobertaModel; INPUTS: ids, token_types, valid_length), one process for all
(torch starts once)."""
import sys

import numpy as np
import torch
import transformers


def main(folder, class_name, inputs, output):
    model = getattr(transformers, class_name).from_pretrained(folder, attn_implementation='eager')
    model.eval()
    data = np.load(inputs)
    ids = torch.tensor(data['ids'], dtype=torch.long)
    mask = torch.tensor(np.arange(ids.shape[1])[None] < data['valid_length'][:, None],
                        dtype=torch.long)
    with torch.no_grad():
        hidden = model(input_ids=ids, attention_mask=mask,
                       token_type_ids=torch.tensor(data['token_types'], dtype=torch.long))
    np.savez(output, hidden=hidden.last_hidden_state.numpy())


if __name__ == '__main__':
    for start in range(1, len(sys.argv), 4):
        main(*sys.argv[start:start + 4])
