"""The ``bert_models_qa_int8`` rows at a tiny size (a 1-layer encoder of width 16 with the real
tokenizer, random heads saved as a fine-tuned folder): every row answers the first questions,
0.10's fused float32 graph under the folder's head gives our float32 answers (the conversion
holds), 0.10's INT8 graph says what it quantized, and a folder without a head gives no rows."""
import pytest

pytest.importorskip('gluonnlp')
pytest.importorskip('onnxruntime')

from gluon_attention.data import squad  # noqa: E402
from jobs.bench import bert_models, qa_int8  # noqa: E402
from squad_tiny import make_tiny_bert, make_tiny_qa_folder  # noqa: E402


def test_rows_answer_the_questions_and_0_10_float32_keeps_our_answers(tmp_path, capsys):
    encoder = make_tiny_bert(tmp_path / 'encoder')
    folder = make_tiny_qa_folder(tmp_path / 'model', encoder)
    rows = qa_int8.qa_int8_rows(folder, 1, rounds=1, warmup=0, max_questions=3, batch_size=4,
                                calibration_features=6, with_float32_010=True)
    by_impl = {r['impl']: r for r in rows}
    assert list(by_impl) == ['ours_exported', 'ours_int8', bert_models.REFERENCE,
                             bert_models.INT8]
    for row in rows:
        assert row['config'] == 'bert_models_qa_int8' and row['unit'] == 'questions/s'
        assert row['throughput'] == pytest.approx(3 / row['median_s'])
        assert 0 <= row['answers_kept'] <= 1 and 0 <= row['f1'] <= 100
    assert by_impl['ours_exported']['answers_kept'] == 1.0
    assert by_impl[bert_models.REFERENCE]['answers_kept'] == 1.0
    assert by_impl[bert_models.REFERENCE]['f1'] == by_impl['ours_exported']['f1']
    assert by_impl['ours_int8']['ratio'][bert_models.INT8] == pytest.approx(
        by_impl[bert_models.INT8]['median_s'] / by_impl['ours_int8']['median_s'])
    printed = capsys.readouterr().out
    # one layer: its 4 dense layers (QKV included) and both attention products; thresholds for
    # the input quantizations of the embedding's and the attention's LayerNorm outputs and the
    # softmax, and the outputs of the 4 dense layers and 2 products
    assert ('bert_models_qa_int8: gluonnlp_0.10_int8 runs 4 of 4 dense layers and 2 of 2 '
            'self-attention products in INT8; calibration thresholds for 9 of its 9 INT8 nodes'
            ) in printed


def test_calibration_features_are_training_features_padded_to_one_length():
    tokenizer = squad.load_tokenizer(None)
    ids, types, valid = qa_int8.calibration_inputs(tokenizer, 5, 64, 16)
    assert ids.shape == types.shape == (5, ids.shape[1]) and valid.shape == (5,)
    assert ids.shape[1] % 8 == 0 and max(valid) <= ids.shape[1] < max(valid) + 8
    assert max(valid) <= 64
    assert (ids[:, 0] == tokenizer.token_to_id('[CLS]')).all()
    assert set(types.ravel()) == {0, 1}


def test_no_fine_tuned_folder_no_rows(tmp_path, capsys):
    assert qa_int8.qa_int8_rows('', 1) == []
    assert qa_int8.qa_int8_rows(make_tiny_bert(tmp_path), 1) == []
    assert capsys.readouterr().out.count('bert_models_qa_int8: no rows: they need a '
                                         'fine-tuned model folder') == 2
