"""SQuAD data path: reading, features, batching, the official metric and span decoding."""
import dataclasses
import hashlib
import json
import math
import shutil

import numpy as onp
import pytest
from conftest import data_dir, squad_file

from gluon_attention.data import squad
from gluon_attention.data.squad import (SquadExample, batchify, best_span, sweep_null_threshold,
                                        convert_examples_to_features, decode_predictions,
                                        default_data_path, exact_match, f1_score, gold_answers,
                                        load_tokenizer,
                                        normalize_answer, read_squad, span_candidates,
                                        squad_evaluate)


@pytest.fixture(scope='module')
def tokenizer():
    return load_tokenizer()


@pytest.fixture(scope='module')
def small():
    """The 626 evaluation questions (Normans, Computational_complexity_theory)."""
    return read_squad(squad_file('haystack-small'))


@pytest.fixture(scope='module')
def small_features(small, tokenizer):
    stats = {}
    features = convert_examples_to_features(small, tokenizer, is_training=False, stats=stats)
    return features, stats


# ------------------------------------------------------------------------------------- reading
#: sha256 of the named files (docs/data.md): the data folder holds exactly the published copies.
SHA256 = {
    'haystack-small': 'dfed6c7aefe89fdcb8ed63b98dc742a0acf3565d92f97c61efaa077012b0fe68',
    'cs224n-16articles': 'e67e5969b6dc6c1642154740806b79263b77fc048c7c11ee60d534eb48ef81e8',
    'v1.1-24articles': 'bf8ebb60a161d0594f455be869ff3a476d2fe07da92ab1ecb0dea41f50ea64f3',
    'v1.1-super-bowl-50': 'c9d44b5664061b4fa1fe6413a469c032e44a3ed44bee19d51656b6727268bd0f',
    'v1.1-train': '578d15e7aebee3bd6678d7847d495942924dc71a5012b2bc9bae670d67e48a92',
    'v1.1-dev': '20f4e8383814fb2f91bab4d13def05345a3587c6c80661a4b3613d1b0f207830',
    'v2.0-dev': '99980fc274fa5095b9f5bf0e8d76501c91a919846799fb441366c88adafd04ad',
    'v2.0-train-10articles': '53e67dd96e8597a8ef600e795d54d3fdef18486d42721884d38d652e2a2638cb',
}


@pytest.mark.parametrize('name, total, impossible, articles', [
    ('haystack-small', 626, 333, 2),
    ('cs224n-16articles', 6078, 3168, 16),
    ('v1.1-24articles', 4961, 0, 24),
    ('v1.1-super-bowl-50', 810, 0, 1),
    ('v2.0-train-10articles', 4719, 348, 10),
])
def test_read_named_files(name, total, impossible, articles):
    examples = read_squad(squad_file(name))
    assert len(examples) == total
    assert sum(e.is_impossible for e in examples) == impossible
    assert len({e.title for e in examples}) == articles
    assert all(bool(e.answers) != e.is_impossible for e in examples)
    for e in examples[:50]:
        for text, start in e.answers:
            assert e.context[start:start + len(text)] == text


def test_named_files_are_the_published_copies():
    assert set(SHA256) == set(squad.SQUAD_FILES)
    for name, relative in squad.SQUAD_FILES.items():
        path = squad_file(name)
        assert path == data_dir() / relative
        assert hashlib.sha256(path.read_bytes()).hexdigest() == SHA256[name], name
        assert default_data_path(path.name, data_dir()) == path       # the file name works too


def test_title_filters_split_train_and_eval(small):
    path = squad_file('cs224n-16articles')
    eval_titles = ['Normans', 'Computational_complexity_theory']
    train = read_squad(path, exclude_titles=eval_titles)
    held_out = read_squad(path, titles=eval_titles)
    assert len(train) + len(held_out) == 6078 and len(held_out) == 626
    assert not {e.title for e in train} & set(eval_titles)
    # Same questions as the haystack file (which carries the official ids).
    assert sorted(e.question for e in held_out) == sorted(e.question for e in small)
    with pytest.raises(ValueError, match=r"expected every requested title.*Received: "
                                         r"missing=\['Nope'\]"):
        read_squad(path, titles=['Normans', 'Nope'])


