"""Write the BertEncoder parity fixture with an independent implementation.

Runs PyTorch + transformers ``BertModel`` (not this library) on a few fixed,
tokenized sentences and saves the last hidden states, so that
``tests/models/test_encoder.py`` can check ``BertEncoder.from_pretrained()``
without torch. This script needs torch and transformers; install them in a
separate virtual environment so the product environment stays pinned, and pass
the model folder (the one ``BertEncoder.from_pretrained()`` reads, printed by
``python -c "import gluon_attention.resources as r; print(r.default_model_dir())"``
in the product environment)::

    python3.11 -m venv torch-env
    torch-env/bin/pip install torch==2.13.0 transformers safetensors numpy
    torch-env/bin/python scripts/make_encoder_fixture.py --model-dir MODEL_DIR \
        --output tests/fixtures/minilm_hidden.npz

The fixture holds ``token_ids`` int32 (B, T), ``token_types`` int32 (B, T),
``valid_length`` int32 (B,), ``hidden`` float32 (B, T, D) (positions at or
beyond ``valid_length`` hold padding and are not meant to be compared) and
``sentences`` (the source text, one row per example, segments joined by ' ||| ').
"""
import argparse
import os

import numpy as np

# (first segment, optional second segment): two lengths, one sentence pair, padding.
SENTENCES = [
    ('The Normans gave their name to Normandy, a region in France.', None),
    ('Who gave their name to Normandy?',
     'The Normans, in the 10th and 11th centuries.'),
    ('Attention is all you need.', None),
]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0], allow_abbrev=False)
    parser.add_argument('--model-dir', required=True,
                        help='folder with config.json, model.safetensors, tokenizer.json '
                             '(required)')
    parser.add_argument('--output', default=os.path.normpath(os.path.join(
        os.path.dirname(os.path.abspath(__file__)), '..', 'tests', 'fixtures',
        'minilm_hidden.npz')), help='where to write the .npz fixture (default: '
                                    'tests/fixtures/minilm_hidden.npz of this repository)')
    parser.add_argument('--max-length', type=int, default=24,
                        help='longest allowed example, in tokens (default 24)')
    return parser.parse_args(argv)


def encode(tokenizer, max_length):
    """Token ids, token types and valid lengths of SENTENCES, right-padded with 0."""
    rows = [tokenizer(first, second) for first, second in SENTENCES]
    length = max(len(row['input_ids']) for row in rows)
    if length > max_length:
        raise ValueError('the fixture sentences must fit in --max-length tokens. '
                         f'Received: max_length={max_length}, needed={length}')
    token_ids = np.zeros((len(rows), length), np.int32)
    token_types = np.zeros((len(rows), length), np.int32)
    valid_length = np.zeros((len(rows),), np.int32)
    for i, row in enumerate(rows):
        n = len(row['input_ids'])
        token_ids[i, :n] = row['input_ids']
        token_types[i, :n] = row['token_type_ids']
        valid_length[i] = n
    return token_ids, token_types, valid_length


def main(argv=None):
    args = parse_args(argv)
    import torch
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(args.model_dir)
    model = transformers.BertModel.from_pretrained(args.model_dir, add_pooling_layer=False)
    model.eval()
    token_ids, token_types, valid_length = encode(tokenizer, args.max_length)
    positions = np.arange(token_ids.shape[1])[None, :]
    attention_mask = (positions < valid_length[:, None]).astype(np.int64)
    with torch.no_grad():
        out = model(input_ids=torch.from_numpy(token_ids.astype(np.int64)),
                    token_type_ids=torch.from_numpy(token_types.astype(np.int64)),
                    attention_mask=torch.from_numpy(attention_mask))
    hidden = out.last_hidden_state.numpy().astype(np.float32)
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    np.savez_compressed(
        args.output, token_ids=token_ids, token_types=token_types,
        valid_length=valid_length, hidden=hidden,
        sentences=np.array([' ||| '.join(s for s in pair if s) for pair in SENTENCES]),
        peer=np.array(f'torch=={torch.__version__} transformers=={transformers.__version__}'))
    print(f'wrote {args.output}: token_ids {token_ids.shape}, valid_length '
          f'{valid_length.tolist()}, hidden {hidden.shape} '
          f'({os.path.getsize(args.output)} bytes)')


if __name__ == '__main__':
    main()
