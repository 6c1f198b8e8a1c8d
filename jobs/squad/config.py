"""The options of the SQuAD job, one dataclass per command of ``scripts/run_squad.py``.

Every option is declared once, with its default and help text; ``--help`` and
``<output-dir>/run_config.json`` are generated from these classes. Options declared with
:func:`~jobs.engine.config.recipe_option` shape the trained model (data, sizes,
optimisation, seed): a checkpoint only resumes a run whose recipe options are all equal; the
others (where to write, devices, threads, progress bars, evaluation and decoding) may change
between a killed run and its resumption.
"""
import dataclasses
import math
import os
from typing import Optional

from gluon_attention.checks import check_text, fail
from gluon_attention.core.matmul import MATMUL_DTYPES
from gluon_attention.pipelines.threshold import NEVER_NULL, NullThreshold

from ..engine.config import option, recipe_option
from ..engine.launch import KVSTORES

__all__ = ['QAOptions', 'EvaluateConfig', 'PredictConfig', 'TrainConfig', 'CurveConfig',
           'NullThreshold', 'QuantizeConfig', 'NEVER_NULL', 'THRESHOLD_NAME', 'check_config', 'EVAL_TITLES', 'THRESHOLD_TITLES']

#: The name of the null threshold's option (errors name it; the command line translates).
THRESHOLD_NAME = 'null_score_diff_threshold'
#: The two articles of the default evaluation file, left out of training by default.
EVAL_TITLES = 'Normans,Computational_complexity_theory'
#: Two SQuAD 2.0 training articles (not in the SQuAD 1.1 file) held out to choose the threshold.
THRESHOLD_TITLES = 'Huguenot,Scottish_Parliament'


@dataclasses.dataclass
class QAOptions:
    """What every command shares: the model, where to write, devices, decoding."""
    model_dir: Optional[str] = option(
        None, 'the fine-tuned model folder to load, as train writes it (config.json, '
              'model.safetensors, qa_head.safetensors, qa_config.json, tokenizer files), or '
              'one converted from a GluonNLP 0.10 SQuAD model (head_config.json + '
              'head.safetensors instead of the two qa_ files); None: <output-dir>/model')
    output_dir: str = option('runs/squad', 'the run folder: train writes run_config.json, '
                             'metrics, predictions, checkpoints/, model/ and export/ there; '
                             'evaluate and predict read <output-dir>/model (unless --model-dir) '
                             'and write into <output-dir>/evaluate/ or <output-dir>/predict/, '
                             "never over the train run's files")
    eval_batch_size: int = option(32, 'features per inference batch')
    n_best_size: int = option(20, 'distinct answer texts kept per question')
    max_answer_length: int = option(30, 'longest answer, in tokens')
    start_top_n: int = option(5, 'start positions searched per chunk')
    end_top_n: int = option(5, 'end positions searched per start')
    null_score_diff_threshold: str = option(
        'auto', "a question's answer is '' where its null score difference (log P(impossible) - "
                "log P(answerable), minimum over its chunks) exceeds this number; 'auto': the "
                'threshold saved in the model folder, which train chose on its held-out '
                "training articles (train's --threshold-titles)")
    data_dir: str = option('', "the data folder holding the named SQuAD files ('': $GA_DATA_DIR, "
                           'else ../shared/data from the repository root; see docs/data.md)')
    ctx: str = option('cpu', "devices, e.g. cpu, gpu(0), 'cpu(0),cpu(1)' (data parallel)")
    threads: int = option(0, 'OpenMP threads (0: every core); set before MXNet starts')
    progress: bool = option(True, 'show progress bars')

    def __post_init__(self):
        #: ``--null-score-diff-threshold`` parsed once, when the config is built (ValueError for
        #: a bad value); the field keeps the text, as written to ``run_config.json``.
        self.null_threshold = NullThreshold.of(self.null_score_diff_threshold, 'flag',
                                               THRESHOLD_NAME)


def onnx_model_option():
    """--onnx-model of evaluate and predict."""
    return option('', 'run this ONNX file in ONNX Runtime instead of the MXNet graph (e.g. '
                  '<output-dir>/int8/qa-int8.onnx written by quantize); the tokenizer, lengths '
                  'and threshold still come from the model folder, the start/end top-n are '
                  "those the file was written with ('': the MXNet graph)")


def inference_dtype_option():
    """--matmul-dtype of evaluate and predict."""
    return option('float32', "dtype of the model's dense products; 'bfloat16' (CPU, oneDNN; fast "
                  'on AMX) keeps float32 weights, inputs and accumulation (the saved model is '
                  'not changed)', choices=MATMUL_DTYPES)


