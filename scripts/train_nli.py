#!/usr/bin/env python
"""Train, evaluate and export decomposable attention (Parikh et al., 2016) on real SNLI data.

Default run (no arguments; the data ships inside the package): train on the SNLI dev pairs of the
e-SNLI line-format files minus the pairs that occur in the two SNLI 1.0 jsonl subsets (matched on
normalized text), validate on the 2,527 labelled jsonl pairs, keep the best checkpoint, write
``metrics.json``, export the hybridized model and check that the reloaded ``SymbolBlock`` agrees.

Data paths: a ``*.jsonl`` (or ``.jsonl.gz``) file is read as SNLI 1.0 jsonl; anything else is the
one-sentence-per-line format given as the folder plus the split name, i.e. the common prefix of
``s1.X``/``s2.X``/``labels.X`` without ``s1.``: ``.../esnli_infersent_format/dev`` for ``s1.dev``.

Other modes (they load ``--model-dir`` instead of training):
  --evaluate PATH            score PATH (either format), write <model-dir>/eval_metrics.json
  --predict PREMISE HYPOTHESIS   print the label and the three probabilities
  --plot-attention N         heat maps of the alignment of N validation pairs -> attention.png
"""
import argparse
import json
import os
import re
import time
from pathlib import Path


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split('\n\n', 1)[1])
    data = parser.add_argument_group('data')
    data.add_argument('--train', help='training data (default: packaged e-SNLI dev prefix)')
    data.add_argument('--valid', nargs='+', help='validation files (default: packaged jsonl)')
    data.add_argument('--glove', default='none',
                      help="GloVe text file (.txt or .gz), 'sample' (the packaged 100-word sample) "
                           "or 'none' (default: the sample slows learning here, docs/nli.md)")
    data.add_argument('--min-count', type=int, default=1, help='vocabulary min count')
    data.add_argument('--max-length', type=int, default=50, help='truncate sentences (tokens)')
    data.add_argument('--max-train', type=int, help='use only the first N training pairs')
    model = parser.add_argument_group('model and training')
    model.add_argument('--embed-size', type=int, default=100)
    model.add_argument('--num-hiddens', type=int, default=200)
    model.add_argument('--dropout', type=float, default=0.2)
    model.add_argument('--epochs', type=int, default=6)
    model.add_argument('--max-steps', type=int, help='stop after this many updates (smoke runs)')
    model.add_argument('--batch-size', type=int, default=64)
    model.add_argument('--lr', type=float, default=1e-3, help='Adam learning rate')
    model.add_argument('--weight-decay', type=float, default=0.0)
    model.add_argument('--seed', type=int, default=0,
                       help='every step reseeds MXNet from (seed, step): runs are repeatable')
    run = parser.add_argument_group('run')
    run.add_argument('--model-dir', default='runs/nli', help='checkpoints, metrics, export')
    run.add_argument('--ctx', default='cpu', help="devices, e.g. 'cpu', 'gpu0', 'gpu0,gpu1'")
    run.add_argument('--threads', type=int, default=os.cpu_count(),
                     help='OMP_NUM_THREADS, set before MXNet is imported')
    run.add_argument('--evaluate', metavar='PATH', help='score a saved model on PATH')
    run.add_argument('--output', help='metrics file for --evaluate')
    run.add_argument('--predict', nargs=2, metavar=('PREMISE', 'HYPOTHESIS'))
    run.add_argument('--plot-attention', type=int, metavar='N', default=0)
    run.add_argument('--no-progress', action='store_true', help='hide the progress bars')
    return parser.parse_args(argv)


def parse_ctx(spec):
    """'cpu' / 'gpu0,gpu1' / 'cpu,cpu' -> contexts (repeated cpus get distinct ids: Trainer needs it)."""
    import mxnet as mx
    devices = []
    for name in spec.split(','):
        match = re.fullmatch(r'(cpu|gpu)(\d*)', name.strip())
        if not match:
            raise ValueError("--ctx must list cpu or gpuN devices. Received: ctx={!r}".format(spec))
        kind, index = match.groups()
        number = int(index) if index else sum(d.device_type == kind for d in devices)
        devices.append(mx.cpu(number) if kind == 'cpu' else mx.gpu(number))
    return devices


