"""scripts/compare_transformers.py at tiny sizes: the feature file read back as written, both
sides fed the same batches, each side decoded its own way, and our v1.1 scorer against the
official definitions.

A random 1-layer encoder with the real tokenizer (squad_tiny.py), two SQuAD 1.1 articles to train
on and two to evaluate; the PyTorch side runs only where ``.venv-peer`` (make bench) or this
interpreter has torch and transformers, and is skipped otherwise.
"""
import collections
import functools
import importlib.util
import json
import math
import os
import re
import string
import subprocess
import sys

import numpy as onp
import pytest

from conftest import squad_file
from gluon_attention.data import squad
from jobs.bench import compare, compare_runs, compare_score
from jobs.engine.loop import linear_warmup_decay
from jobs.squad.config import TrainConfig
from jobs.squad.data import eval_stride, load_training_features
from jobs.squad.loop import schedule

from squad_tiny import ROOT, make_tiny_bert

SIZES = dict(max_seq_length=64, doc_stride=24, eval_max_seq_length=96, max_query_length=16)


def _load_script(name):
    spec = importlib.util.spec_from_file_location(name, str(ROOT / 'scripts' / (name + '.py')))
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(ROOT / 'scripts'))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(ROOT / 'scripts'))
    return module


@functools.lru_cache(maxsize=None)
def _peer_python():
    """``.venv-peer``'s interpreter (make bench), else this one, if it finds torch and
    transformers (looked up, not imported: importing them takes seconds); None otherwise."""
    found = ('import importlib.util as u; '
             'exit(not (u.find_spec("torch") and u.find_spec("transformers")))')
    for python in (str(ROOT / '.venv-peer' / 'bin' / 'python'), sys.executable):
        if os.path.exists(python) and subprocess.run([python, '-c', found]).returncode == 0:
            return python
    return None


def _subset(path, out, keep):
    """A SQuAD file with the first paragraphs of some articles: keep = {title: paragraphs}."""
    raw = json.loads(path.read_text(encoding='utf-8'))
    data = [dict(a, paragraphs=a['paragraphs'][:keep[a['title']]]) for a in raw['data']
            if a['title'] in keep]
    out.write_text(json.dumps({'version': '1.1', 'data': data}), encoding='utf-8')
    return out


@pytest.fixture(scope='module')
def tiny(tmp_path_factory):
    """The tiny encoder, files, and the feature file written by the script's ``features``."""
    folder = tmp_path_factory.mktemp('compare')
    articles = squad_file('v1.1-24articles')
    train = _subset(articles, folder / 'train.json', {'Warsaw': 2, 'Teacher': 1})
    dev = _subset(articles, folder / 'dev.json', {'Oxygen': 1, 'Geology': 1})
    first = len(squad.read_squad(dev, titles=['Oxygen']))
    model = make_tiny_bert(folder / 'bert')
    path = folder / 'features.npz'
    argv = ['features', '--output', str(path), '--train-file', str(train), '--dev-file',
            str(dev), '--exclude-titles', '', '--max-dev-questions', str(first + 1),
            '--seeds', '3,4', '--batch', '4', '--model-dir', model]
    argv += [s for k, v in SIZES.items() for s in ('--' + k.replace('_', '-'), str(v))]
    assert _load_script('compare_transformers').main(argv) == 0
    return {'folder': folder, 'train': train, 'dev': dev, 'model': model, 'path': str(path),
            'dev_questions': first}


