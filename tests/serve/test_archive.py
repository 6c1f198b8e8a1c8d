"""The model archive holds what the handler reads (graph, qa_config.json, the tokenizer file it
loads, serve.json) and not the folder's weights; a stage left by an earlier layout is cleaned and
the archive rebuilt; an unchanged one is not rebuilt; an archive built with matmul_dtype
'bfloat16' makes the handler run the bfloat16 graph, answering as the bfloat16 predictor does."""
import os
import shutil
import zipfile

import pytest

from gluon_attention import Kernels
from gluon_attention.core.matmul import bfloat16_problem
from gluon_attention.core.matmul_graph import Bfloat16Graph
from gluon_attention.data import squad
from gluon_attention.pipelines import QAPredictor
from jobs.serve.archive import archived_files, build_archive
from jobs.serve.handler import QAService
from jobs.serve.protocol import Limits

from serve_helpers import questions, tiny_model

pytest.importorskip('model_archiver', reason='the [serve] extra (model-archiver) is not installed')


def test_tokenizer_files_are_the_ones_load_tokenizer_reads(tmp_path):
    folder = tiny_model(tmp_path, export=False) / 'model'       # tokenizer.json and vocab.txt
    assert [p.name for p in squad.tokenizer_files(folder)] == ['tokenizer.json']
    os.remove(folder / 'tokenizer.json')
    assert [p.name for p in squad.tokenizer_files(folder)] == ['vocab.txt']
    (folder / 'tokenizer_config.json').write_text('{"do_lower_case": true}')
    assert [p.name for p in squad.tokenizer_files(folder)] == ['vocab.txt',
                                                               'tokenizer_config.json']
    os.remove(folder / 'vocab.txt')
    with pytest.raises(ValueError, match='expected tokenizer.json or vocab.txt'):
        squad.tokenizer_files(folder)


def test_archive_holds_the_graph_qa_config_and_tokenizer_only(tmp_path):
    root = tiny_model(tmp_path)
    model, graph, store = root / 'model', str(root / 'export' / 'qa'), root / 'inst' / 'store'
    store.mkdir(parents=True)
    stale = root / 'inst' / 'stage' / 'model'           # an earlier layout linked the weights
    stale.mkdir(parents=True)
    os.symlink(model / 'model.safetensors', stale / 'model.safetensors')
    path, built = build_archive(str(model), graph, str(store), 'squad', Limits(), 8)
    inside = sorted(zipfile.ZipFile(path).namelist())
    assert built and inside == sorted(['MAR-INF/MANIFEST.json', 'serve.json'] + list(
        archived_files(str(model), graph)))
    assert [n for n in inside if n.startswith('model/')] == ['model/qa_config.json',
                                                             'model/tokenizer.json']
    assert sorted(os.listdir(stale)) == ['qa_config.json', 'tokenizer.json']
    with zipfile.ZipFile(path) as archive:
        assert archive.read('graph/qa-0000.params') == (root / 'export' / 'qa-0000.params'
                                                        ).read_bytes()
    assert build_archive(str(model), graph, str(store), 'squad', Limits(), 8) == (path, False)
    shutil.copyfile(model / 'qa_config.json', model / 'qa_config.json.new')   # a newer file
    os.replace(model / 'qa_config.json.new', model / 'qa_config.json')
    assert build_archive(str(model), graph, str(store), 'squad', Limits(), 8) == (path, True)


@pytest.mark.skipif(bfloat16_problem() is not None, reason='no bfloat16 products here')
def test_a_bfloat16_archive_answers_as_the_bfloat16_graph_predictor(tmp_path):
    root = tiny_model(tmp_path)
    model, graph, store = root / 'model', str(root / 'export' / 'qa'), root / 'inst' / 'store'
    store.mkdir(parents=True)
    path, _ = build_archive(str(model), graph, str(store), 'squad', Limits(), 8,
                            matmul_dtype='bfloat16')
    zipfile.ZipFile(path).extractall(tmp_path / 'unpacked')
    service = QAService(str(tmp_path / 'unpacked'))
    assert isinstance(service.predictor.block, Bfloat16Graph)
    pairs = [(q['question'], q['context']) for q in questions(6)]
    want = QAPredictor.from_folder(str(model), graph=graph,
                                   kernels=Kernels(matmul_dtype='bfloat16')).answer_batch(pairs)
    for got, expected in zip(service.predictor.answer_batch(pairs), want):
        assert (got.text, got.start, got.end, got.best_span) == (
            expected.text, expected.start, expected.end, expected.best_span)
        assert got.null_score_diff == pytest.approx(expected.null_score_diff, abs=1e-4)
