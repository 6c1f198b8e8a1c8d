"""Answer a question about a context with a train run's model, in MXNet, two ways:
QAPredictor (the simple way), then the exported graph called on inputs built by hand.

    python docs/examples/qa_mxnet.py runs/squad [--question Q --context C]
"""
import sys
from pathlib import Path

import mxnet as mx

from gluon_attention.export import load            # loads the library's operators itself
from gluon_attention.pipelines import QAPredictor

sys.path.insert(0, str(Path(__file__).parent))
from qa_text import build_inputs, decode, load_text_side, parse_args  # noqa: E402


def main(argv=None):
    args = parse_args(__doc__, argv)
    model_dir, prefix = Path(args.run_dir) / 'model', Path(args.run_dir) / 'export' / 'qa'

    # 1. The simple way: tokenizing, chunking, decoding and the null decision done for you.
    answer = QAPredictor.from_folder(str(model_dir)).answer(args.question, args.context)
    print('QAPredictor:', repr(answer.text), 'null score difference',
          round(answer.null_score_diff, 4), '| best span', repr(answer.best_span), 'score',
          None if answer.score is None else round(answer.score, 4))

    # 2. The raw way: the exported QAInference graph on inputs built from the tokenizer.
    tokenizer, config = load_text_side(model_dir)
    inputs, offsets = build_inputs(tokenizer, config, args.question, args.context)
    graph = load(str(prefix))                        # reads export/qa-inputs.json
    outputs = graph(*[mx.np.array(x, dtype=x.dtype) for x in inputs])
    text, span, score, null_diff = decode([o.asnumpy() for o in outputs], offsets, args.context,
                                          config['null_threshold'])
    print('exported graph:', repr(text), 'null score difference', round(null_diff, 4),
          '| best span', repr(span), 'score', round(score, 4))
    return (text, span, score, null_diff), answer


if __name__ == '__main__':
    main()
