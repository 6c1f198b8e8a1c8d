"""bfloat16 inference of the QA pipeline on the model folder and exported graph written at da7f4ab
(tests/fixtures/legacy_da7f4ab): ``QAPredictor.from_folder(..., kernels=Kernels(matmul_dtype=
'bfloat16'))`` runs the in-process encoder with bfloat16 products (the same outputs as the model
set to bfloat16 by ``set_matmul_dtype``) and the exported graph through ``Bfloat16Graph`` (its
product weights bfloat16, its logits within bfloat16 rounding of the float32 graph's); both
give that commit's answers on its 12 evaluated questions; ``run_squad.py evaluate --matmul-dtype
bfloat16`` records the dtype and this process's AMX decision in metrics.json; ``--onnx-model``
with bfloat16 is one error line; a CPU without bfloat16 products is refused."""
import json

import mxnet as mx
import numpy as onp
import pytest

from gluon_attention import Kernels
from gluon_attention.core import kernels as kernels_module
from gluon_attention.core import matmul
from gluon_attention.core.matmul import set_matmul_dtype
from gluon_attention.data import squad
from gluon_attention.hardware import amx_in_use
from gluon_attention.models.qa import QAInference
from gluon_attention.pipelines import QAPredictor, load_qa_folder, load_qa_model
from gluon_attention.pipelines.features import eval_features, run_batches

from squad_tiny import LEGACY, copy_legacy, script_module

BF16 = Kernels(matmul_dtype='bfloat16')
needs_bf16 = pytest.mark.skipif(matmul.bfloat16_problem() is not None,
                                reason='no bfloat16 products here: {}'.format(
                                    matmul.bfloat16_problem()))
#: Largest |bfloat16 - float32| logit of the graph, as a fraction of the largest |logit|: every
#: product rounds its operands and its result to bfloat16 (2^-8 relative each); the fixture's
#: logits pass through 2 encoder layers and a 2-layer head (measured: 0.7% on the end logits).
GRAPH_TOL = 0.03


@pytest.fixture(scope='module')
def legacy(tmp_path_factory):
    """The legacy folder with its tokenizer files, its graph, the 12 evaluated questions and
    their features."""
    folder, graph = copy_legacy(tmp_path_factory.mktemp('legacy_bf16'))
    examples = squad.read_squad(squad.default_data_path('haystack-small'))[:12]
    return {'folder': folder, 'graph': graph, 'examples': examples}


def _outputs(predictor, examples):
    """The 5 outputs of every feature of ``examples`` through the predictor's block."""
    features = eval_features(examples, predictor.tokenizer,
                             predictor.qa_config['eval_max_seq_length'],
                             predictor.qa_config['max_query_length'])
    with mx.util.np_shape(True), mx.util.np_array(True):
        return run_batches(predictor.block, features, 5, mx.cpu())


def _fixture_answers():
    return json.loads((LEGACY / 'predictions.json').read_text())


@needs_bf16
def test_in_process_bfloat16_is_the_model_set_to_bfloat16(legacy):
    predictor = QAPredictor.from_folder(legacy['folder'], kernels=BF16)
    assert predictor.block.model.backbone.matmul_dtype == 'bfloat16'
    model = load_qa_model(load_qa_folder(legacy['folder']), [mx.cpu()])
    assert set_matmul_dtype(model, 'bfloat16') > 0
    with mx.util.np_shape(True), mx.util.np_array(True):
        peer = QAInference(model, 5, 5)
        peer.hybridize(static_alloc=True)
    got = _outputs(predictor, legacy['examples'])
    predictor.block = peer
    want = _outputs(predictor, legacy['examples'])
    for a, b in zip(got, want):
        for x, y in zip(a, b):
            onp.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-6)


