"""Fine-tuning a converted GluonNLP 0.10 RoBERTa, DistilBERT or ERNIE folder: the training
featurizer lays a pair out as the folder's tokenizer does (RoBERTa ``<s> q </s></s> c </s>``,
four special tokens, where BERT has three), its features are the inference features with gold
spans that map back to the answer's characters, and ``run_squad.py train`` fine-tunes from the
folder. The folders: :mod:`gluonnlp_family`.
"""
import json
import pathlib

import pytest

import gluonnlp_peer as peer
from gluon_attention.convert import to_transformers
from gluon_attention.data import squad
from gluon_attention.data.squad_layout import pair_layout
from gluon_attention.pipelines import QAPredictor, load_qa_folder
from gluonnlp_family import MODELS, convert_squad


@pytest.fixture(scope='module', params=MODELS)
def converted(request, tmp_path_factory):
    """A tiny fine-tuned 0.10 SQuAD model of the architecture and its converted folder."""
    return convert_squad(request.param, tmp_path_factory.mktemp(request.param))


def _answered(texts, word):
    """(question, context, (answer text, its character start)) with the context's ``word``-th
    word as the answer."""
    out = []
    for question, context in texts:
        words = context.split()
        start = len(' '.join(words[:word])) + (word > 0)
        out.append((question, context, (words[word], start)))
    return out


def test_training_features_are_laid_out_as_inference_features(converted):
    """The training featurizer lays a pair out as the folder's tokenizer does (RoBERTa:
    ``<s> q </s></s> c </s>``, 4 special tokens), its features equal the inference features but
    for the gold span, and each gold span maps back to the answer's characters."""
    tokenizer = load_qa_folder(converted.folder).tokenizer()
    layout = pair_layout(tokenizer)
    assert layout.num_special == (4 if converted.model.startswith('roberta') else 3)
    examples = [squad.SquadExample(str(i), 't', q, c, [answer], False)
                for i, (q, c, answer) in enumerate(_answered(converted.texts, 3))]
    train = squad.convert_examples_to_features(examples, tokenizer, 16, 4, 6, is_training=True)
    infer = squad.convert_examples_to_features(examples, tokenizer, 16, 4, 6, is_training=False)
    assert len(train) == len(infer) > len(examples)
    held = 0
    for t, i in zip(train, infer):
        assert (t.input_ids, t.token_types, t.p_mask, t.context_range) == (
            i.input_ids, i.token_types, i.p_mask, i.context_range)
        query = tokenizer.encode(examples[t.example_index].question,
                                 add_special_tokens=False).ids[:6]
        low, high = t.context_range
        assert t.input_ids == layout.input_ids(query, t.input_ids[low:high])
        if t.is_impossible:
            assert (t.start_position, t.end_position) == (0, 0)
            continue
        held += 1
        example = examples[t.example_index]
        text, start = example.answers[0]
        span = (t.token_to_char[t.start_position - low][0],
                t.token_to_char[t.end_position - low][1])
        assert span == (start, start + len(text)) and example.context[slice(*span)] == text
    assert held >= len(examples)


def _train_files(tmp_path, texts):
    """A training file (article 'train', and 'heldout' for the threshold) and an evaluation
    file ('eval') of ``texts`` with answers, each article's contexts the words of ``texts``
    rotated by its own count (the job refuses articles that share a paragraph)."""
    files, rotation = {}, 0
    for name, titles in (('train', ('train', 'heldout')), ('eval', ('eval',))):
        data = []
        for title in titles:
            rotation += 1
            rotated = [(q, ' '.join(c.split()[rotation:] + c.split()[:rotation]))
                       for q, c in texts]
            data.append({'title': title, 'paragraphs': [{'context': c, 'qas': [{
                'id': '{}{}'.format(title, i), 'question': q, 'is_impossible': False,
                'answers': [{'text': a[0], 'answer_start': a[1]}]}]} for i, (q, c, a) in
                enumerate(_answered(rotated, 2))]})
        files[name] = tmp_path / (name + '.json')
        files[name].write_text(json.dumps({'version': 'v2.0', 'data': data}), encoding='utf-8')
    return files


def test_run_squad_train_fine_tunes_the_converted_folder(converted, tmp_path, capsys):
    """``run_squad.py train`` from the converted folder (new QA heads on its encoder): every
    gold span matches its tokens, the saved folder keeps the encoder's configuration (RoBERTa,
    DistilBERT: no token types; the conversion's ``gluonnlp_model`` and ``pad_token_id``, so a
    RoBERTa still exports to transformers as one) and its tokenizer, records the stride its
    chunks were cut with, exports and answers."""
    files = _train_files(tmp_path, converted.texts)
    capsys.readouterr()
    assert peer.run_squad().main([
        'train', '--model-dir', converted.folder, '--output-dir', str(tmp_path / 'run'),
        '--train-file', str(files['train']), '--eval-file', str(files['eval']),
        '--extra-train-file', '', '--exclude-titles', '', '--threshold-titles', 'heldout',
        '--max-steps', '2', '--batch-size', '4', '--max-seq-length', '16',
        '--eval-max-seq-length', '16', '--doc-stride', '4', '--max-query-length', '6',
        '--threads', '1', '--no-progress', '--seed', '3', '--no-onnx']) == 0
    out = capsys.readouterr().out
    assert '(0 gold-span mismatches skipped' in out and 'export check: ' in out
    folder = tmp_path / 'run' / 'model'
    saved = json.loads((folder / 'config.json').read_text())
    original = json.loads((pathlib.Path(converted.folder) / 'config.json').read_text())
    for key in ('type_vocab_size', 'layer_norm_eps', 'hidden_act', 'max_position_embeddings',
                'gluonnlp_model', 'pad_token_id'):
        assert saved[key] == original[key], key
    assert (folder / 'tokenizer.json').read_bytes() == (
        pathlib.Path(converted.folder) / 'tokenizer.json').read_bytes()
    # what a RoBERTa export to transformers reads from the conversion's keys
    exported = json.loads((pathlib.Path(to_transformers(folder, tmp_path / 'hf')) /
                           'config.json').read_text())
    assert exported['model_type'] == ('roberta' if converted.model.startswith('roberta')
                                      else 'bert')
    qa_config = json.loads((folder / 'qa_config.json').read_text())
    special = pair_layout(load_qa_folder(converted.folder).tokenizer()).num_special
    assert qa_config['eval_doc_stride'] == 16 - 6 - special
    question, context = converted.texts[0]
    answer = QAPredictor.from_folder(str(folder)).answer(question, context)
    assert answer.best_span == context[answer.best_span_start:answer.best_span_end] != ''
