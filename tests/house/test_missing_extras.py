"""Without the ``hf`` extra (safetensors, tokenizers), loading or converting a model folder raises
ImportError naming the extra to install, not a bare ModuleNotFoundError from inside the call."""
import json
import sys

import pytest

from gluon_attention.__main__ import convert_main
from gluon_attention.models.encoder import BertEncoder
from gluon_attention.pipelines import QAPredictor

HINT = "pip install 'gluon_attention[hf]'"


def _folder(path):
    """A fine-tuned folder's file names (the weights empty: they must not be read)."""
    path.mkdir()
    (path / 'config.json').write_text(json.dumps({'model_type': 'bert'}))
    (path / 'qa_config.json').write_text(json.dumps({
        'version_2_with_negative': 1, 'null_threshold': 0.0, 'null_threshold_source': 'auto'}))
    (path / 'vocab.txt').write_text('[PAD]\n[UNK]\n[CLS]\n[SEP]\nwho\n')
    for name in ('model.safetensors', 'qa_head.safetensors'):
        (path / name).write_bytes(b'')
    return path


@pytest.fixture
def without_hf(monkeypatch):
    for name in ('safetensors', 'safetensors.numpy', 'tokenizers',
                 'tokenizers.implementations'):
        monkeypatch.setitem(sys.modules, name, None)     # import raises ModuleNotFoundError


@pytest.mark.parametrize('call', [
    lambda folder: BertEncoder.from_pretrained(str(folder)),
    lambda folder: QAPredictor.from_folder(str(folder)),
], ids=['encoder', 'predictor'])
def test_loading_without_the_hf_extra_names_it(call, tmp_path, without_hf):
    with pytest.raises(ImportError) as err:
        call(_folder(tmp_path / 'model'))
    assert type(err.value) is ImportError, repr(err.value)
    assert HINT in str(err.value) and 'Received: missing module=' in str(err.value)


def test_convert_without_the_hf_extra_prints_one_line(tmp_path, without_hf, capsys):
    status = convert_main(['--to', 'transformers', '--model-dir', str(_folder(tmp_path / 'm')),
                           '--output-dir', str(tmp_path / 'out')])
    assert status == 2
    error = capsys.readouterr().err
    assert error.startswith('error: ') and HINT in error and error.count('\n') == 1