def _squad_json(**qa_changes):
    qa = {'id': 'q1', 'question': 'Who?', 'is_impossible': False,
          'answers': [{'text': 'Rollo', 'answer_start': 5}]}
    qa.update(qa_changes)
    qa = {k: v for k, v in qa.items() if v is not None}
    return {'version': 'v2.0', 'data': [{'title': 'T', 'paragraphs': [
        {'context': 'Duke Rollo ruled.', 'qas': [qa]}]}]}


@pytest.mark.parametrize('content, message', [
    (None, r"SQuAD file not found: expected .*missing\.json; .*The official SQuAD is published "
           r"at https://rajpurkar\.github\.io/SQuAD-explorer/\. Received: path='.*missing\.json'"),
    ('{"data": [', r'bad\.json: expected valid JSON\. Received: error='),
    ({'version': '2.0'}, r"bad\.json: expected a key 'data'\. Received: keys=\['version'\]"),
    ({'data': [{'title': 'T', 'paragraphs': [{'qas': []}]}]},
     r"data\[0\] \(title='T'\) paragraphs\[0\]: expected a key 'context'\. Received: keys="),
    (_squad_json(question=None), r"question id='q1': expected a key 'question'"),
    (_squad_json(answers=[{'text': 'Rollo', 'answer_start': 4}]),
     r"question id='q1': expected context\[answer_start:answer_start \+ len\(text\)\] == text\. "
     r"Received: answer_start=4, text='Rollo', context_text=' Roll'"),
    (_squad_json(answers=[{'text': 'Rollo', 'answer_start': '4'}]),
     r"question id='q1': expected 'answer_start' of type int\. Received: answer_start='4'"),
    (_squad_json(is_impossible=True),
     r"question id='q1': expected answers to be empty exactly when is_impossible is true\. "
     r"Received: is_impossible=True, num_answers=1"),
])
def test_read_errors(tmp_path, content, message):
    path = tmp_path / ('missing.json' if content is None else 'bad.json')
    if content is not None:
        path.write_text(content if isinstance(content, str) else json.dumps(content))
    with pytest.raises(ValueError, match=message) as info:
        read_squad(path)
    assert str(path) in str(info.value)


def test_read_questions_without_answers(tmp_path):
    """require_answers=False (prediction files): answers ignored, a title may be absent; the
    same one-line errors naming the file and the record."""
    raw = _squad_json(answers=[{'text': 'Rollo', 'answer_start': 4}], is_impossible=True)
    del raw['data'][0]['title']
    path = tmp_path / 'questions.json'
    path.write_text(json.dumps(raw))
    with pytest.raises(ValueError):
        read_squad(path)
    [example] = read_squad(path, require_answers=False)
    assert (example.qas_id, example.title, example.question, example.context, example.answers,
            example.is_impossible) == ('q1', '', 'Who?', 'Duke Rollo ruled.', [], False)
    path.write_text(json.dumps(_squad_json(question=None)))
    with pytest.raises(ValueError, match=r"questions\.json: data\[0\] \(title='T'\) "
                                         r"paragraphs\[0\] question id='q1': expected a key "
                                         r"'question'\. Received: keys=") as info:
        read_squad(path, require_answers=False)
    assert '\n' not in str(info.value)


def test_read_duplicate_ids_and_unknown_name(tmp_path):
    data = _squad_json()
    data['data'][0]['paragraphs'].append(data['data'][0]['paragraphs'][0])
    path = tmp_path / 'dup.json'
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"expected unique question ids\. Received: qas_id='q1'"):
        read_squad(path)
    with pytest.raises(ValueError, match=r"name must be one of .*Received: name='squad3'"):
        default_data_path('squad3')


def test_read_v1_style_question_without_is_impossible(tmp_path):
    path = tmp_path / 'v11.json'
    path.write_text(json.dumps(_squad_json(is_impossible=None)))
    [example] = read_squad(path)
    assert example == SquadExample('q1', 'T', 'Who?', 'Duke Rollo ruled.', [('Rollo', 5)], False)


