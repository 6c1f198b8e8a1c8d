"""Answers lost to chunking are counted: a gold answer that straddles windows so that no
window holds it whole makes every chunk 'impossible' (rightly); the statistics say so."""
import pytest

from gluon_attention.data import squad
from gluon_attention.data.squad import SquadExample

WORDS = 'one two three four five six seven eight nine ten eleven twelve thirteen fourteen'.split()
CONTEXT = ' '.join(WORDS)


@pytest.fixture(scope='module')
def tokenizer():
    return squad.load_tokenizer()


def _example(qid, first, last):
    text = ' '.join(WORDS[first:last + 1])
    return SquadExample(qid, 'T', 'why', CONTEXT, [(text, CONTEXT.index(text))], False)


def _windows(features):
    return [(f.chunk_start, f.chunk_start + f.chunk_length) for f in features]


def test_answers_that_no_window_holds_whole_are_counted(tokenizer):
    """Query 'why' (1 token), 12 tokens a feature, 3 special: windows of 8 context tokens
    every 5: [0, 8), [5, 13), [10, 14). Words 3-6 fit the first, 8-12 the second; 4-9 none."""
    examples = [_example('fits-first', 3, 6), _example('fits-second', 8, 12),
                _example('straddles', 4, 9)]
    assert [len(tokenizer.encode(w, add_special_tokens=False).ids) for w in WORDS] == [1] * 14
    stats = {}
    features = squad.convert_examples_to_features(examples, tokenizer, 12, 5, 4,
                                                  is_training=True, stats=stats)
    assert _windows(features[:3]) == [(0, 8), (5, 13), (10, 14)]
    held = {examples[f.example_index].qas_id for f in features if not f.is_impossible}
    assert held == {'fits-first', 'fits-second'}
    assert stats['lost_to_chunking'] == 1
    assert stats['answerable'] == 3 and stats['mismatch'] == 0


def test_a_smaller_stride_keeps_the_answer(tokenizer):
    stats = {}
    squad.convert_examples_to_features([_example('straddles', 4, 9)], tokenizer, 12, 2, 4,
                                       is_training=True, stats=stats)
    assert stats['lost_to_chunking'] == 0


def test_the_run_log_counts_them(tokenizer, capsys):
    from types import SimpleNamespace

    from jobs.squad.data import load_training_features
    config = SimpleNamespace(max_seq_length=12, doc_stride=5, max_query_length=4,
                             plausible_spans=0, seed=0, impossible_ratio=1.0,
                             no_answer_chunk_ratio=1.0, max_train_features=0,
                             null_head_articles='all')
    load_training_features(config, tokenizer, [_example('a', 3, 6), _example('b', 4, 9)])
    assert capsys.readouterr().out == (
        'train: 2 questions -> 6 features kept (0 gold-span mismatches skipped, 1 answers lost '
        'to chunking)\n')