def save_json(path, obj):
    tmp = Path(str(path) + '.tmp')
    tmp.write_text(json.dumps(obj, indent=2, ensure_ascii=False), encoding='utf-8')
    os.replace(tmp, path)


def read_pairs(snli, path):
    """``snli.read_snli(path)``; a missing or malformed file ends the run with a one-line error
    naming the file, the record and what is wrong (exit status 1), before anything is written."""
    try:
        return snli.read_snli(path)
    except (ValueError, OSError) as err:
        raise SystemExit('train_nli.py: error: {}'.format(err)) from None


def load_data(args, snli):
    paths = snli.default_paths()
    valid = snli.concat_pairs([read_pairs(snli, p) for p in (args.valid or paths['valid'])])
    train = read_pairs(snli, args.train or paths['train'])
    train, removed = snli.remove_overlap(train, valid)
    if args.max_train:
        train = snli.NLIPairs(train.premises[:args.max_train], train.hypotheses[:args.max_train],
                              train.labels[:args.max_train], train.num_skipped, train.source)
    return train, valid, removed


def load_model(model_dir, ctx):
    from gluon_attention.data import snli
    from gluon_attention.models.nli import DecomposableAttention
    config = json.loads((Path(model_dir) / 'config.json').read_text())
    vocab = snli.Vocab.load(Path(model_dir) / 'vocab.json')
    model = DecomposableAttention(len(vocab), **config['model'])
    model.load_parameters(str(Path(model_dir) / 'best.params'), ctx=ctx)
    return model, vocab, config


