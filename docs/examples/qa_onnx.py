"""Answer a question with a train run's ONNX model (export/qa.onnx) in plain ONNX Runtime:
no MXNet, only numpy, tokenizers and onnxruntime.

    python docs/examples/qa_onnx.py runs/squad [--question Q --context C]
"""
import sys
from pathlib import Path

import onnxruntime

sys.path.insert(0, str(Path(__file__).parent))
from qa_text import build_inputs, decode, load_text_side, parse_args  # noqa: E402


def main(argv=None):
    args = parse_args(__doc__, argv)
    tokenizer, config = load_text_side(Path(args.run_dir) / 'model')
    inputs, offsets = build_inputs(tokenizer, config, args.question, args.context)
    session = onnxruntime.InferenceSession(str(Path(args.run_dir) / 'export' / 'qa.onnx'),
                                           providers=['CPUExecutionProvider'])
    names = [i.name for i in session.get_inputs()]   # input_ids, token_types, valid_length, p_mask
    outputs = session.run(None, dict(zip(names, inputs)))
    text, span, score, null_diff = decode(outputs, offsets, args.context, config['null_threshold'])
    print('ONNX Runtime:', repr(text), 'null score difference', round(null_diff, 4),
          '| best span', repr(span), 'score', round(score, 4))
    return text, span, score, null_diff


if __name__ == '__main__':
    main()
