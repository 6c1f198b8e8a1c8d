"""The QA prediction pipeline: a fine-tuned model folder answering questions about contexts
(tokenize, chunk, run, decode), as the SQuAD job's ``run_squad.py predict`` does (it uses this
class in both of its modes).

>>> p = QAPredictor.from_folder('runs/squad/model')            # doctest: +SKIP
>>> p.answer('Where did the Normans come from?', 'The Normans came from Normandy.').text
'Normandy'

A question is answered like an evaluation question: its context is split into chunks of the
folder's evaluation length (``qa_config.json``: ``eval_max_seq_length``, ``max_query_length``,
the evaluation stride), the features of all questions of a call run together through the model
(:func:`~gluon_attention.pipelines.features.run_batches`), and the spans are decoded by
:func:`~gluon_attention.data.squad.decode_predictions`: the best non-null span is the highest
start + end logit over the chunks, and the answer is '' where the null score difference
(``min over chunks of log P(impossible) - log P(answerable)``) exceeds the threshold.
A blank question or context (empty, or white space and invisible characters such as the
zero-width space only: :func:`~gluon_attention.data.squad.is_blank_input`) gets the null answer
'' without a forward pass.
"""
import contextlib
import dataclasses
import math
from typing import Optional

import mxnet as mx

from .._checks import check_positive_int, check_text, fail_type
from ..core.kernels import Kernels
from ..core.matmul_graph import Bfloat16Graph
from ..data import squad
from ..models.encoder import BertEncoder
from ..models.qa import ModelForQAConditional, QAInference
from ..models.heads import head_block
from ..models.qa_span import ModelForQASpan
from ..export.block import import_block
from .features import eval_features, run_batches
from .folder import QAFolder, load_head, load_qa_folder
from .threshold import NullThreshold

__all__ = ['QAAnswer', 'QAPredictor', 'load_qa_model']


@dataclasses.dataclass(frozen=True)
class QAAnswer:
    """The answer to one question about one context.

    Attributes
    ----------
    text : str
        The answer; '' is the null answer (no answer in the context).
    start, end : int or None
        Character offsets ``[start, end)`` of ``text`` in the context (``context[start:end] ==
        text``); None for the null answer.
    score : float or None
        Span score (start logit + end logit) of the best non-null span; None when no span is
        valid (or the input is empty).
    null_score_diff : float
        ``log P(impossible) - log P(answerable)``, the minimum over the context's chunks; the
        answer is '' where it exceeds ``threshold``. ``inf`` for a blank question or context.
    threshold : float
        The null threshold used (``inf`` for a SQuAD 1.1 model: never '').
    best_span : str
        Text of the best non-null span, also when the answer is ''; '' when there is none.
    best_span_start, best_span_end : int or None
        Its character offsets ``[start, end)`` in the context; None when there is none.
    """
    text: str
    start: Optional[int]
    end: Optional[int]
    score: Optional[float]
    null_score_diff: float
    threshold: float
    best_span: str
    best_span_start: Optional[int]
    best_span_end: Optional[int]

    def to_dict(self):
        """The fields as a dict that ``json.dumps(..., allow_nan=False)`` accepts: a
        non-finite ``null_score_diff`` or ``threshold`` (``inf``) becomes None."""
        values = dataclasses.asdict(self)
        for key in ('null_score_diff', 'threshold'):
            if not math.isfinite(values[key]):
                values[key] = None
        return values


