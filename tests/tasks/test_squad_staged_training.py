"""What a second training stage on a fixed SQuAD 2.0 split needs: several extra training files,
evaluation articles left out by title, and the QA heads of a saved model folder carried over."""
import dataclasses
import json

import mxnet as mx
import numpy as onp
import pytest

from jobs.squad.config import TrainConfig
from jobs.squad.data import (check_data_files, load_eval_examples,
                                              training_examples)
from gluon_attention.pipelines.folder import HEAD_FILE
from jobs.squad.folder import save_model_folder
from jobs.squad.model import build_model
from squad_tiny import make_tiny_bert, make_train_file


def _write_article(path, title, question, context='Paris is in France.'):
    answer = {'text': 'Paris', 'answer_start': 0}
    data = {'version': 'v2.0', 'data': [{'title': title, 'paragraphs': [{
        'context': context, 'qas': [{'id': title + '-1', 'question': question,
                                     'answers': [answer], 'is_impossible': False}]}]}]}
    path.write_text(json.dumps(data), encoding='utf-8')
    return str(path)


def test_extra_train_file_takes_several_files_and_keeps_a_shared_question_once(tmp_path):
    train = make_train_file(tmp_path / 'train.json', paragraphs=1)
    first = _write_article(tmp_path / 'a.json', 'Alpha', 'Where is it?')
    second = _write_article(tmp_path / 'b.json', 'Beta', 'What city?')
    again = _write_article(tmp_path / 'c.json', 'Alpha', 'Where is it?')   # Alpha's question
    config = TrainConfig(train_file=train, extra_train_file=','.join([first, second, again]),
                         exclude_titles='', threshold_titles='Huguenot')
    examples = training_examples(config)
    by_title = {}
    for example in examples:
        by_title.setdefault(example.title, []).append(example.question)
    assert by_title['Alpha'] == ['Where is it?'] and by_title['Beta'] == ['What city?']
    assert set(by_title) == {'Steam_engine', 'Alpha', 'Beta'}      # Huguenot is held out
    alone = training_examples(dataclasses.replace(config, extra_train_file=first))
    assert len(examples) == len(alone) + 1


def test_a_missing_extra_train_file_is_named_before_any_work(tmp_path):
    first = _write_article(tmp_path / 'a.json', 'Alpha', 'Where is it?')
    missing = str(tmp_path / 'absent.json')
    config = TrainConfig(train_file=first, extra_train_file=first + ',' + missing,
                         eval_file=first)
    with pytest.raises(ValueError, match='absent.json'):
        check_data_files(config)


def test_eval_exclude_titles_leaves_those_articles_out_and_refuses_unknown_ones(tmp_path):
    train = make_train_file(tmp_path / 'train.json', paragraphs=2)
    config = TrainConfig(eval_file=train, eval_exclude_titles='Huguenot')
    kept = load_eval_examples(config)
    every = load_eval_examples(dataclasses.replace(config, eval_exclude_titles=''))
    assert {e.title for e in every} == {'Steam_engine', 'Huguenot'}
    assert {e.title for e in kept} == {'Steam_engine'}
    assert len(kept) == sum(e.title == 'Steam_engine' for e in every)
    with pytest.raises(ValueError, match=r"--eval-exclude-titles.*missing=\['Hugenot'\]"):
        load_eval_examples(dataclasses.replace(config, eval_exclude_titles='Huguenot,Hugenot'))


def _heads(model):
    """The head parameters after one forward pass (which ends their deferred initialisation)."""
    tokens = mx.np.array([[101, 2054, 102, 3000, 2003, 102]], dtype='int32')
    model(tokens, mx.np.array([[0, 0, 0, 1, 1, 1]], dtype='int32'),
          mx.np.array([6], dtype='int32'), mx.np.array([[1, 0, 0, 1, 1, 0]], dtype='float32'),
          mx.np.array([3], dtype='int32'))
    params = model._collect_params_with_prefix()  # pylint: disable=protected-access
    return {name: p.data().asnumpy() for name, p in params.items()
            if not name.startswith('backbone.')}


def test_model_dir_saved_by_train_gives_its_heads_unless_init_heads_new(tmp_path):
    bert = make_tiny_bert(tmp_path / 'bert')
    config = TrainConfig(model_dir=bert, progress=False)
    first = build_model(bert, config, [mx.cpu()])
    _heads(first)
    for name, param in first._collect_params_with_prefix().items():
        if not name.startswith('backbone.'):
            param.set_data(param.data() + 0.25)    # not what a fresh initialisation draws
    saved = _heads(first)
    folder = save_model_folder(first, str(tmp_path / 'model'), bert, {'head_units': 16})
    assert (tmp_path / 'model' / HEAD_FILE).is_file()
    carried = _heads(build_model(folder, dataclasses.replace(config, model_dir=folder),
                                 [mx.cpu()]))
    assert set(carried) == set(saved) and len(saved) >= 6
    for name, value in saved.items():
        onp.testing.assert_array_equal(carried[name], value, err_msg=name)
    fresh = _heads(build_model(folder, dataclasses.replace(config, model_dir=folder,
                                                           init_heads='new'), [mx.cpu()]))
    assert all(not onp.array_equal(fresh[name], saved[name]) for name in saved)
    # a pretrained folder (no qa_head.safetensors) gets new heads under 'auto' as before
    mx.random.seed(11)
    auto = _heads(build_model(bert, config, [mx.cpu()]))
    mx.random.seed(11)
    new = _heads(build_model(bert, dataclasses.replace(config, init_heads='new'), [mx.cpu()]))
    for name, value in auto.items():
        onp.testing.assert_array_equal(new[name], value, err_msg=name)
