"""jobs.squad.onnx_check.check_onnx_squad: the exported QA model in ONNX Runtime on real SQuAD
features gives MXNet's answers, and a genuine difference is reported as a mismatch.

A tiny random encoder (D=12, 1 layer) on the shipped tokenizer; six evaluation questions at
max_seq_length 64.
"""
import mxnet as mx
import numpy as onp
import pytest
from mxnet import np

import gluon_attention as ga
from conftest import squad_file
from gluon_attention.data import squad

pytest.importorskip('onnx', reason='ONNX export needs onnx 1.17 (pip install .[onnx])')
pytest.importorskip('onnxruntime', reason='ONNX parity tests need onnxruntime '
                                          '(pip install .[onnx])')
from gluon_attention.export.block import export_block  # noqa: E402
from gluon_attention.export.onnx import onnx_session  # noqa: E402
from gluon_attention.pipelines.onnx import QA_OUTPUT_NAMES, export_qa_onnx  # noqa: E402
from jobs.squad.onnx_check import check_onnx_squad  # noqa: E402

NAMES = ['input_ids', 'token_types', 'valid_length', 'p_mask']
DECODE = dict(n_best_size=5, max_answer_length=30, null_score_diff_threshold=5.0)


@pytest.fixture(scope='module')
def qa_run(tmp_path_factory):
    """(examples, features, MXNet outputs per feature, onnx path)."""
    tokenizer = squad.load_tokenizer()
    examples = squad.read_squad(squad_file('haystack-small'))[:6]
    features = squad.convert_examples_to_features(examples, tokenizer, max_seq_length=64,
                                                  doc_stride=32, max_query_length=16,
                                                  is_training=False)
    mx.random.seed(2)
    encoder = ga.BertEncoder(tokenizer.get_vocab_size(), units=12, hidden_size=16,
                             num_layers=1, num_heads=3, max_length=64, attention_dropout=0.0)
    model = ga.ModelForQAConditional(encoder, units=8)
    model.initialize(mx.init.Normal(0.2))
    inference = ga.QAInference(model, 5, 5)
    inference.hybridize(static_alloc=True)
    outputs = []
    for begin in range(0, len(features), 7):       # batches of 7 (ONNX Runtime uses 4)
        arrays = squad.batchify(features[begin:begin + 7])
        result = inference(*[np.array(arrays[k], dtype=arrays[k].dtype) for k in NAMES])
        result = [r.asnumpy() for r in result]
        outputs += [tuple(r[row] for r in result) for row in range(len(result[0]))]
    prefix = str(tmp_path_factory.mktemp('export') / 'qa')
    export_block(inference, prefix, NAMES, ['int32', 'int32', 'int32', 'float32'])
    path = export_qa_onnx(prefix)
    assert path == prefix + '.onnx'
    return examples, features, outputs, path


def test_onnx_answers_equal_mxnet_answers(qa_run):
    examples, features, outputs, path = qa_run
    session = onnx_session(path)
    assert [i.name for i in session.get_inputs()] == NAMES
    assert tuple(o.name for o in session.get_outputs()) == QA_OUTPUT_NAMES
    report = check_onnx_squad(path, examples, features, outputs, batch_size=4, **DECODE)
    assert report['status'] == 'ok' and report['total'] == len(examples) == 6
    assert report['identical'] == 6 and report['differences'] == []
    assert report['max_abs_diff'] < 1e-4 and report['index_mismatches'] == 0
    _, final, _, _ = squad.decode_predictions(examples, features, outputs, **DECODE)
    assert sum(text != '' for text in final.values()) >= 3      # real answers were compared


def test_a_difference_beyond_a_near_tie_is_a_mismatch(qa_run):
    """MXNet's answerable logits of the first answered question pushed to 'impossible' by 20:
    its answer differs by a null decision 15 past the threshold, which is no near-tie."""
    examples, features, outputs, path = qa_run
    _, final, _, _ = squad.decode_predictions(examples, features, outputs, **DECODE)
    qid = next(q for q, text in final.items() if text)
    changed = [out[:4] + (onp.array([-20.0, 0.0], 'float32'),) if f.qas_id == qid else out
               for f, out in zip(features, outputs)]
    report = check_onnx_squad(path, examples, features, changed, batch_size=4, **DECODE)
    assert report['status'] == 'MISMATCH' and report['identical'] == 5
    (difference,) = report['differences']
    assert difference['qas_id'] == qid and difference['kind'] == ['null']
    assert difference['mxnet'] == '' and difference['onnx'] == final[qid]
    assert difference['gap'] == pytest.approx(15.0, abs=1.0) and report['near_ties'] == 0
