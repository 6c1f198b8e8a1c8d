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
    if not PEER.is_file():
        return False
    return subprocess.run([str(PEER), '-c', 'import torch, transformers'], capture_output=True,
                          check=False, timeout=120).returncode == 0


pytestmark = pytest.mark.skipif(not _peer_ready(), reason='needs .venv-peer with torch and '
                                                          'transformers (make bench installs it)')


@pytest.mark.parametrize('model_name, hf_class', [
    ('bert_12_768_12', 'BertModel'), ('ernie_12_768_12', 'BertModel'),
    ('distilbert_6_768_12', 'BertModel'), ('roberta_12_768_12', 'RobertaModel')])
def test_converted_folder_matches_in_transformers(model_name, hf_class, tmp_path):
    vocab = peer.tiny_vocab()
    ids, token_types, valid = peer.batch(onp.random.RandomState(9), len(vocab), length=10)
    ids[ids == vocab[vocab.padding_token]] = vocab['cat']   # no padding id at valid positions
    if peer.FAMILY[model_name][0] != 'bert':
        token_types[:] = 0
    net = peer.backbone(model_name, len(vocab))
    peer.randomize(net, 9, lambda: peer.call(net, model_name, ids, token_types, valid))
    theirs = peer.call(net, model_name, ids, token_types, valid)
    peer.save(net, tmp_path / 'net.params')
    (tmp_path / 'net.vocab').write_text(vocab.to_json(), encoding='utf-8')
    from_gluonnlp(tmp_path / 'net.params', model_name, tmp_path / 'net.vocab', tmp_path / 'ours',
                  sizes=peer.sizes_of(model_name))
    to_transformers(tmp_path / 'ours', tmp_path / 'hf')
    onp.savez(tmp_path / 'in.npz', ids=ids, token_types=token_types, valid_length=valid)
    done = subprocess.run([str(PEER), str(ROOT / 'tests' / 'hf_peer.py'), str(tmp_path / 'hf'),
                           hf_class, str(tmp_path / 'in.npz'), str(tmp_path / 'out.npz')],
                          capture_output=True, text=True, check=False, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    hidden = onp.load(tmp_path / 'out.npz')['hidden']
    diff = max(onp.abs(hidden[i, :n] - theirs[i, :n]).max() for i, n in enumerate(valid))
    assert diff < HF_ATOL, diff
