"""The options of the NLI job (``scripts/train_nli.py``), declared once with defaults and help.

``--help`` and ``<output-dir>/run_config.json`` are generated from :class:`NLIConfig`. Every option
but where and how the run goes (``data_dir``, ``output_dir``, ``ctx``, ``kvstore``, ``threads``,
``progress``, ``log_every``) is a recipe option
(:func:`~jobs.engine.config.recipe_option`): it shapes the trained model, and a checkpoint only resumes a run whose recipe options are all equal.
"""
import dataclasses

from gluon_attention import checks

from ..engine.common import parse_devices
from ..engine.config import option, recipe_option
from ..engine.launch import KVSTORES

__all__ = ['NLIConfig', 'check_config']


@dataclasses.dataclass
class NLIConfig:
    """Decomposable attention on SNLI: data, model sizes, optimisation and where to run."""
    data_dir: str = option('', "the data folder of the default files ('': $GA_DATA_DIR, else "
                           '../shared/data from the repository root; see docs/data.md)')
    train: str = recipe_option(
        '', "training pairs: a .jsonl(.gz) file or a one-sentence-per-line prefix such as "
            ".../esnli_infersent_format/dev ('': the e-SNLI dev pairs of the data folder, "
            'snli/esnli_infersent_format/dev)')
    valid: str = recipe_option(
        '', "validation files, comma-separated ('': the two SNLI jsonl subsets of the data "
            'folder, snli/jsonl/); their pairs are removed from the training pairs')
    glove: str = recipe_option(
        'none', "GloVe text file (.txt or .gz), 'sample' (the 100-word sample of the data "
                "folder, embeddings/glove.6B.100d.sample.txt.gz) or 'none'")
    min_count: int = recipe_option(
        1, 'a training token enters the vocabulary this many times or more')
    max_length: int = recipe_option(50, 'sentences are cut to this many tokens')
    max_train: int = recipe_option(0, 'use only the first N training pairs (0: all)')
    embed_size: int = recipe_option(100, 'word embedding size')
    num_hiddens: int = recipe_option(
        200, 'hidden size of the attend, compare and aggregate networks')
    dropout: float = recipe_option(0.2, 'dropout before every dense layer, in [0, 1)')
    epochs: int = recipe_option(6, 'passes over the training pairs')
    max_steps: int = recipe_option(0, 'stop after this many updates (0: no limit)')
    batch_size: int = recipe_option(64, 'pairs per update (batches are bucketed by length)')
    lr: float = recipe_option(1e-3, 'Adam learning rate')
    weight_decay: float = recipe_option(0.0, 'Adam weight decay')
    seed: int = recipe_option(0, 'initialisation seed; step k reseeds dropout and shuffling from '
                                 '(seed, k), so runs repeat exactly')
    output_dir: str = option('runs/nli', 'run folder: run_config.json, checkpoints/, the model '
                             '(best.params, vocab.json, config.json), metrics.json, the export; '
                             'evaluate, predict and plot-attention read the model here')
    ctx: str = option('cpu', "devices: cpu, gpu, cpu(N), gpu(N), comma-separated (data parallel)")
    kvstore: str = option(
        'device', 'gradient summation: device or local in one process; dist_sync or '
                  'dist_device_sync in a job started by scripts/launch.py (--batch-size stays '
                  'the pairs of one update, shared among the workers)', choices=KVSTORES)
    threads: int = option(0, 'OpenMP threads (0: every core); set before MXNet starts')
    progress: bool = option(True, 'show progress bars')
    log_every: int = option(0, 'print a line and add a row to <output-dir>/train_log.jsonl every '
                            'N updates (0: about 20 in the run)')


def check_config(config):
    """Raise ValueError (naming the option and its value) for a value no run can use."""
    for name in ('min_count', 'max_length', 'embed_size', 'num_hiddens', 'epochs', 'batch_size'):
        checks.check_positive_int(name, getattr(config, name))
    for name in ('max_train', 'max_steps', 'threads', 'log_every'):
        if getattr(config, name) < 0:
            checks.fail('{} must be 0 or more'.format(name), **{name: getattr(config, name)})
    if not 0 <= config.dropout < 1:
        checks.fail('dropout must lie in [0, 1)', dropout=config.dropout)
    checks.check_positive_real('lr', config.lr)
    if config.weight_decay < 0:
        checks.fail('weight_decay must be 0 or more', weight_decay=config.weight_decay)
    parse_devices(config.ctx)   # the grammar, and every GPU named exists
    return config
