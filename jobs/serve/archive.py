"""The model archive (``.mar``) that Multi Model Server loads: what the handler
(:mod:`~jobs.serve.handler`) reads and runs, nothing more.

Layout inside the archive: ``graph/qa-symbol.json``, ``graph/qa-0000.params``,
``graph/qa-inputs.json`` (the exported graph: the model's weights are its params), ``model/``
with the fine-tuned folder's ``qa_config.json`` (lengths, threshold) and the tokenizer files
:func:`~gluon_attention.data.squad.tokenizer_files` names (``tokenizer.json``, else ``vocab.txt``
and ``tokenizer_config.json``), the handler's code (:data:`HANDLER_FILES`: the server's worker
runs outside the repository and imports ``jobs.serve.handler`` from the archive), ``serve.json`` and the archiver's ``MAR-INF/MANIFEST.json``. The
folder's ``model.safetensors`` and ``qa_head.safetensors`` (the same weights again) stay out. The
archive is written by ``model-archiver`` (the ``[serve]`` extra) from a staging folder of links,
and rebuilt only when a file it holds, or ``serve.json`` (which lists them), changed.
"""
import dataclasses
import json
import os
import shutil
import subprocess
import sys

from gluon_attention.checks import fail
from gluon_attention.data import squad
from gluon_attention.models.heads import HEAD_CONFIG
from gluon_attention.pipelines.folder import (QA_CONFIG, check_model_folder, is_span_folder,
                                              span_qa_config)

from ..engine.common import atomic_write_json
from .protocol import SERVE_JSON

__all__ = ['HANDLER', 'HANDLER_FILES', 'GRAPH_SUFFIXES', 'default_graph', 'graph_exists',
           'export_graph', 'archived_files', 'build_archive']

HANDLER = 'jobs.serve.handler:handle'
GRAPH_SUFFIXES = ('-symbol.json', '-0000.params', '-inputs.json')
#: The handler's code, carried by the archive: the worker runs outside the repository.
HANDLER_FILES = ('jobs/__init__.py', 'jobs/serve/__init__.py', 'jobs/serve/handler.py',
                 'jobs/serve/protocol.py', 'jobs/serve/frame.py')
_REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def default_graph(model_dir):
    """Where ``run_squad.py train`` exports the graph of ``<run>/model``: ``<run>/export/qa``."""
    return os.path.join(os.path.dirname(os.path.abspath(model_dir)), 'export', 'qa')


def graph_exists(prefix):
    return all(os.path.isfile(prefix + suffix) for suffix in GRAPH_SUFFIXES)


def export_graph(model_dir, prefix, start_top_n=5, end_top_n=5):
    """Export the ``QAInference`` graph of a fine-tuned model folder to ``prefix`` (checked
    against the block after reloading, as the train run's own export is).

    Returns the export report of :func:`~gluon_attention.export.export_and_check`.
    """
    # late imports: only a server whose graph is missing builds the model in this process
    # pylint: disable=import-outside-toplevel
    import mxnet as mx
    from gluon_attention.export import export_and_check
    from gluon_attention.models.qa import QAInference
    from gluon_attention.pipelines import load_qa_folder, load_qa_model
    from gluon_attention.pipelines.features import INPUT_DTYPES, INPUT_NAMES, eval_features
    folder = load_qa_folder(model_dir)
    qa_config = folder.qa_config
    example = squad.SquadExample('0', '', 'Where is the graph?', 'The graph is exported here.',
                                 [], False)
    features = eval_features([example], folder.tokenizer(),
                             qa_config['eval_max_seq_length'], qa_config['max_query_length'])
    arrays = squad.batchify(features, round_to=8)
    with mx.util.np_shape(True), mx.util.np_array(True):
        block = QAInference(load_qa_model(folder, [mx.cpu()]), start_top_n, end_top_n)
        return export_and_check(block, prefix, [[arrays[k] for k in INPUT_NAMES]], INPUT_NAMES,
                                INPUT_DTYPES)[1]


def _read(path):
    with open(path, encoding='utf-8') as handle:
        return json.load(handle)


def _link(source, target):
    if os.path.lexists(target):
        os.remove(target)
    os.symlink(os.path.abspath(source), target)