def test_plausible_answers_read_for_impossible_questions_only(tmp_path, small):
    impossible = [e for e in small if e.is_impossible]
    assert len(impossible) == 333 and all(e.plausible_answers for e in impossible)
    assert not any(e.plausible_answers for e in small if not e.is_impossible)
    for e in impossible:
        for text, start in e.plausible_answers:
            assert e.context[start:start + len(text)] == text
    # An entry whose offset misses its text is dropped, not fatal (it is not a gold answer).
    path = tmp_path / 'plausible.json'
    path.write_text(json.dumps(_squad_json(is_impossible=True, answers=[], plausible_answers=[
        {'text': 'Rollo', 'answer_start': 4}, {'text': 'Rollo', 'answer_start': 5}])))
    [example] = read_squad(path)
    assert example.plausible_answers == [('Rollo', 5)] and example.answers == []


def test_plausible_spans_point_impossible_chunks_at_the_plausible_answer(small, tokenizer):
    stats = {}
    plain = convert_examples_to_features(small, tokenizer, 128, 64, 32, is_training=True)
    marked = convert_examples_to_features(small, tokenizer, 128, 64, 32, is_training=True,
                                          stats=stats, plausible_spans=True)
    assert len(plain) == len(marked)
    assert 0.95 * 333 <= stats['plausible'] <= 333
    holding = 0
    for a, b in zip(plain, marked):
        example = small[b.example_index]
        assert a.is_impossible == b.is_impossible and a.input_ids == b.input_ids
        if not example.is_impossible:
            assert (a.start_position, a.end_position) == (b.start_position, b.end_position)
            continue
        assert b.is_impossible and a.start_position == a.end_position == 0
        if b.start_position:
            holding += 1
            low = b.context_offset
            assert low <= b.start_position <= b.end_position < b.context_range[1]
            text = example.context[b.token_to_char[b.start_position - low][0]:
                                   b.token_to_char[b.end_position - low][1]]
            assert normalize_answer(example.plausible_answers[0][0]) in normalize_answer(text)
        else:
            assert b.end_position == 0
    assert holding >= stats['plausible']          # every matched span lies in some chunk


# ------------------------------------------------------------------------------------ features
def test_gold_spans_match_answers_on_real_data(small, small_features):
    """Each answerable question's gold tokens contain its answer; the mismatch count is reported."""
    features, stats = small_features
    assert stats['answerable'] == 293
    print('gold span mismatches: {mismatch} of {answerable} (recovered {recovered})'
          .format(**stats))
    assert stats['mismatch'] <= 0.01 * stats['answerable']
    by_example = {}
    for f in features:
        by_example.setdefault(f.example_index, []).append(f)
    assert sorted(by_example) == list(range(len(small)))
    for index, example in enumerate(small):
        possible = [f for f in by_example[index] if not f.is_impossible]
        if example.is_impossible:
            assert not possible
            assert all(f.start_position == f.end_position == 0 for f in by_example[index])
            continue
        assert possible, example.qas_id
        for f in possible:
            low = f.context_offset
            text = example.context[f.token_to_char[f.start_position - low][0]:
                                   f.token_to_char[f.end_position - low][1]]
            assert normalize_answer(example.answers[0][0]) in normalize_answer(text)


def test_feature_layout(small_features, tokenizer):
    cls_id, sep_id = tokenizer.token_to_id('[CLS]'), tokenizer.token_to_id('[SEP]')
    for f in small_features[0]:
        low, high = f.context_range
        assert f.valid_length == len(f.input_ids) == len(f.token_types) == len(f.p_mask) <= 384
        assert f.input_ids[0] == cls_id and f.input_ids[low - 1] == sep_id
        assert f.input_ids[-1] == sep_id and high == f.valid_length - 1
        assert low - 2 <= 64
        assert f.token_types == [0] * low + [1] * (f.valid_length - low)
        assert f.p_mask == [1] + [0] * (low - 1) + [1] * f.chunk_length + [0]
        assert len(f.token_to_char) == len(f.token_is_max_context) == f.chunk_length