def train(args, ctx, out):
    import mxnet as mx
    import numpy as onp
    from tqdm import tqdm
    from gluon_attention.tasks import nli
    from gluon_attention.data import glove as glove_io
    from gluon_attention.data import snli
    from gluon_attention.models.nli import DecomposableAttention
    train_pairs, valid_pairs, removed = load_data(args, snli)
    print('train: {} pairs ({} removed: also in the validation files); valid: {} pairs '
          '({} "-" skipped)'.format(len(train_pairs), removed, len(valid_pairs),
                                    valid_pairs.num_skipped))
    vocab = snli.Vocab.from_pairs(train_pairs, min_count=args.min_count)
    encoded = snli.encode_pairs(train_pairs, vocab, args.max_length)
    valid_encoded = snli.encode_pairs(valid_pairs, vocab, args.max_length)
    majority = int(onp.bincount(encoded[2], minlength=3).argmax())
    config = {'model': {'embed_size': args.embed_size, 'num_hiddens': args.num_hiddens,
                        'dropout': args.dropout},
              'max_length': args.max_length, 'majority_label': majority, 'args': vars(args)}
    vocab.save(out / 'vocab.json')
    save_json(out / 'config.json', config)

    mx.random.seed(args.seed)
    model = DecomposableAttention(len(vocab), **config['model'])
    model.initialize(mx.init.Xavier(), ctx=ctx)
    coverage = None
    if args.glove.lower() != 'none':
        glove = snli.default_paths()['glove'] if args.glove == 'sample' else args.glove
        counts = {}
        for sentence in train_pairs.premises + train_pairs.hypotheses:
            for token in snli.tokenize(sentence):
                counts[token] = counts.get(token, 0) + 1
        coverage = glove_io.load_glove_embedding(model.embedding, glove, vocab.idx_to_token, counts)
        print('GloVe: {found}/{vocab_size} vocabulary rows ({coverage:.1%}), {token_coverage:.1%} '
              'of training tokens'.format(**coverage))
    model.hybridize()
    trainer = mx.gluon.Trainer(model.collect_params(), 'adam',
                               {'learning_rate': args.lr, 'wd': args.weight_decay})
    loss_fn = mx.gluon.loss.SoftmaxCrossEntropyLoss()
    history, best, step, start = [], -1.0, 0, time.time()
    for epoch in range(args.epochs):
        batches = list(snli.iter_batches(encoded, args.batch_size, onp.random.default_rng([args.seed, epoch])))
        total_loss = correct = seen = 0
        bar = tqdm(batches, desc='epoch {}'.format(epoch + 1), disable=args.no_progress)
        for batch in bar:
            mx.random.seed((args.seed * 1000003 + step) % (2 ** 31))   # dropout from (seed, step)
            parts = [mx.gluon.utils.split_and_load(onp.asarray(x, 'int32'), ctx, even_split=False)
                     for x in batch[:5]]
            with mx.autograd.record():
                logits = [model(*inputs[:4]) for inputs in zip(*parts)]
                losses = [loss_fn(o, y) for o, y in zip(logits, parts[4])]
            mx.autograd.backward(losses)
            trainer.step(len(batch.labels))
            step += 1
            total_loss += sum(float(l.sum()) for l in losses)
            correct += sum(int((o.argmax(axis=1).astype('int32') == y).sum())
                           for o, y in zip(logits, parts[4]))
            seen += len(batch.labels)
            bar.set_postfix(loss='{:.3f}'.format(total_loss / seen), acc='{:.3f}'.format(correct / seen))
            if args.max_steps and step >= args.max_steps:
                break
        logits = nli.predict_logits(model, snli.iter_batches(valid_encoded, 256),
                                    len(valid_pairs), ctx[0])
        accuracy = float(onp.mean(logits.argmax(1) == valid_encoded[2]))
        history.append({'epoch': epoch + 1, 'steps': step, 'train_loss': total_loss / seen,
                        'train_accuracy': correct / seen, 'valid_accuracy': accuracy,
                        'elapsed_s': round(time.time() - start, 1)})
        print('epoch {epoch}: train loss {train_loss:.4f} acc {train_accuracy:.4f} | valid acc '
              '{valid_accuracy:.4f} | {elapsed_s}s'.format(**history[-1]))
        if accuracy > best:
            best = accuracy
            model.save_parameters(str(out / 'best.params.tmp'))
            os.replace(out / 'best.params.tmp', out / 'best.params')   # atomic: never half-written
        if args.max_steps and step >= args.max_steps:
            break

    model, vocab, config = load_model(out, ctx[0])
    valid_batches = list(snli.iter_batches(valid_encoded, 256))
    reloaded, diff = nli.export_and_reload(model, str(out / 'model'), valid_batches, ctx[0])
    logits = nli.predict_logits(model, valid_batches, len(valid_pairs), ctx[0])
    reloaded_logits = nli.predict_logits(reloaded, valid_batches, len(valid_pairs), ctx[0])
    metrics = snli.classification_metrics(valid_encoded[2], logits.argmax(1), majority)
    metrics.update({
        'data': {'train': train_pairs.source, 'valid': valid_pairs.source,
                 'train_pairs': len(train_pairs), 'removed_overlap': removed,
                 'valid_skipped_dash': valid_pairs.num_skipped, 'vocab_size': len(vocab),
                 'train_label_counts': train_pairs.label_counts()},
        'glove': coverage, 'history': history,
        'best_epoch': max(history, key=lambda h: h['valid_accuracy'])['epoch'],
        'export': {'prefix': str(out / 'model'), 'max_abs_logit_diff': diff,
                   'same_predictions': bool((reloaded_logits.argmax(1) == logits.argmax(1)).all())},
        'train_wall_time_s': round(time.time() - start, 1)})
    save_json(out / 'metrics.json', metrics)
    print('valid accuracy {:.4f} (majority-class baseline {:.4f}, {}); macro F1 {:.4f}; export '
          'parity max |diff| {:.2e}'.format(metrics['accuracy'], metrics['majority_baseline']['accuracy'],
                                            metrics['majority_baseline']['label'],
                                            metrics['macro_f1'], diff))
    return metrics


