"""Temporary stand-in for ``tasks.squad.QAPredictor`` (the house prediction API), with the same
contract, until that lands; built from the functions ``run_squad.py predict`` uses."""
import dataclasses
import math
import types
from typing import Optional

import mxnet as mx

from ...data import squad
from ..export.block import import_block
from ..squad.folder import check_model_folder, read_qa_config
from ..squad.data import eval_features
from ..squad.evaluation import run_batches
from ..squad.predict import best_answer


@dataclasses.dataclass(frozen=True)
class QAAnswer:
    text: str
    start: Optional[int]
    end: Optional[int]
    score: Optional[float]
    null_score_diff: float
    threshold: float
    best_span: str = ''
    best_span_start: Optional[int] = None
    best_span_end: Optional[int] = None

    def to_dict(self):
        return dataclasses.asdict(self)


class QAPredictor:
    def __init__(self, block, folder, threshold, batch_size, ctx):
        self.block, self.ctx, self.batch_size = block, ctx, batch_size
        self.config = read_qa_config(folder)
        self.tokenizer = squad.load_tokenizer(folder)
        self.threshold = self.config['null_threshold'] if threshold is None else threshold
        if not self.config.get('version_2_with_negative', 1):
            self.threshold = math.inf

    @classmethod
    def from_folder(cls, model_dir, graph=None, ctx=None, threshold=None, batch_size=32):
        check_model_folder(model_dir, fine_tuned=True)
        ctx = ctx or mx.cpu()
        if graph is None:
            from ...models.qa import QAInference  # pylint: disable=import-outside-toplevel
            from ...models.encoder import BertEncoder  # pylint: disable=import-outside-toplevel
            from ..squad.folder import load_qa_model  # pylint: disable=import-outside-toplevel
            model = load_qa_model(model_dir, BertEncoder.from_pretrained(model_dir, ctx=[ctx]),
                                  [ctx])[0]
            block = QAInference(model, 5, 5)
            block.hybridize(static_alloc=True)
        else:
            block = import_block(graph, ctx)[0]
        return cls(block, model_dir, threshold, batch_size, ctx)

    def answer(self, question, context):
        return self.answer_batch([(question, context)])[0]

    def answer_batch(self, pairs):
        live = [i for i, (q, c) in enumerate(pairs) if q.strip() and c.strip()]
        examples = [squad.SquadExample(str(i), '', pairs[i][0], pairs[i][1], [], False)
                    for i in live]
        answers = [QAAnswer('', None, None, None, math.inf, self.threshold)] * len(pairs)
        if not examples:
            return answers
        features = eval_features(examples, self.tokenizer, self.config['eval_max_seq_length'],
                                 self.config['max_query_length'])
        config = types.SimpleNamespace(eval_batch_size=self.batch_size, progress=False)
        outputs = run_batches(self.block, features, config, self.ctx)
        _, _, null_odds, _ = squad.decode_predictions(examples, features, outputs, 20, 30,
                                                      self.threshold)
        for example, i in zip(examples, live):
            mine = [(f, o) for f, o in zip(features, outputs) if f.qas_id == example.qas_id]
            span = best_answer([f for f, _ in mine], [o for _, o in mine], 30)
            diff = null_odds[example.qas_id]
            best = ('', None, None, None) if span is None else (
                example.context[span[1]:span[2]], span[1], span[2], span[0])
            if span is None or diff > self.threshold:
                answers[i] = QAAnswer('', None, None, best[3], diff, self.threshold, *best[:3])
            else:
                answers[i] = QAAnswer(best[0], best[1], best[2], best[3], diff, self.threshold,
                                      *best[:3])
        return answers
