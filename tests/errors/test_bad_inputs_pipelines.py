"""Bad input to the QA pipeline (:mod:`gluon_attention.pipelines`), in the style of
``test_bad_inputs.py``: (what is wrong, call, exception type, message fragments). Library
messages name the argument (``model_dir``, ``threshold``), never a command-line flag."""
import json

import pytest
from tokenizers import processors

from gluon_attention.data.squad import SquadExample
from gluon_attention.data.squad_features import convert_examples_to_features, load_tokenizer
from gluon_attention.models.heads import SpanHead
from gluon_attention.models.qa_span import ModelForQASpan
from gluon_attention.pipelines import NullThreshold, QAPredictor, load_qa_folder
from refusal import assert_refusal


def _tokenizer_only_folder():
    """A folder with a tokenizer and qa_config.json but no weights (relative to the test's
    working folder)."""
    import os
    os.makedirs('tuned', exist_ok=True)
    with open('tuned/vocab.txt', 'w', encoding='utf-8') as handle:
        handle.write('[PAD]\n')
    with open('tuned/qa_config.json', 'w', encoding='utf-8') as handle:
        json.dump({'version_2_with_negative': 1, 'null_threshold': None,
                   'null_threshold_source': 'auto'}, handle)
    return 'tuned'


def _tokenizer():
    """A WordPiece tokenizer of five tokens (written to the test's working folder)."""
    with open('vocab.txt', 'w', encoding='utf-8') as handle:
        handle.write('[PAD]\n[UNK]\n[CLS]\n[SEP]\nwho\n')
    return load_tokenizer('.')


def _tokenizer_without_pair_layout(processor):
    """A WordPiece tokenizer without [CLS] and [SEP], with the given post-processor or none."""
    from tokenizers import Tokenizer, models  # pylint: disable=import-outside-toplevel
    tokenizer = Tokenizer(models.WordPiece({'[UNK]': 0, 'who': 1}, unk_token='[UNK]'))
    if processor is not None:
        tokenizer.post_processor = processor
    return tokenizer


def _roberta_folder_without_tokenizer():
    """What converting a GluonNLP 0.10 RoBERTa SQuAD model writes: no tokenizer (0.10 keeps
    no merges file)."""
    import os
    os.makedirs('roberta', exist_ok=True)
    for name in ('model.safetensors', 'head.safetensors'):
        open(os.path.join('roberta', name), 'wb').close()
    for name, content in (('config.json', {'gluonnlp_model': 'roberta_12_768_12'}),
                          ('head_config.json', {'kind': 'span', 'units': 16})):
        with open(os.path.join('roberta', name), 'w', encoding='utf-8') as handle:
            json.dump(content, handle)
    return 'roberta'


BAD = [
    ('threshold-nan', lambda: NullThreshold.of(float('nan')), ValueError,
     ['threshold must be a number, not nan', 'threshold=nan']),
    ('threshold-text', lambda: NullThreshold.of('high'), ValueError,
     ["threshold must be 'auto' or a finite number", "threshold='high'"]),
    ('threshold-text-inf', lambda: NullThreshold.of('inf', 'flag', 'null_score_diff_threshold'),
     ValueError, ["null_score_diff_threshold must be 'auto' or a finite number"]),
    ('threshold-bool', lambda: NullThreshold.of(True), TypeError,
     ['threshold must be None, a number or a NullThreshold', 'threshold=True']),
    ('threshold-list', lambda: NullThreshold.of([0.5]), TypeError, ['threshold=[0.5]']),
    ('threshold-auto-without-saved', lambda: NullThreshold.of(None).resolve(
        {'null_threshold': None}, 1), ValueError,
     ['threshold must be a number for a model folder without a null threshold',
      "threshold='auto'"]),
    ('load-qa-folder-missing', lambda: load_qa_folder('absent'), ValueError,
     ['model_dir must be a model folder saved by train', 'qa_config.json',
      'or, for a converted folder, head_config.json, head.safetensors in place of '
      'qa_config.json, qa_head.safetensors', "model_dir='absent'"]),
    ('load-qa-folder-no-weights', lambda: load_qa_folder(_tokenizer_only_folder()), ValueError,
     ['missing: config.json, model.safetensors, qa_head.safetensors', "model_dir='tuned'"]),
    ('load-qa-folder-roberta-without-tokenizer', lambda: QAPredictor.from_folder(
        _roberta_folder_without_tokenizer()), ValueError,
     ['converted from a GluonNLP 0.10 SQuAD model', 'merges.txt',
      "from_gluonnlp(..., merges_file='merges.txt')",
      "model_dir='roberta'"]),
    ('span-model-other-head', lambda: ModelForQASpan(None, 'head'), TypeError,
     ['head must be a SpanHead', "head='str'"]),
    ('span-model-answer-length', lambda: ModelForQASpan(None, SpanHead(4), 0), ValueError,
     ['max_answer_length', 'max_answer_length=0']),
    ('predictor-saved-threshold-missing', lambda: QAPredictor.from_folder(
        _tokenizer_only_folder(), graph='g'), ValueError,
     ['threshold must be a number for a model folder without a null threshold']),
    ('predictor-question-lone-surrogate', lambda: QAPredictor.answer(
        object.__new__(QAPredictor), 'Who \ud800 ruled?', 'x'), ValueError,
     ['question must be Unicode text that can be encoded as UTF-8',
      'lone surrogate at character 4']),
    ('features-context-lone-surrogate', lambda: convert_examples_to_features(
        [SquadExample('a', '', 'who?', 'x', [], True),
         SquadExample('b', '', 'who?', '\udced\udca0', [], True)],
        _tokenizer(), is_training=False), ValueError,
     ['examples[1].context must be Unicode text', 'lone surrogate at character 0']),
    ('features-tokenizer-without-cls-sep', lambda: convert_examples_to_features(
        [SquadExample('a', '', 'who?', 'x', [], True)], _tokenizer_without_pair_layout(None),
        is_training=False), ValueError,
     ['expected a tokenizer with a post-processor that lays out a pair',
      'or with the tokens [CLS] and [SEP]', 'special_ids=(None, None)']),
    ('features-post-processor-without-pair', lambda: convert_examples_to_features(
        [SquadExample('a', '', 'who?', 'x', [], True)],
        _tokenizer_without_pair_layout(processors.ByteLevel()), is_training=False), ValueError,
     ['post-processor lays out a (question, context) pair', "'type': 'ByteLevel'"]),
    ('features-pair-template-without-leading-special', lambda: convert_examples_to_features(
        [SquadExample('a', '', 'who?', 'x', [], True)], _tokenizer_without_pair_layout(
            processors.TemplateProcessing(single='$A who', pair='$A who $B:1 who:1',
                                          special_tokens=[('who', 1)])),
        is_training=False), ValueError,
     ['with a special token first', "'type': 'TemplateProcessing'"]),
]


@pytest.mark.parametrize('call, kind, fragments', [row[1:] for row in BAD],
                         ids=[row[0] for row in BAD])
def test_bad_pipeline_input_raises_with_received(call, kind, fragments, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(Exception) as err:
        call()
    message = assert_refusal(err.value, kind, fragments)
    assert '--' not in message.split('Received:')[0], message      # no command-line flag
