"""The model archive (``.mar``) that Multi Model Server loads: the fine-tuned model folder, its
exported inference graph and ``serve.json``, with :mod:`~gluon_attention.tasks.serve.handler` as
the handler.

Layout inside the archive: ``model/`` (the folder's files), ``graph/qa-symbol.json``,
``graph/qa-0000.params``, ``graph/qa-inputs.json``, ``serve.json`` and the archiver's
``MAR-INF/MANIFEST.json``. The archive is written by ``model-archiver`` (the ``[serve]`` extra)
from a staging folder of links, and rebuilt only when a file it holds, or ``serve.json``, changed.
"""
import dataclasses
import json
import os
import shutil
import subprocess
import sys

from ..._checks import fail
from ..engine.common import atomic_write_json
from ..squad.folder import TOKENIZER_FILES, check_model_folder
from .protocol import SERVE_JSON

__all__ = ['HANDLER', 'GRAPH_SUFFIXES', 'default_graph', 'graph_exists', 'export_graph',
           'build_archive']

HANDLER = 'gluon_attention.tasks.serve.handler:handle'
GRAPH_SUFFIXES = ('-symbol.json', '-0000.params', '-inputs.json')
_MODEL_FILES = ('config.json', 'model.safetensors', 'qa_head.safetensors', 'qa_config.json')


def default_graph(model_dir):
    """Where ``run_squad.py train`` exports the graph of ``<run>/model``: ``<run>/export/qa``."""
    return os.path.join(os.path.dirname(os.path.abspath(model_dir)), 'export', 'qa')


def graph_exists(prefix):
    return all(os.path.isfile(prefix + suffix) for suffix in GRAPH_SUFFIXES)


def export_graph(model_dir, prefix, start_top_n=5, end_top_n=5):
    """Export the ``QAInference`` graph of a fine-tuned model folder to ``prefix`` (checked
    against the block after reloading, as the train run's own export is).

    Returns the export report of :func:`~gluon_attention.tasks.export.export_and_check`.
    """
    # late imports: only a server whose graph is missing builds the model in this process
    # pylint: disable=import-outside-toplevel
    import mxnet as mx
    from ...data import squad
    from ...models.qa import QAInference
    from ..export.block import export_and_check
    from ..squad.folder import read_qa_config
    from ..squad.data import INPUT_DTYPES, INPUT_NAMES, eval_features
    from ...models.encoder import BertEncoder
    from ..squad.folder import load_qa_model
    from ..squad.predict import pair_example
    qa_config = read_qa_config(model_dir)
    model = load_qa_model(model_dir, BertEncoder.from_pretrained(model_dir, ctx=[mx.cpu()]),
                          [mx.cpu()])[0]
    block = QAInference(model, start_top_n, end_top_n)
    block.hybridize(static_alloc=True)
    features = eval_features([pair_example('Where is the graph?', 'The graph is exported here.')],
                             squad.load_tokenizer(model_dir), qa_config['eval_max_seq_length'],
                             qa_config['max_query_length'])
    arrays = squad.batchify(features, round_to=8)
    return export_and_check(block, prefix, [[arrays[k] for k in INPUT_NAMES]], INPUT_NAMES,
                            INPUT_DTYPES)[1]


def _link(source, target):
    if os.path.lexists(target):
        os.remove(target)
    os.symlink(os.path.abspath(source), target)


def _stage(model_dir, graph, stage, settings):
    """Links to every file the archive holds, and serve.json (rewritten only when it changed);
    returns the newest modification time among them."""
    for sub in ('model', 'graph'):
        os.makedirs(os.path.join(stage, sub), exist_ok=True)
    sources = [(os.path.join(model_dir, name), os.path.join(stage, 'model', name))
               for name in _MODEL_FILES + TOKENIZER_FILES
               if os.path.isfile(os.path.join(model_dir, name))]
    sources += [(graph + suffix, os.path.join(stage, 'graph', 'qa' + suffix))
                for suffix in GRAPH_SUFFIXES]
    for source, target in sources:
        _link(source, target)
    serve_json = os.path.join(stage, SERVE_JSON)
    old = None
    if os.path.isfile(serve_json):
        with open(serve_json, encoding='utf-8') as handle:
            old = json.load(handle)
    if old != settings:
        atomic_write_json(serve_json, settings)
    return max(os.path.getmtime(p) for p in [s for s, _ in sources] + [serve_json])


def build_archive(model_dir, graph, store, name, limits, features_per_pass, threshold=None):
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
    settings = {'model': 'model', 'graph': 'graph/qa', 'features_per_pass': features_per_pass,
                'limits': dataclasses.asdict(limits), 'threshold': threshold}
    newest = _stage(model_dir, graph, stage, settings)
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
