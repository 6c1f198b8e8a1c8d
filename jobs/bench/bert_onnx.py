"""The exported and ONNX Runtime rows of ``bert_models`` at BERT-base: our exported float32
graph against ONNX Runtime on the fused Hugging Face export of the same weights, and the INT8
files of both.

The converted BERT-base folder under a conditional QA head initialised N(0, 0.02) is exported
with :func:`jobs.bench.qa.export_random_qa` (``qa-symbol.json`` + ``qa.onnx``); the ONNX files
are those of the ``qa_inference`` rows (:func:`jobs.bench.qa._onnx_files`): ours optimized and
quantized as ``run_squad.py quantize`` does (``ours_int8``), and, with the peer interpreter
(torch, transformers, onnx), the Hugging Face ``BertModel`` export with the same head, fused by
ONNX Runtime's transformer optimizer (``onnxruntime_hf_optimized``) and quantized
(``onnxruntime_hf_int8``). The files are written once per folder and reused by the other
lengths. Every row runs on one batch of :func:`jobs.bench.bert_models.bert_inputs` with a
``p_mask`` (1 at [CLS] and at the valid positions of the second segment). Glossary: B batch,
T sequence length.
"""
import json
import os

import numpy as onp

from . import qa
from .bert_models import bert_inputs
from .models import has_transformers

__all__ = ['EXPORTED', 'ONNX_ROWS', 'qa_batch', 'exported_files', 'onnx_factories']

EXPORTED = 'ours_exported'
ONNX_ROWS = ('ours_int8',) + qa.HF_ROWS
_CACHE = 'files.json'


def qa_batch(length, vocab_size, batch=8):
    """The inputs of the exported QA graph for :func:`bert_inputs` ``(length, vocab_size)``: a
    dict of ``input_ids``, ``token_types`` int32 (B, T), ``valid_length`` int32 (B,) and
    ``p_mask`` float32 (B, T)."""
    ids, types, valid = bert_inputs(length, vocab_size, batch=batch)
    p_mask = ((types == 1) & (onp.arange(length)[None] < valid[:, None])).astype(onp.float32)
    p_mask[:, 0] = 1.0
    return {'input_ids': ids, 'token_types': types, 'valid_length': valid, 'p_mask': p_mask}


def exported_files(model_dir, folder, batch, threads, torch_python=None, peer_script=None):
    """{row: path} (``ours_exported``: the export prefix; the ONNX rows: their ``.onnx``
    files) and the lines saying which rows are left out, written under ``folder``/qa-export
    on the first call and read back after."""
    out = os.path.join(folder, 'qa-export')
    if os.path.isfile(os.path.join(out, _CACHE)):
        with open(os.path.join(out, _CACHE), encoding='utf-8') as handle:
            return json.load(handle)
    os.makedirs(out, exist_ok=True)
    inference, paths = qa.export_random_qa(os.path.join(out, 'qa'), batch, model_dir=model_dir)
    skipped, weights = [], None
    if torch_python and has_transformers(torch_python):
        weights = qa.save_batches(os.path.join(out, 'head.npz'), [], {
            'head/' + k: v for k, v in qa.head_weights(inference).items()})
    else:
        skipped.append('bert_models: no {} rows: no interpreter with torch and transformers '
                       '(make bench installs .venv-peer; benchmark.py --torch-python)'.format(
                           ', '.join(qa.HF_ROWS)))
    # pylint: disable-next=protected-access
    files, onnx_skipped = qa._onnx_files(out, paths['onnx'], weights and torch_python,
                                         peer_script, model_dir, weights)
    found = {EXPORTED: os.path.join(out, 'qa')}
    found.update({row: files[row] for row in ONNX_ROWS if row in files})
    result = [found, skipped + [line.replace('qa_inference:', 'bert_models:')
                                for line in onnx_skipped]]
    with open(os.path.join(out, _CACHE), 'w', encoding='utf-8') as handle:
        json.dump(result, handle)
    return result


def onnx_factories(model_dir, folder, length, vocab_size, threads=1, torch_python=None,
                   peer_script=None):
    """({impl: zero-argument factory of a zero-argument callable running one batch}, lines
    saying which rows are left out) of the rows of this module at length ``length``
    (``model_dir``: the converted folder; ``folder``: where the files go; ``threads``: ONNX
    Runtime's intra-op threads; ``torch_python``: the peer interpreter or None;
    ``peer_script``: ``scripts/bench_qa_torch_peer.py``, beside which the export script
    lies)."""
    batch = qa_batch(length, vocab_size)
    files, skipped = exported_files(model_dir, folder, batch, threads, torch_python,
                                    peer_script)

    def runner(make, path):
        def build():
            run = make(path)
            return lambda: run(batch)
        return build
    made = {EXPORTED: runner(qa.ours_runner, files[EXPORTED])}
    made.update({row: runner(lambda p: qa.onnx_runner(p, threads), files[row])
                 for row in ONNX_ROWS if row in files})
    return made, skipped