@dataclasses.dataclass
class EvalFileOptions(QAOptions):
    """The evaluation file of evaluate and train."""
    eval_file: str = option('haystack-small', 'SQuAD json to evaluate on (a path, or a named '
                            'file of the data folder: haystack-small, cs224n-16articles, '
                            'v1.1-24articles, v1.1-dev, v2.0-dev, ...)')
    eval_exclude_titles: str = option('', 'comma-separated article titles of --eval-file left '
                                      "out of evaluation; each must be in it ('': none)")
    max_eval_examples: int = option(0, 'evaluate only the first N questions (0: all)')
    version_2_with_negative: int = option(
        1, "1: SQuAD 2.0 (questions may have no answer); 0: SQuAD 1.1 (never predict '', "
           'leave impossible questions out, report exact, f1, total)', choices=(0, 1))


@dataclasses.dataclass
class EvaluateConfig(EvalFileOptions):
    """evaluate: score a model folder on a SQuAD file with answers."""
    onnx_model: str = onnx_model_option()
    matmul_dtype: str = inference_dtype_option()


@dataclasses.dataclass
class QuantizeConfig(QAOptions):
    """quantize: write the model folder's QA model in INT8 for ONNX Runtime (<output-dir>/int8/)."""
    per_channel: int = option(1, 'INT8 weights with one scale per output channel (0: one per '
                              'tensor)', choices=(0, 1))
    int8_head: int = option(1, "quantize the QA head's dense layers too (0: they stay float32; "
                            'measured on the demo model: F1 53.93 against 53.97)', choices=(0, 1))
    int8_ffn: int = option(
        0, "quantize the encoder's feed-forward products too (1); 0: they stay float32, the "
           'faithful default (demo model: argmax agreement with float32 0.952 against 0.837, '
           'F1 +0.12 against +0.97, at about float32 speed)', choices=(0, 1))
    activation_scales: str = option(
        'calibrated', "'calibrated': every activation's INT8 scale fixed once from training "
                      "features (answers independent of the batch); 'dynamic': scales from each "
                      'batch at run time (answers depend on which features share it)',
        choices=('calibrated', 'dynamic'))
    calibration_file: str = option('cs224n-16articles', 'SQuAD json whose questions of the '
                                   "model's trained articles (qa_config.json trained_titles; "
                                   'all of them for a folder without that record, such as one '
                                   'converted from GluonNLP 0.10) calibrate the activation '
                                   'scales')
    calibration_features: int = option(256, 'calibration features (the first, in file order)')


@dataclasses.dataclass
class PredictConfig(QAOptions):
    """predict: answer the questions of a SQuAD-format file, or one question about one context."""
    predict_file: str = option('', 'SQuAD-format json whose questions to answer (answers, if '
                               'any, are ignored); writes predictions.json, null_odds.json and '
                               'nbest_predictions.json to <output-dir>/predict/')
    question: Optional[str] = option(None, "one question (with --context): print its answer "
                                     "(blank: the null answer '')")
    context: Optional[str] = option(None, 'the paragraph that --question is about')
    json: bool = option(False, 'with --question: print every field of the answer as one JSON '
                        'object (text, start, end, score, null_score_diff, threshold, best_span, '
                        'best_span_start, best_span_end; inf written as null)')
    onnx_model: str = onnx_model_option()
    matmul_dtype: str = inference_dtype_option()


