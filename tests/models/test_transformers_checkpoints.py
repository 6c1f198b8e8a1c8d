"""Hugging Face BERT-family folders (BertModel, RobertaModel, DistilBertModel as transformers
saves them) load into BertEncoder.from_pretrained with transformers' last hidden states within
1e-4 on valid positions, from model.safetensors or pytorch_model.bin (read without torch). Runs where .venv-peer (torch + transformers, as make bench installs
it) exists; skipped with that reason elsewhere."""
import pathlib
import subprocess

import mxnet as mx
import numpy as onp
import pytest

from gluon_attention.models.encoder import BertEncoder

ROOT = pathlib.Path(__file__).resolve().parents[2]
PEER = ROOT / '.venv-peer' / 'bin' / 'python'
HF_ATOL = 1e-4

pytestmark = pytest.mark.skipif(
    not (PEER.is_file() and (ROOT / '.venv-peer' / '.installed').is_file()),
    reason='needs .venv-peer with torch and transformers (make bench installs it)')


def test_transformers_folders_load_with_their_hidden_states(tmp_path):
    rng = onp.random.RandomState(2)
    ids = rng.randint(2, 40, (3, 9)).astype(onp.int32)      # no padding id (1) at valid positions
    token_types = (rng.rand(3, 9) > 0.5).astype(onp.int32)
    valid = onp.array([9, 3, 6], onp.int32)
    onp.savez(tmp_path / 'in.npz', ids=ids, token_types=token_types, valid_length=valid)
    done = subprocess.run([str(PEER), str(ROOT / 'tests' / 'hf_peer_make.py'), str(tmp_path),
                           str(tmp_path / 'in.npz')], capture_output=True, text=True,
                          check=False, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    expected = onp.load(tmp_path / 'hidden.npz')
    for kind in ('bert', 'roberta', 'distilbert', 'bert-bin', 'roberta-bin', 'distilbert-bin'):
        assert (tmp_path / kind / ('pytorch_model.bin' if kind.endswith('bin') else
                                   'model.safetensors')).is_file()
        encoder = BertEncoder.from_pretrained(tmp_path / kind)
        types = token_types if kind.startswith('bert') else onp.zeros_like(token_types)
        hidden = encoder(*(mx.np.array(x, dtype='int32') for x in (ids, types, valid)))
        reference = expected[kind.split('-')[0]]
        diff = max(onp.abs(hidden.asnumpy()[i, :n] - reference[i, :n]).max()
                   for i, n in enumerate(valid))
        print('{}: max abs diff {:.2e} on valid positions'.format(kind, diff))
        assert diff < HF_ATOL, (kind, diff)