@needs_bf16
def test_bfloat16_graph_logits_are_float32_within_bfloat16_rounding(legacy):
    f32 = QAPredictor.from_folder(legacy['folder'], graph=legacy['graph'])
    bf16 = QAPredictor.from_folder(legacy['folder'], graph=legacy['graph'], kernels=BF16)
    dtypes = {p.dtype for p in bf16.block.block.collect_params().values()}
    assert matmul.BFLOAT16 in dtypes and onp.float32 in dtypes   # product weights cast once
    want, got = (_outputs(p, legacy['examples']) for p in (f32, bf16))
    # the sorted top start logits move by at most the largest change of any start logit
    # (-inf where a chunk has fewer than 5 positions that may start an answer: the same there)
    starts = [onp.stack([o[0] for o in out]) for out in (want, got)]
    finite = onp.isfinite(starts[0])
    assert (onp.isfinite(starts[1]) == finite).all() and finite.mean() > 0.5
    change = onp.abs(starts[1] - starts[0])[finite]
    assert 0 < change.max() <= GRAPH_TOL * onp.abs(starts[0][finite]).max()
    # end logits compared where the same start was chosen (they are conditioned on it)
    same = onp.concatenate([a[1] == b[1] for a, b in zip(want, got)]) & finite.ravel()
    ends = [onp.concatenate([o[2] for o in out])[same] for out in (want, got)]
    finite = onp.isfinite(ends[0])
    assert same.mean() > 0.5 and (onp.isfinite(ends[1]) == finite).all()
    ends = [e[finite] for e in ends]
    assert onp.abs(ends[1] - ends[0]).max() <= GRAPH_TOL * onp.abs(ends[0]).max()
    onp.testing.assert_allclose(onp.stack([o[4] for o in got]), onp.stack([o[4] for o in want]),
                                atol=GRAPH_TOL * 1.0)


@needs_bf16
def test_bfloat16_predictors_give_the_answers_that_commit_evaluated(legacy):
    # identical, not a rate: each of the 12 null score differences is >= 1.0 from the threshold
    # and bfloat16 moves them by < 1e-4 here (the answerable logits above: GRAPH_TOL at most)
    want = _fixture_answers()
    for graph in (None, legacy['graph']):
        predictor = QAPredictor.from_folder(legacy['folder'], graph=graph, kernels=BF16)
        results = predictor.predict_examples(legacy['examples'])
        assert [results['final_predictions'][e.qas_id] for e in legacy['examples']] == \
            [want[e.qas_id] for e in legacy['examples']]


@needs_bf16
def test_evaluate_records_the_dtype_and_the_amx_decision(legacy, tmp_path):
    assert script_module().main(['evaluate', '--model-dir', str(legacy['folder']),
                                 '--output-dir', str(tmp_path), '--matmul-dtype', 'bfloat16',
                                 '--max-eval-examples', '12', '--no-progress']) == 0
    metrics = json.loads((tmp_path / 'evaluate' / 'metrics.json').read_text())
    assert metrics['matmul_dtype'] == 'bfloat16'
    assert metrics['amx'] is amx_in_use()
    assert metrics['amx_reason']
    predictions = json.loads((tmp_path / 'evaluate' / 'predictions.json').read_text())
    assert predictions == {e.qas_id: _fixture_answers()[e.qas_id] for e in legacy['examples']}


def test_bfloat16_with_an_onnx_file_is_one_error_line(legacy, tmp_path, capsys):
    onnx_file = tmp_path / 'model.onnx'
    onnx_file.write_bytes(b'')
    with pytest.raises(SystemExit) as info:
        script_module().main(['predict', '--model-dir', str(legacy['folder']), '--question',
                              'Who?', '--context', 'Rollo.', '--onnx-model', str(onnx_file),
                              '--matmul-dtype', 'bfloat16', '--output-dir', str(tmp_path)])
    assert info.value.code == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith('run_squad.py predict: error: --matmul-dtype applies to the MXNet '
                           'model: give it or --onnx-model, not both. Received: '
                           "matmul_dtype='bfloat16'"), line


def test_a_cpu_without_bfloat16_products_is_refused_before_loading(monkeypatch, tmp_path):
    monkeypatch.setattr(kernels_module, 'bfloat16_problem', lambda: 'no bfloat16 here')
    with pytest.raises(ValueError, match="matmul_dtype='bfloat16' does not run here "
                                         r'\(no bfloat16 here\)'):
        QAPredictor.from_folder(tmp_path / 'no-folder', kernels=BF16)