def test_token_offsets_point_at_token_text(small, small_features, tokenizer):
    checked = 0
    for f in small_features[0][:40]:
        context = small[f.example_index].context
        for token_id, (start, end) in zip(f.input_ids[f.context_offset:], f.token_to_char):
            piece = tokenizer.id_to_token(token_id)
            if piece != '[UNK]' and context[start:end].isascii():
                assert context[start:end].lower() == piece.replace('##', '', 1)
                checked += 1
    assert checked > 1000


def _long_example():
    """90 context tokens '100' ... '189' (one WordPiece each); the answer is tokens 10-11."""
    context = ' '.join(str(100 + i) for i in range(90))
    start = context.index('110 ')
    return SquadExample('long', 'T', 'which number is it', context, [('110 111', start)], False)


def test_doc_stride_chunks_cover_context_once(tokenizer):
    example = _long_example()
    features = convert_examples_to_features([example], tokenizer, max_seq_length=64,
                                            doc_stride=20, max_query_length=16)
    context_tokens = len(tokenizer.encode(example.context, add_special_tokens=False).ids)
    assert [f.chunk_start for f in features] == list(range(0, 20 * len(features), 20))
    assert features[-1].chunk_start + features[-1].chunk_length == context_tokens
    assert all(f.valid_length <= 64 for f in features)
    owners = onp.zeros(context_tokens, int)
    for f in features:
        owners[f.chunk_start:f.chunk_start + f.chunk_length] += f.token_is_max_context
    assert (owners == 1).all()
    answer_tokens = tokenizer.encode('110 111', add_special_tokens=False).ids
    for f in features:
        if not f.is_impossible:
            assert f.input_ids[f.start_position:f.end_position + 1] == answer_tokens
    assert 0 < sum(not f.is_impossible for f in features) < len(features)


def test_c19_cls_selectable_in_every_doc_stride_chunk(tokenizer):
    """In chunks 1 and 2 of a long context, p_mask keeps CLS selectable (null answer) and
    masks query, SEP and padding; impossible chunks point at CLS."""
    features = convert_examples_to_features([_long_example()], tokenizer, max_seq_length=64,
                                            doc_stride=20, max_query_length=16)
    batch = batchify(features[1:3], round_to=8)
    for b, f in enumerate(features[1:3]):
        row = batch['p_mask'][b]
        assert row[0] == 1 and f.chunk_index == b + 1
        assert (row[1:f.context_offset] == 0).all()
        assert (row[f.context_offset:f.context_offset + f.chunk_length] == 1).all()
        assert (row[f.context_offset + f.chunk_length:] == 0).all()
    impossible = [f for f in features if f.is_impossible]
    assert impossible and all(f.start_position == f.end_position == 0 for f in impossible)