def load_qa_model(folder, contexts, kernels=None):
    """The :class:`~gluon_attention.models.qa.ModelForQAConditional` of a fine-tuned folder: its
    encoder (``BertEncoder.from_pretrained``) and head (``qa_head.safetensors``), hybridized.

    The encoder is built for inference: its dropout rates are 0 whatever ``config.json`` records
    (a folder converted from GluonNLP 0.10 records the pretraining rates, 0.1), so the 'auto'
    attention is the fused kernel where it is built, as for a folder ``train`` wrote, and the
    exported graph is the one ONNX Runtime's optimizer fuses (``run_squad.py quantize``).

    Parameters
    ----------
    folder : QAFolder
        What :func:`~gluon_attention.pipelines.load_qa_folder` read (``qa_config.json`` is not
        read again).
    contexts : list of mx.Context
    kernels : Kernels, optional
        The encoder's kernel choice (None: ``Kernels()``); with ``matmul_dtype='bfloat16'`` the
        encoder's dense products run in bfloat16 (the head's stay float32). The weights read
        stay float32.

    Returns
    -------
    ModelForQAConditional or ModelForQASpan
        The latter for a folder converted from a GluonNLP 0.10 SQuAD model
        (``qa_config['head']`` 'span': :class:`~gluon_attention.models.qa_span.ModelForQASpan`).

    Raises
    ------
    ValueError
        A head tensor missing, unexpected or of the wrong shape; ``kernels`` that cannot run
        on ``contexts`` (:meth:`Kernels.resolve`).
    """
    backbone = BertEncoder.from_pretrained(folder.path, ctx=contexts, kernels=kernels,
                                           dropout=0.0, attention_dropout=0.0)
    if folder.qa_config.get('head') == 'span':
        model = ModelForQASpan(backbone, head_block(folder.path, ctx=contexts),
                               folder.qa_config['max_answer_length'],
                               folder.qa_config['version_2_with_negative'])
        model.hybridize(static_alloc=True)
        return model
    model = ModelForQAConditional(backbone, units=folder.qa_config['head_units'],
                                  dropout=folder.qa_config['head_dropout'])
    for head in (model.start_scores, model.end_scores, model.answerable_scores):
        head.initialize(mx.init.Zero(), ctx=contexts)
    load_head(model, folder.path)
    model.hybridize(static_alloc=True)
    return model


@contextlib.contextmanager
def _numpy_mode():
    """MXNet's numpy semantics for the duration (per thread), whether or not the caller ran
    ``mx.npx.set_np()``."""
    with mx.util.np_shape(True), mx.util.np_array(True):
        yield


def _check_kernels(kernels, ctx):
    """``kernels`` (None: ``Kernels()``) after :meth:`Kernels.resolve` refused what cannot
    run on ``ctx``; returned unresolved (the encoder resolves 'auto' with its own dropout)."""
    kernels = Kernels() if kernels is None else kernels
    if not isinstance(kernels, Kernels):
        fail_type('kernels must be a gluon_attention.Kernels', kernels=type(kernels).__name__)
    kernels.resolve(ctx)
    return kernels


class _Offsets:
    """Stands for a context string: slicing it returns the slice's (start, stop) character
    offsets, so span decoding reports where a span is instead of its text."""

    def __getitem__(self, span):
        return span.start, span.stop


def _best_span(features, outputs, max_answer_length):
    """(score, char_start, char_end) of the best valid span of one question's features, or
    None: the first of the highest score, in the candidate order of ``decode_predictions``."""
    candidates = []
    for k, (feature, output) in enumerate(zip(features, outputs)):
        candidates += squad.span_candidates(feature, _Offsets(), output, max_answer_length, k)
    return max(candidates, key=lambda c: c[0], default=None)