@dataclasses.dataclass
class TrainConfig(EvalFileOptions):
    """train (the default command): fine-tune, save, evaluate, export."""
    model_dir: Optional[str] = recipe_option(
        None, 'pretrained encoder folder (config.json, model.safetensors, tokenizer.json or '
              'vocab.txt); None: the embedded all-MiniLM-L6-v2')
    version_2_with_negative: int = recipe_option(
        1, "1: SQuAD 2.0; 0: SQuAD 1.1 (impossible questions are left out of training and "
           "evaluation, '' is never predicted, the report has exact, f1, total)", choices=(0, 1))
    train_file: str = recipe_option('cs224n-16articles', 'SQuAD json to train on (a path, or a '
                                    'named file of the data folder: cs224n-16articles, '
                                    'v1.1-24articles, v1.1-train, v2.0-train-10articles, ...)')
    extra_train_file: str = recipe_option('v2.0-dev', 'more training data: comma-separated '
                                          "files or named files ('' for none)")
    exclude_titles: str = recipe_option(EVAL_TITLES, 'comma-separated article titles left out '
                                        'of training (the evaluation articles); each must be in '
                                        "a training file ('': none)")
    init_heads: str = recipe_option(
        'auto', "'auto': with a --model-dir saved by train (holding qa_head.safetensors), start "
                "from its QA heads too (else new heads); 'new': always new heads",
        choices=('auto', 'new'))
    threshold_titles: str = recipe_option(
        THRESHOLD_TITLES, "comma-separated articles of --train-file held out of training (from "
                          "both training files): the null threshold is the one with the best F1 "
                          "on their questions ('': no held-out articles, threshold 0)")
    max_seq_length: int = recipe_option(128, 'training chunk length, in tokens')
    eval_max_seq_length: int = option(384, 'evaluation chunk length, in tokens')
    doc_stride: int = recipe_option(64, 'distance between training chunk starts, in tokens')
    max_query_length: int = recipe_option(32, 'questions are cut to this many tokens')
    impossible_ratio: float = recipe_option(
        1.0, 'fraction of the features of unanswerable questions kept for training (with '
             '--plausible-spans: of their chunks holding the plausible answer)')
    no_answer_chunk_ratio: float = recipe_option(
        0.05, 'fraction kept of the chunks that miss the answer (and, with --plausible-spans, '
              'the plausible answer)')
    batch_size: int = recipe_option(16, 'training features per forward pass')
    grad_accum_steps: int = recipe_option(
        1, 'forward passes whose gradients add up to one step (a step holds batch-size x '
           'grad-accum-steps features)')
    lr: float = recipe_option(2e-4, 'peak learning rate (AdamW)')
    epochs: float = recipe_option(1.0, 'passes over the training features; used only when '
                                  '--max-steps is 0')
    max_steps: int = recipe_option(900, 'training steps; > 0 wins over --epochs, 0: the steps '
                                   'of --epochs passes')
    max_train_features: int = recipe_option(0, 'train on the first N kept features (0: all)')
    warmup_ratio: float = recipe_option(0.1, 'fraction of the steps with linear warm-up')
    weight_decay: float = recipe_option(0.01, 'decoupled weight decay (not on biases and '
                                        'LayerNorm)')
    adam_epsilon: float = recipe_option(1e-6, 'AdamW epsilon, added to the square root of the '
                                        'uncorrected second moment')
    max_grad_norm: float = recipe_option(1.0, 'clip the global gradient norm (0: no clipping)')
    answerable_weight: float = recipe_option(3.0, 'weight of the answerable loss against the '
                                             'span loss')
    head_lr_mult: float = recipe_option(1.0, 'learning-rate multiplier of the three (randomly '
                                        'initialised) QA heads')
    plausible_spans: int = recipe_option(1, 'train the span heads on the plausible answers of '
                                         'impossible questions', choices=(0, 1))
    null_head_articles: str = recipe_option(
        'all', "articles whose features train the answerable head ('with-impossible': only "
               'articles that also have impossible questions)', choices=('all', 'with-impossible'))
    freeze_word_embeddings: int = recipe_option(1, 'keep the word embeddings fixed',
                                                choices=(0, 1))
    freeze_layers: int = recipe_option(
        0, 'keep the embeddings and the lowest N encoder layers fixed (their backward pass is '
           'skipped: more steps per minute)')
    classifier_dropout: float = recipe_option(0.1, 'dropout inside the answerable head')
    dropout: float = recipe_option(0.1, 'encoder hidden dropout')
    attention_dropout: float = recipe_option(
        0.0, 'encoder attention dropout (0 skips the (B, K, T, T) dropout and allows the fused '
             'attention kernel)')
    matmul_dtype: str = recipe_option(
        'float32', "dtype of the encoder's dense products in the training steps; 'bfloat16' "
                   '(CPU, oneDNN; fast with AVX512-BF16) keeps float32 parameters and '
                   'accumulation, and the threshold, evaluation and export run float32',
        choices=MATMUL_DTYPES)
    seed: int = recipe_option(7, 'seed of the data selection, the shuffles and every step')
    checkpoint_every: int = option(50, 'save a checkpoint every N steps (and after the last)')
    keep_checkpoints: int = option(2, 'checkpoints kept on disk, the newest (0: every one, for '
                                   'the learning curve of the curve command)')
    log_every: int = option(0, 'print a line and add a row to <output-dir>/train_log.jsonl every '
                            'N steps (0: about 20 in the run)')
    kvstore: str = option(
        'device', 'gradient summation: device or local in one process; dist_sync or '
                  'dist_device_sync in a job started by scripts/launch.py (a step then holds '
                  'batch-size x grad-accum-steps x workers features)', choices=KVSTORES)
    skip_export: bool = option(False, 'skip exporting the inference graph and its reload check')
    onnx: bool = option(True, 'also export to ONNX and check it in ONNX Runtime on the '
                        'evaluation questions (needs the [onnx] extra)')