def test_batchify_pads_and_rounds(small_features):
    features = small_features[0][:7]
    batch = batchify(features, pad_id=0, round_to=8)
    longest = max(f.valid_length for f in features)
    assert batch['input_ids'].shape == (7, -(-longest // 8) * 8)
    assert {k: v.dtype.name for k, v in batch.items()} == {
        'input_ids': 'int32', 'token_types': 'int32', 'p_mask': 'float32',
        'valid_length': 'int32', 'start_position': 'int32', 'end_position': 'int32',
        'is_impossible': 'int32', 'answerable_loss_weight': 'float32'}
    assert (batch['answerable_loss_weight'] == 1.0).all()
    features[0].answerable_loss_weight = 0.0
    assert batchify(features)['answerable_loss_weight'].tolist() == [0.0] + [1.0] * 6
    features[0].answerable_loss_weight = 1.0
    for b, f in enumerate(features):
        assert batch['input_ids'][b, :f.valid_length].tolist() == f.input_ids
        assert (batch['input_ids'][b, f.valid_length:] == 0).all()
        assert (batch['p_mask'][b, f.valid_length:] == 0).all()
        assert batch['is_impossible'][b] == f.is_impossible
    assert batchify(features)['input_ids'].shape[1] == longest
    with pytest.raises(ValueError, match='expected at least one feature'):
        batchify([])


@pytest.mark.parametrize('kwargs, message', [
    (dict(doc_stride=400), r'doc_stride must be at most .*Received: doc_stride=400'),
    (dict(max_seq_length=0), r'max_seq_length must be a positive integer\. Received: '),
])
def test_feature_errors(tokenizer, kwargs, message):
    with pytest.raises(ValueError, match=message):
        convert_examples_to_features([_long_example()], tokenizer, **kwargs)


def test_training_mode_skips_mismatched_spans(tokenizer):
    bad = SquadExample('bad', 'T', 'q', 'abc def', [('zzz', 2)], False)  # built by hand
    stats = {}
    assert convert_examples_to_features([bad], tokenizer, stats=stats) == []
    assert stats == dict(answerable=1, recovered=0, mismatch=1, skipped=1, plausible=0,
                         lost_to_chunking=0)
    [feature] = convert_examples_to_features([bad], tokenizer, is_training=False)
    assert feature.qas_id == 'bad'


def test_load_tokenizer_from_vocab_txt(tmp_path, tokenizer):
    shutil.copy(squad.default_model_dir() / 'vocab.txt', tmp_path / 'vocab.txt')
    text = 'The Normans (Norman: Nourmands) gave their name to Normandy in 1066.'
    plain = load_tokenizer(tmp_path)
    assert plain.encode(text).ids == tokenizer.encode(text).ids
    with pytest.raises(ValueError, match=r'expected tokenizer\.json or vocab\.txt'):
        load_tokenizer(tmp_path / 'empty')


# -------------------------------------------------------------------------------------- metric
@pytest.mark.parametrize('text, expected', [
    ('The Norman  conquest.', 'norman conquest'),
    ('An apple, a pear & THE end!', 'apple pear end'),
    ('theory of A-level', 'theory of alevel'),
    ('  the  ', ''),
    ('Ångström 1,000', 'ångström 1000'),
])
def test_normalize_answer(text, expected):
    assert normalize_answer(text) == expected


@pytest.mark.parametrize('gold, prediction, em, f1', [
    ('Paris', 'paris!', 1, 1.0),
    ('the cat sat on the mat', 'cat on mat', 0, 2 * 0.75 / 1.75),
    ('x x y', 'x y y', 0, 2 / 3),
    ('red dog', 'blue cat', 0, 0.0),
    ('', '', 1, 1.0),
    ('', 'anything', 0, 0.0),
    ('the', '', 1, 1.0),
])
def test_exact_and_f1(gold, prediction, em, f1):
    assert exact_match(gold, prediction) == em
    assert f1_score(gold, prediction) == pytest.approx(f1)


def _examples(*specs):
    return [SquadExample(qid, 'T', 'q', 'c', [(t, 0) for t in golds], not golds)
            for qid, golds in specs]


HAND = _examples(('q1', ['Paris', 'paris france']), ('q2', ['big red dog']), ('q3', []),
                 ('q4', []))
HAND_PREDICTIONS = {'q1': 'Paris!', 'q2': 'red dog', 'q3': '', 'q4': 'something'}
HAND_NA = {'q1': 0.1, 'q2': 0.6, 'q3': 0.9, 'q4': 0.8}


def test_squad_evaluate_hand_example():
    result = squad_evaluate(HAND, HAND_PREDICTIONS)
    assert result == pytest.approx({
        'exact': 50.0, 'f1': 70.0, 'total': 4, 'HasAns_exact': 50.0, 'HasAns_f1': 90.0,
        'HasAns_total': 2, 'NoAns_exact': 50.0, 'NoAns_f1': 50.0, 'NoAns_total': 2})


def test_squad_evaluate_best_threshold_hand_example():
    result = squad_evaluate(HAND, HAND_PREDICTIONS, na_probs=HAND_NA)
    # exact sweep: all null = 2; +q1 -> 3 (at 0.1); +q2 -> 3; +q4 -> 2; +q3 -> 2.
    # f1 sweep: 2; +q1 -> 3; +q2 -> 3.8 (at 0.6); +q4 -> 2.8; +q3 -> 2.8.
    assert result['best_exact'] == pytest.approx(75.0) and result['best_exact_thresh'] == 0.1
    assert result['best_f1'] == pytest.approx(95.0) and result['best_f1_thresh'] == 0.6
    assert result['exact'] == 50.0  # na_prob_thresh 1.0: nothing blanked
    blanked = squad_evaluate(HAND, HAND_PREDICTIONS, na_probs=HAND_NA, na_prob_thresh=0.7)
    assert blanked['exact'] == pytest.approx(75.0) and blanked['f1'] == pytest.approx(95.0)
    assert blanked['NoAns_exact'] == 100.0


def test_best_threshold_equals_brute_force_sweep(rng):
    qids = ['q{}'.format(i) for i in range(40)]
    has_answer = {q: bool(rng.rand() < 0.5) for q in qids}
    predictions = {q: '' if rng.rand() < 0.3 else 'x' for q in qids}
    scores = {q: float(rng.rand() * has_answer[q]) if predictions[q] else float(not has_answer[q])
              for q in qids}
    na_probs = {q: float(p) for q, p in zip(qids, rng.permutation(40) / 7.0)}

    def applied(threshold):  # answer '' when na > threshold
        return sum(float(not has_answer[q]) if na_probs[q] > threshold
                   else (scores[q] if has_answer[q] else float(not predictions[q])) for q in qids)
    brute = max(applied(t) for t in [-1.0] + list(na_probs.values()))
    gains = {q: scores[q] if has_answer[q] else -float(bool(predictions[q])) for q in qids}
    start = sum(not has_answer[q] for q in qids)
    best, threshold = sweep_null_threshold(na_probs, gains, start, 'official')
    assert best == pytest.approx(brute)
    never_improved = threshold == 0.0 and best == pytest.approx(applied(-1.0))
    assert applied(threshold) == pytest.approx(brute) or never_improved


def test_sweep_tie_rules():
    """Three questions with null odds 1, 1, 2 and gains +1, -1, +0.5 from a start of 0: the
    official rule cuts between the tied questions (total 1 'at' 1.0, which the threshold 1.0
    does not give: it answers both); 'between' cuts only between different odds: 0 after the
    tied pair (not better than the start), 0.5 with all three answered (threshold max + 1)."""
    odds, gains = {'a': 1.0, 'b': 1.0, 'c': 2.0}, {'a': 1.0, 'b': -1.0, 'c': 0.5}
    assert sweep_null_threshold(odds, gains, 0.0, 'official') == (1.0, 1.0)
    assert sweep_null_threshold(odds, gains, 0.0, 'between') == (0.5, 3.0)
    assert sweep_null_threshold(odds, dict(gains, c=-0.5), 0.0, 'between') == (0.0, 0.0)
    assert sweep_null_threshold(odds, {'a': -1, 'b': -1, 'c': -1}, 0.0, 'official') == (0.0, 0.0)
    assert sweep_null_threshold(odds, {'a': -1, 'b': -1, 'c': -1}, 0.0, 'between') == (0.0, 0.0)
    assert sweep_null_threshold(odds, {'a': 1, 'b': 1, 'c': 1}, 0.0, 'between') == (3.0, 3.0)
    with pytest.raises(ValueError, match=r"rule must be one of 'official', 'between'\. "
                                         r"Received: rule='ties'"):
        sweep_null_threshold(odds, gains, 0.0, 'ties')


def test_squad_evaluate_on_real_files(small):
    all_null = squad_evaluate(small, {e.qas_id: '' for e in small})
    assert all_null['exact'] == all_null['f1'] == pytest.approx(100 * 333 / 626)  # 53.19
    assert all_null['HasAns_f1'] == 0.0 and all_null['NoAns_exact'] == 100.0
    v11 = read_squad(squad_file('v1.1-24articles'))
    result = squad_evaluate(v11, {e.qas_id: gold_answers(e)[-1] for e in v11})
    assert result['exact'] == result['HasAns_f1'] == 100.0 and result['total'] == 4961
    assert 'NoAns_total' not in result


def test_squad_evaluate_missing_prediction():
    with pytest.raises(ValueError, match=r"expected predictions for every question\. "
                                         r"Received: missing=1, first_missing='q4'"):
        squad_evaluate(HAND, {q: '' for q in ('q1', 'q2', 'q3')})


# ------------------------------------------------------------------------------------ decoding
def test_c18_best_span_prefers_valid_pair():
    """Start [0,5,1,0], end [4,0,0,1], max length 3 -> (1, 3) with score 6, not (1, 0)."""
    assert best_span([0, 5, 1, 0], [4, 0, 0, 1], None, 3) == (1, 3, 6.0)
    assert best_span([0, 5, 1, 0], [4, 0, 0, 1], None, 1) == (1, 1, 5.0)
    assert best_span([0, 5, 1, 0], [4, 0, 0, 1], [0, 1, 1, 0], 3) == (1, 1, 5.0)
    assert best_span([0, 0, 9], [9, 0, 0], [0, 0, 1], 3) == (2, 2, 9.0)  # end before start
    assert best_span([1, 2], [3, 4], [0, 0], 3) is None
    with pytest.raises(ValueError, match=r'1-D of one length'):
        best_span([1, 2], [3], None, 3)


@pytest.fixture(scope='module')
def long_features(tokenizer):
    example = _long_example()
    features = convert_examples_to_features([example], tokenizer, max_seq_length=64,
                                            doc_stride=20, max_query_length=16, is_training=False)
    return [example], features


def _result(starts, ends, answerable=(-0.1, -2.4), dtype=onp.float32):
    """Top-k result with one end per start; ``starts``/``ends`` are (index, logit) pairs."""
    return {'start_top_logits': onp.array([s[1] for s in starts], dtype),
            'start_top_index': onp.array([s[0] for s in starts], dtype),
            'end_top_logits': onp.array([[e[1]] for e in ends], dtype),
            'end_top_index': onp.array([[e[0]] for e in ends], dtype),
            'answerable_logits': onp.array(answerable, dtype)}


def test_decode_all_candidates_invalid(long_features):
    examples, features = long_features
    low = features[0].context_offset
    invalid = _result(starts=[(0, 9.0), (1, 8.0), (low + 5, 7.0), (low, 6.0)],
                      ends=[(0, 9.0), (low + 2, 8.0), (low + 4, 7.0), (low + 40, 6.0)],
                      answerable=(-2.0, -0.2))  # CLS, query, end before start, too long
    predictions, final, null_odds, nbest = decode_predictions(
        examples, features, [invalid] * len(features), max_answer_length=30)
    assert predictions == final == {'long': ''} and nbest == {'long': []}
    assert null_odds['long'] == pytest.approx(1.8)


def test_c19_decode_never_starts_or_ends_at_cls(long_features):
    """A huge CLS start/end score leaves the null decision to the answerable logits; the
    non-null prediction is the best context span."""
    examples, features = long_features
    results = []
    for f in features:
        low = f.context_offset
        results.append(_result(starts=[(0, 50.0), (low + 1, 1.0)], ends=[(0, 50.0), (low + 2, 1.0)],
                               answerable=(-1.5, -0.3) if f.chunk_index else (-0.2, -1.8)))
    predictions, final, null_odds, nbest = decode_predictions(examples, features, results)
    assert predictions['long'] == final['long'] == '101 102'  # chunk 0's tokens 1..2
    assert null_odds['long'] == pytest.approx(-1.6)  # min over chunks
    assert all(n['text'] for n in nbest['long'])
    assert sum(n['probability'] for n in nbest['long']) == pytest.approx(1.0)
    _, final, _, _ = decode_predictions(examples, features, results, null_score_diff_threshold=-2)
    assert final == {'long': ''}


def test_decode_uses_max_context_chunk(long_features):
    examples, features = long_features
    first, second = features[0], features[1]
    token = second.chunk_start + 2  # in both chunks, nearer chunk 0's middle
    for f in (first, second):
        assert f.chunk_start <= token < f.chunk_start + f.chunk_length
    owners = [f.token_is_max_context[token - f.chunk_start] for f in (first, second)]
    assert owners == [True, False]
    for f, owner in zip((first, second), owners):
        position = f.context_offset + token - f.chunk_start
        result = _result(starts=[(position, 1.0)], ends=[(position + 1, 1.0)])
        candidates = span_candidates(f, examples[0].context, result, 30)
        tuple_form = span_candidates(f, examples[0].context,
                                     [result[k] for k in sorted(result, key=_KEY_ORDER.index)], 30)
        assert candidates == tuple_form
        assert [t for _, t in candidates] == (['{} {}'.format(100 + token, 101 + token)] if owner
                                                    else [])


_KEY_ORDER = ['start_top_logits', 'start_top_index', 'end_top_logits', 'end_top_index',
              'answerable_logits']


def test_decode_errors(long_features):
    examples, features = long_features
    with pytest.raises(ValueError, match=r'expected one result per feature\. Received: '):
        decode_predictions(examples, features, [])
    bad = [_result(starts=[(1, 1.0)], ends=[(1, 1.0)], answerable=(0.0,))] * len(features)
    with pytest.raises(ValueError, match=r'answerable_logits \(2,\)\. Received: '):
        decode_predictions(examples, features, bad)
    with pytest.raises(ValueError, match=r'expected features made from these examples'):
        decode_predictions(HAND, features, [bad[0]] * len(features))


def test_empty_question_or_context_is_the_null_answer(long_features, tokenizer):
    """One rule in every mode: a blank question or context gets no feature at evaluation and
    the answer '' (null odds inf), whatever a feature made for it anyway says."""
    [long], features = long_features
    blank = [SquadExample('q', '', ' \t', long.context, [], False),
             SquadExample('c', '', long.question, '\n ', [], False)]
    examples = [blank[0], long, blank[1]]
    kept = convert_examples_to_features(examples, tokenizer, max_seq_length=64, doc_stride=20,
                                        max_query_length=16, is_training=False)
    assert [f.example_index for f in kept] == [1] * len(features)
    low = features[0].context_offset
    results = [_result(starts=[(low + 1, 1.0)], ends=[(low + 2, 1.0)])] * len(kept)
    predictions, final, null_odds, nbest = decode_predictions(examples, kept, results,
                                                              null_score_diff_threshold=100.0)
    assert final == predictions == {'q': '', 'long': '101 102', 'c': ''}
    assert null_odds['q'] == null_odds['c'] == math.inf and nbest['q'] == nbest['c'] == []
    moved = [dataclasses.replace(f, example_index=0, qas_id='q') for f in features]
    _, final, null_odds, _ = decode_predictions(blank[:1], moved, results[:len(moved)], 20, 30,
                                                100.0)
    assert final == {'q': ''} and null_odds == {'q': math.inf}


@pytest.mark.parametrize('question, context, blank', [
    ('Who?', 'Rollo.', False),
    ('', 'Rollo.', True),
    (' \t\n', 'Rollo.', True),
    ('\u200b', 'Rollo.', True),                         # zero-width space (category Cf)
    ('\u200b\u200c\u200d\u2060\ufeff \u200e', 'Rollo.', True),
    ('\x00\x07', 'Rollo.', True),                      # control characters (Cc)
    ('Who?', '\ufeff', True),
    ('\u200bWho?', 'Rollo.', False),
    ('\u00e9', 'Rollo.', False),
    ('\u0301', 'Rollo.', False),                        # a combining mark is visible (Mn)
])
def test_blank_input_is_empty_white_space_or_invisible_characters(question, context, blank):
    assert squad.is_blank_input(question, context) is blank


def test_zero_width_question_gets_no_feature(tokenizer):
    examples = [SquadExample('z', '', '\u200b\u200b', 'Rollo ruled.', [], False),
                SquadExample('w', '', 'Who ruled?', 'Rollo ruled.', [], False)]
    features = convert_examples_to_features(examples, tokenizer, is_training=False)
    assert [f.qas_id for f in features] == ['w']
    results = [(onp.zeros(1), onp.zeros(1, int), onp.zeros((1, 1)), onp.zeros((1, 1), int),
                onp.zeros(2))]
    _, final, null_odds, _ = decode_predictions(examples, features, results, 20, 30, 0.0)
    assert final['z'] == '' and null_odds['z'] == math.inf
