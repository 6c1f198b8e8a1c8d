"""From raw text to the exported QA model's inputs, and from its outputs to an answer.

Used by qa_mxnet.py and qa_onnx.py; needs only NumPy and `tokenizers` (no MXNet), so that the
ONNX Runtime path runs without MXNet. One question and a context that fit in one chunk of
qa_config.json's eval_max_seq_length; longer contexts: QAPredictor splits them into chunks.
"""
import argparse
import json
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

QUESTION = 'In what country is Normandy located?'
CONTEXT = ('The Normans were the people who in the 10th and 11th centuries gave their name to '
           'Normandy, a region in France.')


def parse_args(doc, argv=None):
    """The examples' command line: a train run folder, optionally --question and --context."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0], allow_abbrev=False)
    parser.add_argument('run_dir', help='a train run folder (model/ and export/)')
    parser.add_argument('--question', default=QUESTION)
    parser.add_argument('--context', default=CONTEXT)
    return parser.parse_args(argv)


def load_text_side(model_dir):
    """The model folder's tokenizer (padding and truncation off) and qa_config.json."""
    tokenizer = Tokenizer.from_file(str(Path(model_dir) / 'tokenizer.json'))
    tokenizer.no_padding()          # tokenizer.json may pad or cut to 128: the inputs are built here
    tokenizer.no_truncation()
    config = json.loads((Path(model_dir) / 'qa_config.json').read_text(encoding='utf-8'))
    return tokenizer, config


def build_inputs(tokenizer, config, question, context, pad_to=8):
    """[CLS] question [SEP] context [SEP], padded to a multiple of ``pad_to``.

    Returns (inputs, offsets): inputs in the graph's order, input_ids (1, T) int32 (a Hugging
    Face tokenizer's int64 must be cast), token_types (1, T) int32, valid_length (1,) int32 (no
    attention_mask: positions >= valid_length are padding) and p_mask (1, T) float32 with
    1 = may be an answer start or end ([CLS] and the context tokens; Hugging Face's p_mask is
    the opposite); offsets[t] = (first, last + 1) character of token t in ``context``, or None.
    """
    cls, sep = tokenizer.token_to_id('[CLS]'), tokenizer.token_to_id('[SEP]')
    query = tokenizer.encode(question, add_special_tokens=False).ids[:config['max_query_length']]
    text = tokenizer.encode(context, add_special_tokens=False)
    ids = [cls] + query + [sep] + text.ids + [sep]
    if len(ids) > config['eval_max_seq_length']:
        raise ValueError('{} tokens do not fit in one chunk of {}: use QAPredictor'.format(
            len(ids), config['eval_max_seq_length']))
    length = -(-len(ids) // pad_to) * pad_to
    first = len(query) + 2                                  # the first context token
    input_ids = np.zeros((1, length), np.int32)
    input_ids[0, :len(ids)] = ids
    token_types = np.zeros((1, length), np.int32)
    token_types[0, first:len(ids)] = 1                      # the context and its [SEP]
    p_mask = np.zeros((1, length), np.float32)
    p_mask[0, 0] = 1                                        # [CLS]: the null answer
    p_mask[0, first:first + len(text.ids)] = 1
    offsets = [None] * length
    offsets[first:first + len(text.ids)] = text.offsets
    return [input_ids, token_types, np.array([len(ids)], np.int32), p_mask], offsets


def decode(outputs, offsets, context, threshold, max_answer_length=30):
    """The answer of one question from the graph's five outputs (row 0).

    start_top_logits (1, Ns) and start_top_index (1, Ns): the Ns best start positions (indices
    as float32); end_top_logits / end_top_index (1, Ns, Ne): the Ne best ends for each of those
    starts; answerable_logits (1, 2): log P(answerable), log P(impossible). A span's score is
    start logit + end logit; the null score difference is log P(impossible) - log
    P(answerable), and the answer is '' when it exceeds ``threshold`` (qa_config.json's
    null_threshold). Returns (answer, best span, its score, null score difference).
    """
    s_logit, s_index, e_logit, e_index, answerable = (np.asarray(o)[0] for o in outputs)
    best = (-np.inf, '')
    for i, start in enumerate(np.rint(s_index).astype(int)):
        for end, e_score in zip(np.rint(e_index[i]).astype(int), e_logit[i]):
            inside = offsets[start] is not None and offsets[end] is not None
            if inside and start <= end < start + max_answer_length:
                span = context[offsets[start][0]:offsets[end][1]]
                best = max(best, (float(s_logit[i] + e_score), span))
    null_diff = float(answerable[1] - answerable[0])
    answer = '' if null_diff > threshold or not np.isfinite(best[0]) else best[1]
    return answer, best[1], best[0], null_diff