def test_feature_file_reads_back_what_the_job_builds(tiny):
    data = compare.read_feature_file(tiny['path'])
    # dev: whole articles in file order, at most --max-dev-questions questions
    examples = squad.read_squad(tiny['dev'], titles=['Oxygen'])
    assert data['examples'] == examples and len(examples) == tiny['dev_questions']
    tokenizer = squad.load_tokenizer(tiny['model'])
    dev = squad.convert_examples_to_features(examples, tokenizer, 96, eval_stride(96, 16), 16,
                                             is_training=False)
    assert data['dev'] == dev
    config = TrainConfig(train_file=str(tiny['train']), extra_train_file='', exclude_titles='',
                         threshold_titles='', version_2_with_negative=0, max_seq_length=64,
                         doc_stride=24, max_query_length=16)
    features, _ = load_training_features(config, tokenizer)
    assert len(data['train']) == len(features) == data['meta']['train_features']
    expected, read = squad.batchify(features), squad.batchify(data['train'])
    assert expected.keys() == read.keys()
    for key, value in expected.items():
        onp.testing.assert_array_equal(read[key], value, err_msg=key)
    for seed in (3, 4):
        steps = schedule(features, TrainConfig(seed=seed, batch_size=4, max_steps=0))
        assert len(data['schedules'][seed]) == len(steps) == math.ceil(len(features) / 4)
        assert all(onp.array_equal(a, b) for a, b in zip(data['schedules'][seed], steps))
    assert data['meta']['recipes']['ours']['lr'] == TrainConfig().lr
    assert data['meta']['recipes']['theirs']['lr'] == 3e-5


def _run(tiny, side, recipe='ours'):
    run = compare_runs.RunConfig(
        features=tiny['path'], output_dir=str(tiny['folder'] / '{}-{}'.format(side, recipe)),
        seed=4, steps=2, batch=4, recipe=recipe, peer_python=_peer_python() or 'none',
        peer_script=str(ROOT / 'scripts' / 'compare_transformers_peer.py'))
    return (compare_runs.run_ours if side == 'ours' else compare_runs.run_theirs)(run)


def _batches(record, tiny):
    folder = tiny['folder'] / '{}-{}'.format(record['side'], record['recipe'])
    with onp.load(folder / 'batches.npz') as saved:
        return [saved['index'][a:b] for a, b in zip(saved['offsets'][:-1], saved['offsets'][1:])]


def test_both_sides_train_on_the_same_batches_and_are_scored(tiny):
    ours = _run(tiny, 'ours')
    data = compare.read_feature_file(tiny['path'])
    stored = data['schedules'][4][:2]
    assert all(onp.array_equal(a, b) for a, b in zip(_batches(ours, tiny), stored))
    assert ours['features_trained'] == sum(len(b) for b in stored)
    assert ours['batch_digest'] == compare_runs.batch_digest(data['train'], stored)
    folders = [str(tiny['folder'] / 'ours-ours')]
    if _peer_python() is None:
        print('PyTorch side skipped: no interpreter with torch and transformers (make bench)')
    else:
        theirs = _run(tiny, 'theirs')
        assert theirs['batch_digest'] == ours['batch_digest']      # the arrays each side fed
        assert all(onp.array_equal(a, b) for a, b in zip(_batches(theirs, tiny), stored))
        folders.append(str(tiny['folder'] / 'theirs-ours'))
    results = compare_score.score_runs(tiny['path'], folders, str(tiny['folder'] / 'table'))
    assert list(results['same_batches'].values()) == [True]
    for run in results['runs']:
        predictions = json.loads((tiny['folder'] / 'table' / '..' / os.path.basename(
            run['folder']) / 'predictions.json').read_text())
        assert run == dict(run, **compare_score.score_predictions(data['examples'], predictions))
    table = (tiny['folder'] / 'table' / 'table.md').read_text()
    assert len([line for line in table.splitlines() if line.startswith('|')]) == 2 + 2 * len(
        folders)
    assert ('(a: the same recipe (ours), 2 x 4: F1 ours - theirs' in table) == (len(folders) == 2)


def _official_v11(examples, predictions):
    """The official SQuAD v1.1 evaluation definitions, written out here (float64)."""
    def normalize(text):
        text = ''.join(ch for ch in text.lower() if ch not in set(string.punctuation))
        return ' '.join(re.sub(r'\b(a|an|the)\b', ' ', text).split())

    def f1(prediction, truth):
        pred, gold = normalize(prediction).split(), normalize(truth).split()
        common = sum((collections.Counter(pred) & collections.Counter(gold)).values())
        if common == 0:
            return 0.0
        precision, recall = common / len(pred), common / len(gold)
        return 2 * precision * recall / (precision + recall)

    em = [max(float(normalize(predictions[e.qas_id]) == normalize(t)) for t, _ in e.answers)
          for e in examples]
    f1s = [max(f1(predictions[e.qas_id], t) for t, _ in e.answers) for e in examples]
    return 100.0 * sum(em) / len(em), 100.0 * sum(f1s) / len(f1s)