class QAPredictor:
    """Answers questions about contexts with a fine-tuned SQuAD model folder.

    Build it with :meth:`from_folder`. The sequence lengths are the folder's (``qa_config.json``);
    decoding follows ``run_squad.py predict`` (see the module documentation). It runs in MXNet's
    numpy mode whether or not the caller called ``mx.npx.set_np()``.

    Attributes
    ----------
    threshold : NullThreshold
        The null threshold and its source.
    qa_config : dict
        The folder's ``qa_config.json``.
    batch_size, max_answer_length : int
    ctx : mx.Context
    """

    def __init__(self, block, tokenizer, qa_config, threshold, batch_size=32, ctx=None,
                 max_answer_length=30):
        self.block, self.tokenizer, self.qa_config = block, tokenizer, qa_config
        self.threshold, self.batch_size = threshold, batch_size
        self.ctx, self.max_answer_length = ctx or mx.cpu(), max_answer_length

    @classmethod
    def from_folder(cls, model_dir, graph=None, ctx=None, threshold=None, batch_size=32, *,
                    max_answer_length=30, start_top_n=5, end_top_n=5, kernels=None):
        """Load a fine-tuned model folder.

        Parameters
        ----------
        model_dir : str, pathlib.Path or QAFolder
            A folder (or one :func:`~gluon_attention.pipelines.load_qa_folder` read) written by
            ``run_squad.py train`` (``config.json``, ``model.safetensors``,
            ``qa_head.safetensors``, tokenizer files, ``qa_config.json``); with ``graph``, only
            ``qa_config.json`` and the tokenizer files are read.
        graph : str, optional
            None: the model is built in this process from the folder. Otherwise the prefix of
            an exported ``QAInference`` graph (``<prefix>-symbol.json``, ``<prefix>-0000.params``,
            ``<prefix>-inputs.json``), loaded with ``SymbolBlock.imports`` after the library's
            operators are loaded (:func:`~gluon_attention.export.import_block`); its top-n
            sizes are the ones it was exported with.
        ctx : mx.Context, optional
            Where the model runs (default ``mx.cpu()``).
        threshold : float, str or NullThreshold, optional
            None or ``'auto'``: the folder's calibrated null threshold; a number (or a string
            holding one) overrides it (:meth:`NullThreshold.of`). A SQuAD 1.1
            folder (``version_2_with_negative`` 0) never predicts '' (threshold ``inf``).
        batch_size : int
            Features per forward pass.
        max_answer_length : int
            Longest answer, in tokens (keyword only).
        start_top_n, end_top_n : int
            Start positions searched per chunk and end positions per start, for the in-process
            model (keyword only).
        kernels : Kernels, optional
            The kernel choice (keyword only; None: ``Kernels()``). ``matmul_dtype='bfloat16'``
            runs the dense products in bfloat16 with float32 accumulation: the in-process
            encoder's (the head stays float32), or every ``FullyConnected`` of the graph
            (:meth:`~gluon_attention.core.matmul_graph.Bfloat16Graph.from_exported`, weights
            cast once when loaded). The files read stay float32. With ``graph`` only
            ``matmul_dtype`` applies: the other operators are those the graph was exported
            with.

        Returns
        -------
        QAPredictor

        Raises
        ------
        ValueError
            ``model_dir`` is not a saved model folder (naming the missing files), a graph file
            is missing, ``threshold`` is None for a SQuAD 2.0 folder without a saved threshold,
            or a size is not a positive integer; ``kernels`` that cannot run on ``ctx``
            (bfloat16 off the CPU or on a CPU or MXNet build without bfloat16 products, see
            :meth:`Kernels.resolve`).
        TypeError
            ``threshold`` is neither None, a number, a string nor a NullThreshold (ValueError
            for nan or a string that is not a finite number); ``kernels`` is not a Kernels.
        RuntimeError
            The graph uses the library's fused operators and they cannot be loaded here.
        """
        for name, value in (('batch_size', batch_size), ('max_answer_length', max_answer_length),
                            ('start_top_n', start_top_n), ('end_top_n', end_top_n)):
            check_positive_int(name, value)
        ctx = ctx or mx.cpu()
        kernels = _check_kernels(kernels, ctx)
        folder = model_dir if isinstance(model_dir, QAFolder) else load_qa_folder(
            model_dir, weights=graph is None)
        qa_config = folder.qa_config
        resolved = NullThreshold.of(threshold).resolve(qa_config,
                                                       qa_config['version_2_with_negative'])
        with _numpy_mode():
            if graph is None:
                block = QAInference(load_qa_model(folder, [ctx], kernels), start_top_n,
                                    end_top_n)
                block.hybridize(static_alloc=True)
            elif kernels.matmul_dtype == 'bfloat16':
                block = Bfloat16Graph.from_exported(str(graph), ctx)
            else:
                block = import_block(str(graph), ctx)[0]
        return cls(block, folder.tokenizer(), qa_config, resolved, batch_size, ctx,
                   max_answer_length)

    def answer(self, question, context):
        """The answer to one question about one context.

        Parameters
        ----------
        question, context : str

        Returns
        -------
        QAAnswer

        Raises
        ------
        TypeError
            ``question`` or ``context`` is not a str.
        ValueError
            ``question`` or ``context`` cannot be encoded as UTF-8 (a lone UTF-16 surrogate).
        """
        for name, text in (('question', question), ('context', context)):
            if not isinstance(text, str):
                fail_type('{} must be a str'.format(name), **{name: text})
            check_text(text, name)
        return self.answer_batch([(question, context)])[0]

    def answer_batch(self, pairs):
        """The answers to several (question, context) pairs: the features of all pairs run
        together, up to ``batch_size`` features per forward pass.

        Parameters
        ----------
        pairs : sequence of (str, str)
            (question, context) pairs.

        Returns
        -------
        list of QAAnswer
            In the order of ``pairs``.

        Raises
        ------
        TypeError
            A pair is not two strings.
        ValueError
            A string cannot be encoded as UTF-8 (named ``examples[i].question`` or
            ``examples[i].context``, i its index in ``pairs``).
        """
        examples = []
        for i, pair in enumerate(pairs):
            if not (isinstance(pair, (tuple, list)) and len(pair) == 2
                    and all(isinstance(text, str) for text in pair)):
                fail_type('pairs must be (question, context) pairs of str',
                          **{'pairs[{}]'.format(i): pair})
            examples.append(squad.SquadExample(str(i), '', pair[0], pair[1], [], False))
        return self.predict_examples(examples)['answers']

    def predict_examples(self, examples, n_best_size=20, progress=None):
        """Answer SQuAD examples (their answers, if any, are not read), as
        ``run_squad.py predict --predict-file`` does.

        Parameters
        ----------
        examples : list of SquadExample
            With unique ``qas_id``.
        n_best_size : int
            Distinct answer texts kept per question in ``nbest``.
        progress : callable, optional
            Wraps the list of batches (e.g. ``tqdm.tqdm``, a progress bar); None: none.

        Returns
        -------
        dict
            ``answers``: list of QAAnswer (order of ``examples``); ``final_predictions``,
            ``null_odds``, ``nbest``: dicts by question id, the content of
            ``predictions.json``, ``null_odds.json`` and ``nbest_predictions.json`` (see
            :func:`~gluon_attention.data.squad.decode_predictions`).
        """
        features = eval_features(examples, self.tokenizer, self.qa_config['eval_max_seq_length'],
                                 self.qa_config['max_query_length'])
        with _numpy_mode():
            outputs = run_batches(self.block, features, self.batch_size, self.ctx, progress)
        _, final, null_odds, nbest = squad.decode_predictions(
            examples, features, outputs, n_best_size, self.max_answer_length,
            self.threshold.value)
        by_example = [[] for _ in examples]
        for feature, output in zip(features, outputs):
            by_example[feature.example_index].append((feature, output))
        answers = []
        for example, pieces in zip(examples, by_example):
            span = _best_span([f for f, _ in pieces], [o for _, o in pieces],
                              self.max_answer_length) if pieces else None
            answers.append(_answer(example, span, final[example.qas_id],
                                   null_odds[example.qas_id], self.threshold.value))
        return {'answers': answers, 'final_predictions': final, 'null_odds': null_odds,
                'nbest': nbest}


def _answer(example, span, final_text, null_diff, threshold):
    """The QAAnswer of one example from its best span (score, start, end) or None."""
    score, (start, end) = (None, (None, None)) if span is None else span
    best = '' if span is None else example.context[start:end]
    answered = bool(final_text)
    return QAAnswer(final_text, start if answered else None, end if answered else None, score,
                    float(null_diff), float(threshold), best, start, end)
