"""Pieces of the SQuAD job checked in process: gradient accumulation against one bigger batch,
the held-out split, the threshold choice and the null-odds AUC against brute force."""
import dataclasses
import itertools

import mxnet as mx
import numpy as onp
import pytest

from gluon_attention.core.matmul import bfloat16_problem, set_matmul_dtype
from gluon_attention.data import squad
from jobs.squad.config import EVAL_TITLES, THRESHOLD_TITLES, TrainConfig
from jobs.squad.data import (data_path, heldout_examples, load_training_features,
                                              training_examples)
from jobs.squad.evaluation import null_odds_auc
from jobs.squad.loop import train
from jobs.squad.model import build_model
from jobs.squad.train import prepare_train
from squad_tiny import make_tiny_bert, make_train_file


def _trained_params(config, features):
    mx.random.seed(3)                                  # the same initial heads for every run
    model = build_model(config.model_dir, config, [mx.cpu()])
    params = model._collect_params_with_prefix()  # pylint: disable=protected-access
    initial = {name: p.data().asnumpy() for name, p in params.items()
               if name.startswith('backbone.')}
    train(model, features, config, [mx.cpu()])
    trained = {name: p.data().asnumpy() for name, p in params.items() if p.grad_req != 'null'}
    return trained, initial


def test_gradient_accumulation_matches_one_bigger_batch(tmp_path):
    model_dir = make_tiny_bert(tmp_path / 'bert')
    base = TrainConfig(model_dir=model_dir, train_file=make_train_file(tmp_path / 'train.json'),
                       extra_train_file='', exclude_titles='', threshold_titles='Huguenot',
                       max_seq_length=64,
                       doc_stride=24, max_query_length=16, max_steps=2, dropout=0.0,
                       classifier_dropout=0.0, progress=False, lr=1e-3, max_train_features=24)
    features = load_training_features(base, squad.load_tokenizer(model_dir))[0]
    whole = _trained_params(dataclasses.replace(base, batch_size=8, grad_accum_steps=1,
                                                output_dir=str(tmp_path / 'whole')), features)
    parts = _trained_params(dataclasses.replace(base, batch_size=4, grad_accum_steps=2,
                                                output_dir=str(tmp_path / 'parts')), features)
    (whole, before), (parts, _) = whole, parts
    for name, value in whole.items():
        onp.testing.assert_allclose(parts[name], value, rtol=1e-5, atol=1e-6, err_msg=name)
    moved = [name for name in before if name in whole
             and onp.abs(whole[name] - before[name]).max() > 1e-4]
    assert len(moved) > 10                      # the two steps did train the encoder


def test_heldout_articles_are_out_of_both_training_files():
    config = TrainConfig()
    examples = training_examples(config)
    held = set(THRESHOLD_TITLES.split(','))
    assert not {e.title for e in examples} & (held | set(EVAL_TITLES.split(',')))
    heldout = heldout_examples(config)
    assert {e.title for e in heldout} == held and len(heldout) == 781
    assert sum(not e.answers for e in heldout) == 375
    titles = {e.title for e in examples}
    # the 35 articles of the SQuAD 2.0 dev file (the CS224N file's 16 among them) less the two
    # evaluation and the two threshold articles
    assert len(titles) == 35 - 4


def _f1_at(examples, predictions, null_odds, threshold):
    final = {q: ('' if null_odds[q] > threshold else t) for q, t in predictions.items()}
    return squad.squad_evaluate(examples, final)['f1']


@pytest.mark.parametrize('seed', [0, 1, 2])
def test_between_rule_threshold_has_the_best_f1_of_all_thresholds(seed):
    rng = onp.random.RandomState(seed)
    examples, predictions, null_odds = [], {}, {}
    for i in range(40):
        answers = [] if rng.rand() < 0.5 else [('red fox', 0)]
        qid = 'q%d' % i
        examples.append(squad.SquadExample(qid, 't', 'q?', 'red fox', answers, not answers))
        predictions[qid] = ['red fox', 'fox', 'blue', ''][rng.randint(4)]
        null_odds[qid] = float(rng.randint(-6, 6))        # ties on purpose
    gains = {e.qas_id: max(squad.f1_score(g, predictions[e.qas_id]) for g in
                           squad.gold_answers(e)) - (not e.answers) for e in examples}
    start = float(sum(not e.answers for e in examples))
    best, threshold = squad.sweep_null_threshold(null_odds, gains, start, 'between')
    f1 = 100.0 * best / len(examples)
    values = sorted(set(null_odds.values()))
    candidates = [values[0] - 1] + values
    best = max(_f1_at(examples, predictions, null_odds, t) for t in candidates)
    assert f1 == pytest.approx(best)
    assert _f1_at(examples, predictions, null_odds, threshold) == pytest.approx(best)
    assert threshold not in values        # midway between two score differences


