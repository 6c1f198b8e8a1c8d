"""Files written by an earlier version keep working: a model folder and an exported graph from
commit da7f4ab (tests/fixtures/legacy_da7f4ab) load, give that commit's outputs and convert to
ONNX."""
import json
import shutil
from pathlib import Path

import numpy as onp
import pytest

from gluon_attention._resources import default_model_dir
from gluon_attention.export import run_exported

from squad_tiny import read_json, run_script

LEGACY = Path(__file__).resolve().parents[1] / 'fixtures' / 'legacy_da7f4ab'
INPUTS = ('input_ids', 'token_types', 'valid_length', 'p_mask')


def _reference():
    ref = onp.load(LEGACY / 'reference_outputs.npz')
    return tuple(ref[n] for n in INPUTS), [ref['output{}'.format(i)] for i in range(5)]


def _graph_copy(tmp_path):
    folder = tmp_path / 'export'
    shutil.copytree(LEGACY / 'export', folder)
    return folder / 'qa'


def test_legacy_graph_names_the_library_operators():
    ops = {node['op'] for node in json.loads((LEGACY / 'export' / 'qa-symbol.json').read_text())
           ['nodes']}
    assert {'ga_fused_attention', 'ga_add_layer_norm', 'ga_bias_gelu'} <= ops


def test_legacy_exported_graph_gives_the_outputs_it_gave(tmp_path):
    inputs, want = _reference()
    got = run_exported(str(_graph_copy(tmp_path)), [inputs])[0]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if w.dtype.kind in 'iu':
            onp.testing.assert_array_equal(g, w)
        else:
            onp.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_legacy_exported_graph_converts_to_onnx_with_the_same_outputs(tmp_path):
    pytest.importorskip('onnxruntime')
    from gluon_attention.export import onnx
    from gluon_attention.pipelines import onnx as onnx_squad
    inputs, want = _reference()
    path = onnx_squad.export_qa_onnx(str(_graph_copy(tmp_path)))
    got = onnx.run_onnx(path, dict(zip(INPUTS, inputs)))
    for g, w in zip(got, want):
        if w.dtype.kind in 'iu':
            onp.testing.assert_array_equal(g, w)
        else:
            onp.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


def test_legacy_model_folder_evaluates_to_the_predictions_it_made(tmp_path):
    folder = tmp_path / 'model'
    shutil.copytree(LEGACY / 'model', folder)
    for name in ('vocab.txt', 'tokenizer.json'):
        shutil.copyfile(default_model_dir() / name, folder / name)
    proc = run_script('evaluate', '--model-dir', folder, '--output-dir', tmp_path / 'out',
                      '--eval-file', 'haystack-small', '--max-eval-examples', '12',
                      '--threads', '1', '--no-progress')
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / 'out' / 'evaluate'
    assert read_json(out / 'predictions.json') == read_json(LEGACY / 'predictions.json')
    got, want = read_json(out / 'null_odds.json'), read_json(LEGACY / 'null_odds.json')
    assert got.keys() == want.keys()
    onp.testing.assert_allclose([got[k] for k in want], [want[k] for k in want], atol=1e-4)
