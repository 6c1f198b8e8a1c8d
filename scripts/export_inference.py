#!/usr/bin/env python
"""Hybridize a gluon_attention block, export symbol + params, reload, and check parity.

Either a library block with fresh parameters (``--block``) or the fine-tuned SQuAD model of a
`run_squad.py` output folder (``--squad-run``). The export goes through
``gluon_attention.export.block.export_and_check``: the graph is built on a batch of B=2, T=12,
exported, reloaded with ``SymbolBlock.imports`` (no gluon_attention class involved) and compared
with the block on that batch and on batches of other sizes and lengths (B=3, T=7 and B=1, T=16).
The report (JSON on stdout) holds the file paths and the largest absolute difference; the exit
status is 1 when it exceeds --tolerance. With --format onnx the export is also converted to
<output-prefix>.onnx and run in ONNX Runtime on the same batches (``onnx`` in the report).
"""
import argparse
import dataclasses
import json
import os
import sys

# the repository root, for the jobs (jobs/, not part of the installed package)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

BLOCKS = ('multi_head_attention', 'dot_product', 'additive', 'bert_encoder')
SHAPES = ((2, 12), (3, 7), (1, 16))          # (B, T): the first builds the exported graph
# --format onnx: each input's axes (names are free axes, ints fixed sizes)
ONNX_AXES = {'token_ids': ('batch', 'sequence'), 'input_ids': ('batch', 'sequence'),
             'token_types': ('batch', 'sequence'), 'valid_length': ('batch',),
             'p_mask': ('batch', 'sequence'),
             'query': ('batch', 'query_length', 24), 'key': ('batch', 'memory_length', 24),
             'value': ('batch', 'memory_length', 24)}


def _config_class():
    from jobs.engine.config import option

    @dataclasses.dataclass
    class ExportConfig:
        """What to export, where, and how close the reload must be."""
        block: str = option('multi_head_attention', 'library block to export with fresh '
                            'parameters', choices=BLOCKS)
        squad_run: str = option('', 'a run_squad.py --output-dir: export its fine-tuned QA '
                                "model instead (model/, else the last checkpoint), or a model "
                                "folder itself (e.g. converted from GluonNLP 0.10; '': none)")
        output_prefix: str = option('runs/export/model', 'path prefix of the exported files')
        tolerance: float = option(1e-5, 'largest accepted absolute difference between the '
                                  'reloaded graph and the block')
        threads: int = option(0, 'OpenMP threads (0: every core); set before MXNet starts')
        seed: int = option(0, 'seed of the random parameters and inputs')
        format: str = option('mxnet', "'onnx': also write <output-prefix>.onnx (opset 13) and "
                             'compare ONNX Runtime with the block on every batch',
                             choices=('mxnet', 'onnx'))
    return ExportConfig


def _id_ranges(block):
    """(vocabulary size, token types) of the ids an encoder (or a QA graph's encoder) takes;
    no token type embedding (RoBERTa, DistilBERT): type 0 only."""
    encoder = getattr(getattr(block, 'model', None), 'backbone', block)
    config = getattr(encoder, 'config', {})
    return config.get('vocab_size', 2000), max(config.get('num_token_types', 2), 1)


