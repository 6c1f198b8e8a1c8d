"""One (model, T) of the ``bert_models`` rows in a process of its own.

:func:`jobs.bench.bert_models.run_worker` (the parent) starts ``python -m jobs.bench.bert_worker
SPEC`` from the repository root and returns the rows it prints; the child (:func:`shape_rows`)
builds the 0.10 model and its conversion into the spec's folder unless an earlier child of the
same model left them there, times the rows of :func:`jobs.bench.bert_models.runner_factories`
(and, at BERT-base with ``onnx`` given, those of :func:`jobs.bench.bert_onnx.onnx_factories`)
interleaved, and prints them as one JSON line. A process per (model, T) frees every static graph
of a shape before the next one is built: in one process BERT-base and BERT-large together
reached about 20 GB.
"""
import json
import os
import sys

__all__ = ['shape_rows', 'main']


def shape_rows(spec):
    """The rows of one (model, T) in this process (see
    :func:`jobs.bench.bert_models.run_worker` for ``spec``)."""
    # pylint: disable=import-outside-toplevel
    from gluon_attention.core.matmul import bfloat16_problem
    from . import bert_models as bench
    from .gluonnlp010 import gluonnlp_bert
    folder, model = spec['folder'], spec['model']
    paths = (os.path.join(folder, 'net.params'), os.path.join(folder, 'ours'))
    if not os.path.isfile(os.path.join(paths[1], 'config.json')):
        paths = gluonnlp_bert(model, spec['size'], spec['vocab_size'], folder)
    problem = bfloat16_problem()
    if problem is not None:
        print('bert_models: no ours_bfloat16 rows: {}'.format(problem))
    made = bench.runner_factories(model, spec['size'], spec['vocab_size'], paths,
                                  spec['length'], problem is None, spec['int8'])
    if spec.get('onnx') and model == bench.MODELS[0]:
        from .bert_onnx import onnx_factories
        more, skipped = onnx_factories(paths[1], folder, spec['length'], spec['vocab_size'],
                                       **spec['onnx'])
        made.update(more)
        for line in skipped:
            print(line)
    medians = bench.shape_medians(made, spec['rounds'], spec['one_at_a_time'])
    print('bert_models {} T={} done'.format(model, spec['length']))
    return bench.rows_of(bench.CONFIG, model, (bench.BATCH, spec['length']), 'infer', medians,
                         bench.BATCH, 'features/s')


def main(argv=None):
    """``python -m jobs.bench.bert_worker SPEC``: prints the rows as
    :data:`jobs.bench.bert_models.ROWS_LINE` + JSON."""
    spec = json.loads((argv or sys.argv[1:])[0])
    import mxnet as mx  # pylint: disable=import-outside-toplevel
    mx.npx.set_np()
    from . import bert_models as bench  # pylint: disable=import-outside-toplevel
    rows = shape_rows(spec)
    print(bench.ROWS_LINE + json.dumps(rows), flush=True)


if __name__ == '__main__':
    main()