def evaluate(args, ctx):
    from gluon_attention.tasks import nli
    from gluon_attention.data import glove as glove_io
    from gluon_attention.data import snli
    model, vocab, config = load_model(args.model_dir, ctx)
    pairs = read_pairs(snli, args.evaluate)
    encoded = snli.encode_pairs(pairs, vocab, config['max_length'])
    logits = nli.predict_logits(model, snli.iter_batches(encoded, 256), len(pairs), ctx)
    metrics = snli.classification_metrics(encoded[2], logits.argmax(1), config['majority_label'])
    metrics.update({'data': pairs.source, 'skipped_dash': pairs.num_skipped})
    output = Path(args.output or Path(args.model_dir) / 'eval_metrics.json')
    save_json(output, metrics)
    print('{}: {} pairs, accuracy {:.4f} (majority-class baseline {:.4f}) -> {}'.format(
        pairs.source, len(pairs), metrics['accuracy'], metrics['majority_baseline']['accuracy'],
        output))
    return metrics


def predict(args, ctx):
    import numpy as onp
    from gluon_attention.tasks import nli
    from gluon_attention.data import glove as glove_io
    from gluon_attention.data import snli
    model, vocab, config = load_model(args.model_dir, ctx)
    pairs = snli.NLIPairs([args.predict[0]], [args.predict[1]], [0])
    logits = nli.predict_logits(model, snli.iter_batches(snli.encode_pairs(pairs, vocab), 1), 1, ctx)[0]
    probs = onp.exp(logits - logits.max()) / onp.exp(logits - logits.max()).sum()
    print(snli.LABELS[int(probs.argmax())], ' '.join(
        '{}={:.4f}'.format(name, p) for name, p in zip(snli.LABELS, probs)))
    return dict(zip(snli.LABELS, probs.tolist()))


def plot_attention(args, ctx):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    import mxnet as mx
    from gluon_attention.data import snli
    model, vocab, config = load_model(args.model_dir, ctx)
    valid = snli.concat_pairs([snli.read_snli(p) for p in (args.valid or snli.default_paths()['valid'])])
    count = min(args.plot_attention, len(valid))
    fig, axes = plt.subplots(1, count, figsize=(5 * count, 5), squeeze=False)
    for k, ax in enumerate(axes[0]):
        one = snli.NLIPairs(valid.premises[k:k + 1], valid.hypotheses[k:k + 1], valid.labels[k:k + 1])
        batch = next(snli.iter_batches(snli.encode_pairs(one, vocab, config['max_length']), 1))
        inputs = [mx.np.array(x, dtype='int32', ctx=ctx) for x in batch[:4]]
        weights = model.alignment(*inputs)[0][0].asnumpy()   # (L_p, L_h), rows sum to 1
        ax.imshow(weights, cmap='viridis', vmin=0, vmax=1)
        premise = snli.tokenize(valid.premises[k])[:weights.shape[0]]
        hypothesis = snli.tokenize(valid.hypotheses[k])[:weights.shape[1]]
        ax.set_yticks(range(len(premise)), premise)
        ax.set_xticks(range(len(hypothesis)), hypothesis, rotation=90)
        ax.set_title('gold: {}'.format(snli.LABELS[valid.labels[k]]))
    fig.tight_layout()
    path = Path(args.model_dir) / 'attention.png'
    fig.savefig(path, dpi=80)
    print('wrote', path)
    return path


def main(argv=None):
    args = parse_args(argv)
    if args.threads:
        os.environ['OMP_NUM_THREADS'] = str(args.threads)   # must precede the MXNet import
    import mxnet as mx
    mx.npx.set_np()
    ctx = parse_ctx(args.ctx)
    if args.evaluate:
        return evaluate(args, ctx[0])
    if args.predict:
        return predict(args, ctx[0])
    if args.plot_attention:
        return plot_attention(args, ctx[0])
    out = Path(args.model_dir)
    out.mkdir(parents=True, exist_ok=True)
    return train(args, ctx, out)


if __name__ == '__main__':
    main()