def _inputs(rng, block_name, batch, length, id_ranges=(2000, 2)):
    """Positional NumPy inputs of a block at one batch size and length, with their names."""
    if block_name in ('bert_encoder', 'squad'):
        high = min(2000, id_ranges[0])
        ids = rng.randint(min(1000, high // 2), high, size=(batch, length)).astype('int32')
        types = rng.randint(0, id_ranges[1], size=(batch, length)).astype('int32')
        valid = (length - rng.randint(0, length, size=batch)).astype('int32')
        if block_name == 'bert_encoder':
            return ['token_ids', 'token_types', 'valid_length'], [ids, types, valid]
        p_mask = (rng.uniform(size=(batch, length)) < 0.8).astype('float32')
        # the input names of the SQuAD job's own export (export/qa-inputs.json)
        return ['input_ids', 'token_types', 'valid_length', 'p_mask'], [ids, types, valid, p_mask]
    query = rng.normal(size=(batch, length, 24)).astype('float32')
    memory = rng.normal(size=(batch, length + 3, 24)).astype('float32')
    valid = (length + 3 - rng.randint(0, length + 3, size=batch)).astype('int32')
    return ['query', 'key', 'value', 'valid_length'], [query, memory, memory, valid]


def _squad_model(run):
    """The fine-tuned QA model of a run_squad.py output folder: its model folder (``model/``),
    or, for a run killed before writing it, its last checkpoint over the run's encoder; or of a
    model folder given itself (e.g. one converted from a GluonNLP 0.10 SQuAD model)."""
    import mxnet as mx
    import gluon_attention as ga
    from gluon_attention.models.qa import ModelForQAConditional
    from gluon_attention.pipelines import load_qa_folder, load_qa_model
    from gluon_attention.pipelines.folder import QA_CONFIG, is_span_folder
    from jobs.engine.checkpoints import CheckpointManager
    for folder in (run, os.path.join(run, 'model')):
        if os.path.isfile(os.path.join(folder, QA_CONFIG)) or is_span_folder(folder):
            return load_qa_model(load_qa_folder(folder), [mx.cpu()])
    checkpoints = os.path.join(run, 'checkpoints')
    entry = CheckpointManager(checkpoints).latest() if os.path.isdir(checkpoints) else None
    if entry is None:
        raise SystemExit('export_inference.py: error: neither a model folder nor an intact '
                         'checkpoint in ' + run)
    with open(os.path.join(run, 'run_config.json'), encoding='utf-8') as handle:
        backbone = ga.BertEncoder.from_pretrained(json.load(handle).get('model_dir'))
    model = ModelForQAConditional(backbone, units=backbone.config['units'])
    model.initialize()
    model.load_parameters(os.path.join(checkpoints, entry['files']['params']['file']))
    return model


def _build(config):
    """The block to export and the name of its input kind."""
    import gluon_attention as ga
    if config.squad_run:
        from gluon_attention.models.qa import QAInference
        return QAInference(_squad_model(config.squad_run)), 'squad'
    block = {'multi_head_attention': lambda: ga.MultiHeadAttention(24, 4),
             'dot_product': ga.DotProductAttention,
             'additive': lambda: ga.AdditiveAttention(16),
             'bert_encoder': ga.BertEncoder.from_pretrained}[config.block]()
    block.initialize()
    return block, config.block


def main(argv=None):
    """Export, reload, compare; print the report and return the exit status."""
    import mxnet as mx
    import numpy as onp
    from jobs.engine.config import add_arguments, from_args
    from gluon_attention.export.block import export_and_check
    config_class = _config_class()
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split('\n\n', 1)[1], allow_abbrev=False)
    config = from_args(config_class, add_arguments(parser, config_class).parse_args(argv))
    mx.npx.set_np()
    mx.random.seed(config.seed)
    block, name = _build(config)
    rng = onp.random.RandomState(config.seed)
    batches = [_inputs(rng, name, batch, length, _id_ranges(block))[1]
               for batch, length in SHAPES]
    names = _inputs(rng, name, 1, 1)[0]
    _, report = export_and_check(block, config.output_prefix, batches, names,
                                 [str(x.dtype) for x in batches[0]])
    report.update(block=name, tolerance=config.tolerance,
                  ok=report['max_abs_diff'] <= config.tolerance)
    if config.format == 'onnx':
        from gluon_attention.export.onnx import check_onnx
        report['onnx'] = check_onnx(block, config.output_prefix, batches,
                                    [ONNX_AXES[n] for n in names])
        report['ok'] &= report['onnx']['max_abs_diff'] <= config.tolerance
    print(json.dumps(report, indent=2))
    return 0 if report['ok'] else 1


if __name__ == '__main__':
    from _threads import threads_before_mxnet   # scripts/_threads.py, before MXNet starts
    threads_before_mxnet()
    sys.exit(main())