def test_scorer_gives_the_official_v11_scores():
    context = 'The Norman conquest of England began in 1066 under William the Conqueror.'
    def example(qid, *answers):
        return squad.SquadExample(qid, 't', 'q', context,
                                  [(a, context.index(a)) for a in answers], False)
    examples = [example('a', 'William the Conqueror', 'William'),
                example('b', 'in 1066', '1066'), example('c', 'The Norman conquest'),
                example('d', 'England', 'conquest of England')]
    predictions = {'a': 'the Conqueror', 'b': '1066.', 'c': 'Norman conquest of England',
                   'd': 'began in 1066'}
    exact, f1 = _official_v11(examples, predictions)
    scores = compare_score.score_predictions(examples, predictions)
    assert scores['exact'] == pytest.approx(exact) and scores['f1'] == pytest.approx(f1)
    assert scores['total'] == 4 and 0 < exact < f1 < 100


def test_their_outputs_decode_to_the_best_top_n_pair(tiny):
    """Independent start/end logits -> the best start + end over every chunk of a question,
    starts and ends each among the chunk's top n, inside the context, at most 30 tokens."""
    data = compare.read_feature_file(tiny['path'], train=False)
    rng = onp.random.RandomState(0)
    width = max(f.valid_length for f in data['dev'])
    outputs = {k: rng.normal(size=(len(data['dev']), width)).astype('float32')
               for k in ('start_logits', 'end_logits')}
    for n_best, longest in ((20, 30), (3, 4)):
        final = compare_score.decode_run('theirs', outputs, data['examples'], data['dev'],
                                         n_best, longest)
        best = {}
        for i, f in enumerate(data['dev']):
            start, end = (outputs[k][i, :f.valid_length] for k in ('start_logits', 'end_logits'))
            tops = [set(onp.argsort(-x, kind='stable')[:n_best].tolist()) for x in (start, end)]
            low, high = f.context_range
            for s in tops[0]:
                for e in tops[1]:
                    if low <= s <= e < min(high, s + longest):
                        score = float(start[s]) + float(end[e])
                        text = data['examples'][f.example_index].context[
                            f.token_to_char[s - low][0]:f.token_to_char[e - low][1]]
                        if score > best.get(f.qas_id, (-math.inf,))[0]:
                            best[f.qas_id] = (score, text)
        assert final == {qid: best[qid][1] if qid in best else ''
                         for qid in (e.qas_id for e in data['examples'])}


def test_the_peer_schedule_is_ours():
    peer = _load_script('compare_transformers_peer')
    for total, ratio in ((1, 0.1), (7, 0.0), (20, 0.1), (33, 0.25)):
        assert [peer.our_rate(s, total, 2e-4, ratio) for s in range(total)] == pytest.approx(
            [linear_warmup_decay(s, total, 2e-4, ratio) for s in range(total)], rel=1e-12)