def test_null_odds_auc_equals_pair_count():
    rng = onp.random.RandomState(4)
    examples = [squad.SquadExample('q%d' % i, 't', 'q', 'c', [] if i % 3 else [('c', 0)],
                                   bool(i % 3)) for i in range(30)]
    odds = {e.qas_id: float(rng.randint(0, 5)) for e in examples}
    impossible = [odds[e.qas_id] for e in examples if not e.answers]
    answerable = [odds[e.qas_id] for e in examples if e.answers]
    pairs = [1.0 if a > b else 0.5 if a == b else 0.0
             for a, b in itertools.product(impossible, answerable)]
    assert null_odds_auc(examples, odds) == pytest.approx(sum(pairs) / len(pairs))
    assert null_odds_auc(examples[:1], odds) is None


def test_freeze_layers_keeps_the_lowest_layers_and_embeddings_fixed(tmp_path):
    model_dir = make_tiny_bert(tmp_path / 'bert', num_layers=2)
    config = TrainConfig(model_dir=model_dir, train_file=make_train_file(tmp_path / 'train.json'),
                         extra_train_file='', exclude_titles='', threshold_titles='Huguenot',
                         max_seq_length=64, doc_stride=24, max_query_length=16, max_steps=2,
                         progress=False, lr=1e-3, max_train_features=16, batch_size=8,
                         freeze_layers=1, output_dir=str(tmp_path / 'run'))
    features = load_training_features(config, squad.load_tokenizer(model_dir))[0]
    mx.random.seed(3)
    model = build_model(config.model_dir, config, [mx.cpu()])
    params = model._collect_params_with_prefix()  # pylint: disable=protected-access
    before = {name: p.data().asnumpy() for name, p in params.items()
              if name.startswith('backbone.')}
    train(model, features, config, [mx.cpu()])
    moved = {name for name in before
             if onp.abs(params[name].data().asnumpy() - before[name]).max() > 0}
    fixed = {name for name in before if 'embed' in name or '.layers.0.' in name}
    assert fixed and not moved & fixed
    assert {name for name in before if '.layers.1.' in name} <= moved


def test_freeze_layers_beyond_the_encoder_is_refused(tmp_path):
    model_dir = make_tiny_bert(tmp_path / 'bert')
    config = TrainConfig(model_dir=model_dir, freeze_layers=9)
    with pytest.raises(ValueError, match='at most the encoder.s 1 layers.*Received: '
                                         'freeze_layers=9'):
        build_model(config.model_dir, config, [mx.cpu()])
    # the job refuses it from the model's config.json before any data is read
    with pytest.raises(ValueError, match='at most the encoder.s 1 layers.*Received: '
                                         'freeze_layers=9'):
        prepare_train(dataclasses.replace(config, train_file=str(tmp_path / 'missing.json'),
                                          eval_max_seq_length=128,
                                          output_dir=str(tmp_path / 'run')))
    assert not (tmp_path / 'run').exists()


def test_unknown_data_set_name_lists_the_known_names():
    with pytest.raises(ValueError) as info:
        data_path('haystack-smal')
    message = str(info.value)
    assert message.startswith('expected a SQuAD JSON file or a named data set (haystack-small, '
                              'cs224n-16articles, v1.1-24articles, ')
    assert message.endswith(". Received: path='haystack-smal'") and '\n' not in message
    assert all(name in message for name in squad.SQUAD_FILES)
    assert data_path('haystack-small') == str(squad.default_data_path('haystack-small'))


@pytest.mark.skipif(bfloat16_problem() is not None,
                    reason='no bfloat16 products here: {}'.format(bfloat16_problem()))
def test_bfloat16_training_steps_follow_float32_and_evaluation_returns_to_float32(tmp_path):
    model_dir = make_tiny_bert(tmp_path / 'bert')
    base = TrainConfig(model_dir=model_dir, train_file=make_train_file(tmp_path / 'train.json'),
                       extra_train_file='', exclude_titles='', threshold_titles='Huguenot',
                       max_seq_length=64, doc_stride=24, max_query_length=16, max_steps=2,
                       dropout=0.0, classifier_dropout=0.0, progress=False, lr=1e-3,
                       max_train_features=16, batch_size=8)
    features = load_training_features(base, squad.load_tokenizer(model_dir))[0]
    runs = {}
    for dtype in ('float32', 'bfloat16'):
        config = dataclasses.replace(base, matmul_dtype=dtype, output_dir=str(tmp_path / dtype))
        mx.random.seed(3)
        model = build_model(config.model_dir, config, [mx.cpu()], config.matmul_dtype)
        assert model.backbone.matmul_dtype == dtype
        params = model._collect_params_with_prefix()  # pylint: disable=protected-access
        before = {n: p.data().asnumpy() for n, p in params.items()     # heads: deferred
                  if p.grad_req != 'null' and n.startswith('backbone.')}
        train(model, features, config, [mx.cpu()])
        runs[dtype] = onp.concatenate([(p.data().asnumpy() - before[n]).ravel()
                                       for n, p in params.items() if n in before])
    low, full = runs['bfloat16'], runs['float32']
    assert not onp.array_equal(low, full)            # the products did run in bfloat16
    assert onp.corrcoef(low, full)[0, 1] > 0.95      # and the updates follow float32's
    assert set_matmul_dtype(model, 'float32') == 6   # one layer: q, k, v, proj, ffn_1, ffn_2
    assert model.backbone.matmul_dtype == 'float32'