@dataclasses.dataclass
class CurveConfig:
    """curve: score every kept checkpoint of a train run (curve.csv, curve.png)."""
    output_dir: str = option('runs/squad', 'the train run: its run_config.json gives the recipe, '
                             'the held-out and the evaluation questions; its checkpoints/ are '
                             'scored; curve.csv and curve.png are written there')
    eval_batch_size: int = option(32, 'features per inference batch')
    every: int = option(0, 'score the checkpoints whose step is a multiple of N, and the last '
                        '(0: every kept checkpoint)')
    max_eval_examples: int = option(0, "score on the first N of the run's evaluation questions, "
                                    'into curve-first<N>.csv and .png (0: as the run evaluated)')
    ctx: str = option('cpu', "the device to score on, e.g. cpu, gpu(0)")
    threads: int = option(0, 'OpenMP threads (0: every core); set before MXNet starts')
    progress: bool = option(True, 'show progress bars')
    plot: bool = option(True, 'also draw curve.png (needs matplotlib: the [plots] extra)')


_POSITIVE = ('max_seq_length', 'eval_max_seq_length', 'doc_stride', 'max_query_length',
             'batch_size', 'grad_accum_steps', 'eval_batch_size', 'checkpoint_every', 'n_best_size',
             'max_answer_length', 'start_top_n', 'end_top_n')
_COUNTS = ('max_steps', 'freeze_layers', 'max_train_features', 'max_eval_examples', 'threads',
           'keep_checkpoints', 'every', 'log_every')
_FINITE = ('lr', 'epochs', 'weight_decay', 'max_grad_norm', 'answerable_weight', 'head_lr_mult')
_FRACTIONS = ('warmup_ratio', 'impossible_ratio', 'no_answer_chunk_ratio')
_DROPOUTS = ('dropout', 'attention_dropout', 'classifier_dropout')


def check_config(config):
    """Check the value ranges of a config's options.

    Raises
    ------
    ValueError
        Naming the flag, what it must be, and ``Received: name=value``.
    """
    values = dataclasses.asdict(config)

    def each(names):
        return [(name, values[name]) for name in names if name in values]

    for name, value in each(_POSITIVE):
        if value <= 0:
            fail('--{} must be a positive integer'.format(_flag(name)), **{name: value})
    for name, value in each(_COUNTS):
        if value < 0:
            fail('--{} must be >= 0'.format(_flag(name)), **{name: value})
    for name, value in each(_FINITE + _FRACTIONS):
        if not 0 <= value < math.inf:                      # also rejects nan
            fail('--{} must be a finite number >= 0'.format(_flag(name)), **{name: value})
    for name, value in each(_FRACTIONS):
        if value > 1:
            fail('--{} is a fraction in [0, 1]'.format(_flag(name)), **{name: value})
    for name, value in each(_DROPOUTS):
        if not 0 <= value < 1:
            fail('--{} must lie in [0, 1)'.format(_flag(name)), **{name: value})
    if 'adam_epsilon' in values and not 0 < values['adam_epsilon'] < math.inf:
        fail('--adam-epsilon must be a finite number > 0', adam_epsilon=values['adam_epsilon'])
    if isinstance(config, TrainConfig) and config.max_steps == 0 and config.epochs <= 0:
        fail('--epochs must be > 0 when --max-steps is 0', epochs=config.epochs,
             max_steps=config.max_steps)
    if getattr(config, 'onnx_model', '') and not os.path.isfile(config.onnx_model):
        fail('--onnx-model must name an existing .onnx file', onnx_model=config.onnx_model)
    if getattr(config, 'onnx_model', '') and config.matmul_dtype != 'float32':
        fail('--matmul-dtype applies to the MXNet model: give it or --onnx-model, not both',
             matmul_dtype=config.matmul_dtype, onnx_model=config.onnx_model)
    if isinstance(config, PredictConfig):
        _check_predict_inputs(config)


def _check_predict_inputs(config):
    """--predict-file, or --question with --context: one of the two, not both; the text UTF-8."""
    one = config.question is not None or config.context is not None
    if config.predict_file and one:
        fail('predict takes --predict-file or --question with --context: they exclude each '
             'other', predict_file=config.predict_file, question=config.question,
             context=config.context)
    if not config.predict_file and (config.question is None or config.context is None):
        fail('predict needs either --predict-file or both --question and --context',
             predict_file=config.predict_file, question=config.question, context=config.context)
    for name in ('question', 'context'):
        if getattr(config, name) is not None:      # bytes the shell could not decode as UTF-8
            check_text(getattr(config, name), name)


def _flag(name):
    return name.replace('_', '-')
