"""PyTorch peer of scripts/bf16_encoder_speed.py: the encoder forward in PyTorch + transformers.

Runs in the interpreter that has torch and transformers (``bf16_encoder_speed.py
--torch-python``). ``BertModel`` (no pooler, eval mode, ``torch.inference_mode``) loads the
encoder folder that bf16_encoder_speed.py wrote from its float32 block (the same weights); the
inputs are the arrays ``ids``, ``types`` int (B, T) and ``lengths`` int (B,) of ``--inputs``
(an ``.npz``), the attention mask built from the lengths. Talks JSON lines: each stdin line
{"autocast": null} is answered {"seconds": t} for one timed forward pass in float32,
{"autocast": "bfloat16"} for one under ``torch.autocast('cpu', dtype=torch.bfloat16)``; with
"save": PATH the sequence output (float32 (B, T, C)) is also written to PATH (``.npy``), untimed.
"""
from _torch_peer import autocast_context, serve, start_peer


def main():
    import numpy as onp
    torch, arrays, model = start_peer(__doc__.splitlines()[0], '--inputs',
                                      '.npz of ids, types and lengths')
    ids, types, lengths = (torch.from_numpy(arrays[k]).long()
                           for k in ('ids', 'types', 'lengths'))
    mask = (torch.arange(ids.shape[1])[None] < lengths[:, None]).long()

    def one_pass(request):
        with torch.inference_mode(), autocast_context(torch, request.get('autocast')):
            return model(input_ids=ids, attention_mask=mask, token_type_ids=types)[0]

    serve(torch, one_pass, lambda path, out: onp.save(path, out.float().numpy()))


if __name__ == '__main__':
    main()
