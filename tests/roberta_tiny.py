"""A tiny RoBERTa byte-level BPE vocabulary (GPT-2's rules: a space becomes 'Ġ', merges apply
lowest rank first) in GluonNLP 0.10's vocabulary form, its merges file, and the conversion of a
0.10 RoBERTa with them; text of the letters h, e, l, o, w, r, d and spaces tokenizes fully."""
import json

from gluon_attention.convert import from_gluonnlp

MODEL = 'roberta_12_768_12'
TOKENS = ['<s>', '<pad>', '</s>', '<unk>', 'h', 'e', 'l', 'o', 'he', 'll', 'hell', 'hello', 'Ġ',
          'w', 'r', 'd', 'Ġw', 'or', 'Ġwor', 'ld', 'Ġworld', '<mask>']
MERGES = '#version: 0.2\nh e\nl l\nhe ll\nhell o\nĠ w\no r\nĠw or\nl d\nĠwor ld\n'


def vocab_json():
    """0.10's RoBERTa vocabulary form (Vocab.to_json with its special tokens)."""
    return json.dumps({'idx_to_token': TOKENS, 'token_to_idx': {t: i for i, t in
                                                                enumerate(TOKENS)},
                       'unknown_token': '<unk>', 'padding_token': '<pad>',
                       'identifiers_to_tokens': {'bos_token': '<s>', 'eos_token': '</s>',
                                                 'mask_token': '<mask>'}})


def write_merges(folder):
    """``folder/merges.txt`` (pathlib.Path) holding MERGES; returns its path."""
    (folder / 'merges.txt').write_text(MERGES, encoding='utf-8')
    return folder / 'merges.txt'


def convert(params_file, folder, sizes):
    """from_gluonnlp of a saved 0.10 RoBERTa of vocabulary TOKENS, with MERGES, into
    ``folder/out``; returns from_gluonnlp's result."""
    (folder / 'net.vocab').write_text(vocab_json(), encoding='utf-8')
    return from_gluonnlp(params_file, MODEL, folder / 'net.vocab', folder / 'out',
                         sizes=sizes, merges_file=write_merges(folder))