def archived_files(model_dir, graph):
    """``{path inside the archive: source file}`` of every file the archive holds besides
    serve.json: the graph, qa_config.json, the tokenizer files and the handler's code. A folder
    converted from a GluonNLP 0.10 SQuAD model (a span head) has no qa_config.json: its
    settings are written beside the graph (``<graph>-qa_config.json``) and archived with its
    ``head_config.json``."""
    files = {'graph/qa' + suffix: graph + suffix for suffix in GRAPH_SUFFIXES}
    files.update((name, os.path.join(_REPOSITORY, name)) for name in HANDLER_FILES)
    files['model/' + QA_CONFIG] = os.path.join(model_dir, QA_CONFIG)
    if is_span_folder(model_dir):
        files['model/' + QA_CONFIG] = graph + '-' + QA_CONFIG
        settings = span_qa_config(model_dir)
        if not os.path.isfile(files['model/' + QA_CONFIG]) or settings != _read(
                files['model/' + QA_CONFIG]):     # rewritten only when it changed
            atomic_write_json(files['model/' + QA_CONFIG], settings)
        files['model/' + HEAD_CONFIG] = os.path.join(model_dir, HEAD_CONFIG)
    files.update(('model/' + path.name, str(path)) for path in squad.tokenizer_files(model_dir))
    return files


def _stage(files, stage, settings):
    """Links to every file of ``files`` (and no other) and serve.json (rewritten only when it
    changed) in ``stage``; returns the newest modification time among them."""
    for sub in ('model', 'graph', 'jobs', 'jobs/serve'):
        os.makedirs(os.path.join(stage, sub), exist_ok=True)
        for name in os.listdir(os.path.join(stage, sub)):     # left by an earlier layout
            path = os.path.join(stage, sub, name)
            if '{}/{}'.format(sub, name) not in files and not os.path.isdir(path):
                os.remove(path)
    for inside, source in files.items():
        _link(source, os.path.join(stage, inside))
    sources = list(files.values())
    serve_json = os.path.join(stage, SERVE_JSON)
    old = None
    if os.path.isfile(serve_json):
        with open(serve_json, encoding='utf-8') as handle:
            old = json.load(handle)
    if old != settings:
        atomic_write_json(serve_json, settings)
    return max(os.path.getmtime(p) for p in sources + [serve_json])


def build_archive(model_dir, graph, store, name, limits, features_per_pass, threshold=None,
                  matmul_dtype='float32'):
    """Write ``<store>/<name>.mar`` unless it is newer than every file it holds.

    Parameters
    ----------
    model_dir : str
        A fine-tuned model folder (checked: ValueError naming the missing files).
    graph : str
        Prefix of its exported graph (ValueError when a file is missing).
    store : str
        The server's model store; ``<store>/../stage`` holds the links the archive is made from.
    name : str
        The model name (the archive's file name and the URL ``/predictions/<name>``).
    limits : protocol.Limits
    features_per_pass : int
        Largest number of features in one forward pass.
    threshold : float, optional
        The null threshold; None: the one saved in the model folder.
    matmul_dtype : {'float32', 'bfloat16'}
        The dtype the worker runs the graph's dense products in (``serve.json``).

    Returns
    -------
    (str, bool)
        The archive's path and whether it was (re)built.

    Raises
    ------
    ValueError
        A missing file; RuntimeError when model-archiver fails (its output in the message).
    """
    check_model_folder(model_dir, fine_tuned=True)
    if not graph_exists(graph):
        fail('--graph must be the prefix of an exported QAInference graph ({} files)'.format(
            ', '.join('<prefix>' + s for s in GRAPH_SUFFIXES)), graph=graph)
    stage = os.path.join(os.path.dirname(os.path.abspath(store)), 'stage')
    files = archived_files(model_dir, graph)
    settings = {'model': 'model', 'graph': 'graph/qa', 'features_per_pass': features_per_pass,
                'limits': dataclasses.asdict(limits), 'threshold': threshold,
                'matmul_dtype': matmul_dtype, 'files': sorted(files)}
    newest = _stage(files, stage, settings)
    path = os.path.join(store, name + '.mar')
    if os.path.isfile(path) and os.path.getmtime(path) > newest:
        return path, False
    staging = os.path.join(store, '.tmp{}'.format(os.getpid()))   # renamed into place whole
    os.makedirs(staging, exist_ok=True)
    try:
        done = subprocess.run(
            [sys.executable, '-m', 'model_archiver.model_packaging', '--model-name', name,
             '--model-path', stage, '--handler', HANDLER, '--export-path', staging, '--force'],
            capture_output=True, text=True, check=False)
        built = os.path.join(staging, name + '.mar')
        if done.returncode or not os.path.isfile(built):
            raise RuntimeError('model-archiver failed ({}): {}'.format(
                done.returncode, (done.stdout + done.stderr).strip()[-2000:]))
        os.replace(built, path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return path, True