def test_the_peer_applies_our_adamw_update(tmp_path):
    """Three steps of the peer's AdamW (torch) against our optimizer (MXNet), same gradients."""
    python = _peer_python()
    if python is None:
        pytest.skip('no interpreter with torch and transformers (make bench creates .venv-peer)')
    import mxnet as mx
    from jobs.engine import optim  # noqa: F401 (registers 'adamw')
    rng = onp.random.RandomState(1)
    weights = {'w': rng.normal(size=(3, 5)), 'bias': rng.normal(size=(5,))}
    grads = [{k: rng.normal(size=v.shape) for k, v in weights.items()} for _ in range(3)]
    recipe = {'lr': 0.1, 'warmup_ratio': 0.5, 'weight_decay': 0.3, 'adam_epsilon': 1e-6}
    onp.savez(tmp_path / 'in.npz', **{'{}/{}'.format(i, k): g for i, step in enumerate(grads)
                                      for k, g in step.items()}, **weights)
    code = ('import sys, json, importlib.util, numpy as np, torch\n'
            'spec = importlib.util.spec_from_file_location("p", sys.argv[1])\n'
            'p = importlib.util.module_from_spec(spec); spec.loader.exec_module(p)\n'
            'd = np.load(sys.argv[2])\n'
            'named = [(k, torch.nn.Parameter(torch.tensor(d[k], dtype=torch.float32)))'
            ' for k in ("w", "bias")]\n'
            'update = p.our_optimizer(torch, named, json.loads(sys.argv[3]), 3)\n'
            'for s in range(3):\n'
            '    for k, w in named:\n'
            '        w.grad = torch.tensor(d["%d/%s" % (s, k)], dtype=torch.float32)\n'
            '    update(s)\n'
            'np.savez(sys.argv[4], **{k: w.detach().numpy() for k, w in named})\n')
    subprocess.run([python, '-c', code, str(ROOT / 'scripts' / 'compare_transformers_peer.py'),
                    str(tmp_path / 'in.npz'), json.dumps(recipe), str(tmp_path / 'out.npz')],
                   check=True, env=dict(os.environ, OMP_NUM_THREADS='1'), timeout=120)
    optimizer = mx.optimizer.create('adamw', learning_rate=0.1, wd=0.3, epsilon=1e-6)
    optimizer.idx2name = {0: 'w', 1: 'bias'}
    ours = {k: mx.nd.array(v) for k, v in weights.items()}
    states = {k: optimizer.create_state(i, ours[k]) for i, k in enumerate(('w', 'bias'))}
    for s, step in enumerate(grads):
        optimizer.set_learning_rate(linear_warmup_decay(s, 3, 0.1, 0.5))
        for i, k in enumerate(('w', 'bias')):
            optimizer.update(i, ours[k], mx.nd.array(step[k]), states[k])
    with onp.load(tmp_path / 'out.npz') as theirs:
        for k in ('w', 'bias'):
            onp.testing.assert_allclose(theirs[k], ours[k].asnumpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('argv, message', [
    (['ours', '--seed', '9', '--steps', '2', '--batch', '4'],
     r'expected a seed and batch whose order the feature file holds.*seed=9'),
    (['ours', '--seed', '3', '--steps', '999', '--batch', '4'], r'--steps must lie in \[1, \d+\]'),
    (['ours', '--seed', '3', '--steps', '2', '--batch', '8'], r'stored_batch=4'),
    (['theirs', '--seed', '3', '--steps', '2', '--batch', '4', '--peer-python', 'none'],
     r"--peer-python must name the interpreter .*Received: peer_python='none'"),
])
def test_bad_runs_are_one_line_errors(tiny, capsys, argv, message):
    argv = argv[:1] + ['--features', tiny['path'], '--output-dir',
                       str(tiny['folder'] / 'refused')] + argv[1:]
    assert _load_script('compare_transformers').main(argv) == 2
    assert re.search(message, capsys.readouterr().err.strip().splitlines()[-1])


@pytest.mark.parametrize('flags, message', [
    (['--seeds', '1,x'], r"--seeds must be comma-separated integers.*Received: seeds='1,x'"),
    (['--batch', '0'], r'--batch must be a positive integer'),
    (['--output', 'features.bin'], r'--output must end with \.npz'),
])
def test_bad_feature_options_are_one_line_errors(tiny, capsys, flags, message):
    argv = ['features', '--train-file', str(tiny['train']), '--dev-file', str(tiny['dev']),
            '--exclude-titles', '', '--model-dir', tiny['model'],
            '--output', str(tiny['folder'] / 'refused.npz')] + flags
    assert _load_script('compare_transformers').main(argv) == 2
    assert re.search(message, capsys.readouterr().err.strip().splitlines()[-1])
