"""Answer a question with a GluonNLP 0.10 SQuAD model converted by
``python -m gluon_attention convert --from gluonnlp`` (docs/migrating.md).

Usage: python docs/examples/gluonnlp_squad_answer.py MODEL_DIR QUESTION CONTEXT

The folder's encoder and span head give start and end logits for every token; the best span
(start <= end, at most 30 tokens, context tokens only) is decoded into the context's text
through the tokenizer's character offsets.
"""
import sys

import mxnet as mx
from tokenizers import Tokenizer

from gluon_attention.data.squad_decode import best_span
from gluon_attention.models.encoder import BertEncoder
from gluon_attention.models.heads import head_block


def answer(model_dir, question, context, max_answer_length=30):
    """Returns ``(text, start_token, end_token, start_logits, end_logits)`` (logits: numpy (T,))."""
    encoder, head = BertEncoder.from_pretrained(model_dir), head_block(model_dir)
    encoding = Tokenizer.from_file('{}/tokenizer.json'.format(model_dir)).encode(question, context)
    as_array = lambda values: mx.np.array([values], dtype='int32')  # noqa: E731
    hidden = encoder(as_array(encoding.ids), as_array(encoding.type_ids),
                     mx.np.array([len(encoding.ids)], dtype='int32'))
    start_logits, end_logits = (x[0].asnumpy() for x in head(hidden))
    in_context = [int(t == 1 and not special) for t, special in
                  zip(encoding.type_ids, encoding.special_tokens_mask)]
    start, end, _ = best_span(start_logits, end_logits, in_context, max_answer_length)
    text = context[encoding.offsets[start][0]:encoding.offsets[end][1]]
    return text, start, end, start_logits, end_logits


if __name__ == '__main__':
    mx.npx.set_np()
    print(answer(*sys.argv[1:4])[0])
