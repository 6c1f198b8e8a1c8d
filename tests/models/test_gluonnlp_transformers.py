"""Converted GluonNLP 0.10 models load in Hugging Face transformers (gluon_attention.convert.
to_transformers) with 0.10's last hidden states within 1e-4 on valid positions: BERT and ERNIE
as BertModel, DistilBERT as a BertModel with one zero token type row, RoBERTa as RobertaModel
with its positions moved by pad_token_id + 1. Runs where .venv-peer (torch + transformers, as
make bench installs it) exists; skipped with that reason elsewhere."""
import pathlib
import subprocess

import numpy as onp
import pytest

import gluonnlp_peer as peer
from gluon_attention.convert import from_gluonnlp, to_transformers

ROOT = pathlib.Path(__file__).resolve().parents[2]
PEER = ROOT / '.venv-peer' / 'bin' / 'python'
HF_ATOL = 1e-4


def _peer_ready():
    """make bench marks a complete .venv-peer with .installed (no torch import at collection)."""
    return PEER.is_file() and (ROOT / '.venv-peer' / '.installed').is_file()


pytestmark = pytest.mark.skipif(not _peer_ready(), reason='needs .venv-peer with torch and '
                                                          'transformers (make bench installs it)')


CASES = [('bert_12_768_12', 'BertModel'), ('ernie_12_768_12', 'BertModel'),
         ('distilbert_6_768_12', 'BertModel'), ('roberta_12_768_12', 'RobertaModel')]


def _convert(model_name, folder):
    """A random small 0.10 model converted into ``folder``/hf: (0.10's hidden states, inputs)."""
    vocab = peer.tiny_vocab()
    ids, token_types, valid = peer.batch(onp.random.RandomState(9), len(vocab), length=10)
    ids[ids == vocab[vocab.padding_token]] = vocab['cat']   # no padding id at valid positions
    if peer.FAMILY[model_name][0] != 'bert':
        token_types[:] = 0
    net = peer.backbone(model_name, len(vocab))
    peer.randomize(net, 9, lambda: peer.call(net, model_name, ids, token_types, valid))
    folder.mkdir()
    peer.save(net, folder / 'net.params')
    (folder / 'net.vocab').write_text(vocab.to_json(), encoding='utf-8')
    from_gluonnlp(folder / 'net.params', model_name, folder / 'net.vocab', folder / 'ours',
                  sizes=peer.sizes_of(model_name))
    to_transformers(folder / 'ours', folder / 'hf')
    onp.savez(folder / 'in.npz', ids=ids, token_types=token_types, valid_length=valid)
    return peer.call(net, model_name, ids, token_types, valid), valid


def test_converted_folders_match_in_transformers(tmp_path):
    expected, command = {}, [str(PEER), str(ROOT / 'tests' / 'hf_peer.py')]
    for model_name, hf_class in CASES:
        folder = tmp_path / model_name
        expected[model_name] = _convert(model_name, folder)
        command += [str(folder / 'hf'), hf_class, str(folder / 'in.npz'),
                    str(folder / 'out.npz')]
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    for model_name, (theirs, valid) in expected.items():
        hidden = onp.load(tmp_path / model_name / 'out.npz')['hidden']
        diff = max(onp.abs(hidden[i, :n] - theirs[i, :n]).max() for i, n in enumerate(valid))
        print('{}: max abs diff {:.2e} on valid positions'.format(model_name, diff))
        assert diff < HF_ATOL, (model_name, diff)
