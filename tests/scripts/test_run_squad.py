"""Smoke run of scripts/run_squad.py on the embedded MiniLM: train a few steps, evaluate,
export, reload, check; its command line (help texts, one-line errors)."""
import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest

from gluon_attention.core import fused
from jobs.squad.config import TrainConfig

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = ['--max-steps', '3', '--checkpoint-every', '2', '--max-train-features', '24',
        '--max-eval-examples', '12', '--batch-size', '4', '--eval-batch-size', '8',
        '--max-seq-length', '96', '--eval-max-seq-length', '128', '--doc-stride', '32',
        '--max-query-length', '24', '--threads', '1', '--seed', '3', '--threshold-titles', '',
        '--no-progress']
OFFICIAL_KEYS = {'exact', 'f1', 'total', 'HasAns_exact', 'HasAns_f1', 'NoAns_exact', 'NoAns_f1',
                 'best_exact', 'best_exact_thresh', 'best_f1', 'best_f1_thresh'}


_SPEC = importlib.util.spec_from_file_location(
    'run_squad_script', os.path.join(ROOT, 'scripts', 'run_squad.py'))
run_squad = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(run_squad)


def run_script(output_dir, *extra):
    env = dict(os.environ, PYTHONWARNINGS='ignore')
    return subprocess.run([sys.executable, os.path.join(ROOT, 'scripts', 'run_squad.py'),
                           '--output-dir', str(output_dir)] + TINY + list(extra),
                          capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)


@pytest.fixture(scope='module')
def smoke_run(tmp_path_factory):
    out = tmp_path_factory.mktemp('squad')
    proc = run_script(out)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out, proc


def test_outputs_have_official_format(smoke_run):
    out, _ = smoke_run
    metrics = json.loads((out / 'metrics.json').read_text())
    assert OFFICIAL_KEYS <= set(metrics)
    assert {'train_seconds', 'train_features_per_second', 'eval_seconds'} <= set(metrics)
    assert metrics['total'] == 12
    predictions = json.loads((out / 'predictions.json').read_text())
    null_odds = json.loads((out / 'null_odds.json').read_text())
    assert set(predictions) == set(null_odds) and len(predictions) == 12
    assert all(isinstance(v, str) for v in predictions.values())
    assert metrics['null_threshold'] == 0.0
    assert metrics['null_threshold_source'] == 'default 0.0 (no --threshold-titles)'
    # the threshold rule: '' exactly where the score difference exceeds the threshold
    nbest = json.loads((out / 'nbest_predictions.json').read_text())
    for qid, text in predictions.items():
        if null_odds[qid] > 0.0:
            assert text == ''
        elif nbest[qid]:
            assert text == nbest[qid][0]['text']


def test_export_reload_matches(smoke_run):
    out, proc = smoke_run
    check = json.loads((out / 'export' / 'check.json').read_text())
    assert check['status'] == 'ok' and check['identical'] == check['total'] == 12
    assert check['max_abs_diff'] < 1e-4 and check['num_batches'] == 4
    assert 'export check: 12/12' in proc.stdout
    spec = json.loads((out / 'export' / 'qa-inputs.json').read_text())
    assert spec['input_names'] == ['input_ids', 'token_types', 'valid_length', 'p_mask']
    assert (out / 'export' / 'qa-symbol.json').exists()
    # the encoder ran the fused kernel (attention dropout 0 on CPU), and the spec says so
    uses_fused = '"ga_fused_attention"' in (out / 'export' / 'qa-symbol.json').read_text()
    assert uses_fused == fused.available()
    assert ('ga_fused_attention' in spec.get('custom_operators', {})) == uses_fused


def test_rerun_resumes_from_final_checkpoint_and_keeps_metrics(smoke_run):
    out, _ = smoke_run
    before = json.loads((out / 'metrics.json').read_text())
    proc = run_script(out, '--skip-export')
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert 'resuming from step 3 of 3' in proc.stdout
    after = json.loads((out / 'metrics.json').read_text())
    timing = {'train_seconds', 'train_features_per_second', 'eval_seconds'}
    assert {k: v for k, v in before.items() if k not in timing} == \
        {k: v for k, v in after.items() if k not in timing}
    # The training time of the run is kept in the checkpoints, so a rerun reports it too.
    assert before['train_seconds'] == after['train_seconds'] > 0
    assert before['train_features_per_second'] == after['train_features_per_second'] > 0


@pytest.mark.parametrize('extra, message', [
    (['--ctx', 'tpu(0)'], r"ctx must be .*Received: ctx='tpu\(0\)'"),
    (['--ctx', 'gpu(7)'], r'names a GPU but this MXNet sees \d+ GPU'),
    (['--model-dir', '/nonexistent_dir'], r"missing: config.json.*model_dir='/nonexistent_dir'"),
    (['--dropout', '1.5'], r'--dropout must lie in \[0, 1\)\. Received: dropout=1\.5'),
    (['--attention-dropout', '-0.1'], r'--attention-dropout must lie in \[0, 1\)'),
    (['--warmup-ratio', '2'], r'--warmup-ratio is a fraction in \[0, 1\]\. Received: '
                              r'warmup_ratio=2\.0'),
    (['--no-answer-chunk-ratio', '5'], r'--no-answer-chunk-ratio is a fraction in \[0, 1\]'),
    (['--grad-accum-steps', '0'], r'--grad-accum-steps must be a positive integer'),
    (['--adam-epsilon', '0'], r'--adam-epsilon must be a finite number > 0\. Received: '
                              r'adam_epsilon=0\.0'),
    (['--null-score-diff-threshold', 'nan'],
     r"--null-score-diff-threshold must be 'auto' or a finite number"),
    (['--eval-max-seq-length', '600'],
     r"--eval-max-seq-length must be at most the model's max_position_embeddings=512"),
    (['--threshold-titles', 'No_such_article'], r"No_such_article"),
    (['--exclude-titles', 'Normans,Computational_complexity_thoery'],
     r"--exclude-titles: expected every requested title in the training files .*Received: "
     r"missing=\['Computational_complexity_thoery'\]"),
    (['--max-steps', '0', '--epochs', '0'],
     r'--epochs must be > 0 when --max-steps is 0\. Received: epochs=0\.0, max_steps=0'),
])
def test_bad_arguments_are_one_line_errors(tmp_path, capsys, extra, message):
    """Before any work: SystemExit with one line naming the argument and what was received
    (status 2 from the parser for bad values, a message for what does not exist)."""
    with pytest.raises(SystemExit) as exit_info:
        run_squad.main(['--output-dir', str(tmp_path)] + TINY + extra)
    code = exit_info.value.code
    text = capsys.readouterr().err.strip().splitlines()[-1] if code == 2 else str(code)
    assert re.search(message, text), text
    assert not (tmp_path / 'run_config.json').exists()


def test_every_option_has_help_with_its_default():
    parser = run_squad.build_parser()
    for command in run_squad.COMMANDS:
        sub = parser._subparsers._group_actions[0].choices[command]  # pylint: disable=W0212
        options = [a for a in sub._actions if a.dest not in ('help', 'config_class', 'parser')]
        assert len(options) > (5 if command == 'curve' else 10)
        for action in options:
            assert action.help and '(default: {})'.format(action.default) in action.help, \
                action.dest
    epochs = [a for a in parser._subparsers._group_actions[0].choices['train']._actions
              if a.dest == 'max_steps'][0]
    assert '> 0 wins over --epochs' in epochs.help


def test_help_names_only_flags_of_its_own_command():
    """A help text that refers to another flag names one the command has (or says whose it
    is: "train's --threshold-titles")."""
    parser = run_squad.build_parser()
    for command in run_squad.COMMANDS:
        sub = parser._subparsers._group_actions[0].choices[command]  # pylint: disable=W0212
        flags = {flag for action in sub._actions for flag in action.option_strings}
        flags |= {'--no-' + f[2:] for f in flags}
        for action in sub._actions:
            named = set(re.findall(r"(?<!train's )(--[a-z][a-z0-9-]*)", action.help or ''))
            assert named <= flags, (command, action.dest, named - flags)


def test_export_inference_script_round_trip(tmp_path):
    """scripts/export_inference.py: export, reload in a fresh process at another B and T."""
    proc = subprocess.run([sys.executable, os.path.join(ROOT, 'scripts', 'export_inference.py'),
                           '--block', 'dot_product', '--threads', '1',
                           '--output-prefix', str(tmp_path / 'dpa')],
                          capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env=dict(os.environ, PYTHONWARNINGS='ignore'))
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout[proc.stdout.index('{'):])
    assert report['ok'] and report['max_abs_diff'] <= 1e-5
    assert os.path.exists(report['symbol']) and os.path.exists(report['inputs'])


def test_training_selection_with_plausible_spans():
    """With plausible spans, only the impossible questions' chunks that hold the plausible span
    follow --impossible-ratio; their other chunks follow --no-answer-chunk-ratio."""
    from types import SimpleNamespace
    from jobs.squad.data import select_training
    examples = [SimpleNamespace(is_impossible=False), SimpleNamespace(is_impossible=True)]
    kinds = {'answer': (0, False, 5), 'missed': (0, True, 0), 'plausible': (1, True, 5),
             'elsewhere': (1, True, 0)}
    features = [SimpleNamespace(kind=kind, example_index=e, is_impossible=imp, start_position=s)
                for kind, (e, imp, s) in kinds.items() for _ in range(400)]

    def kept(**ratios):
        config = TrainConfig(seed=0, max_train_features=0, **ratios)
        chosen = select_training(features, examples, config)
        return {kind: sum(f.kind == kind for f in chosen) / 400 for kind in kinds}

    plain = kept(impossible_ratio=1.0, no_answer_chunk_ratio=0.0, plausible_spans=0)
    assert plain == {'answer': 1.0, 'missed': 0.0, 'plausible': 1.0, 'elsewhere': 1.0}
    marked = kept(impossible_ratio=1.0, no_answer_chunk_ratio=0.0, plausible_spans=1)
    assert marked == {'answer': 1.0, 'missed': 0.0, 'plausible': 1.0, 'elsewhere': 0.0}
    mixed = kept(impossible_ratio=0.0, no_answer_chunk_ratio=0.5, plausible_spans=1)
    assert mixed['plausible'] == 0.0 and mixed['answer'] == 1.0
    assert 0.4 < mixed['missed'] < 0.6 and 0.4 < mixed['elsewhere'] < 0.6


@pytest.mark.parametrize('flag', ['--question', '--context'])
def test_predict_text_that_is_not_utf8_is_a_one_line_error(tmp_path, flag):
    """Bytes the shell passes that are not UTF-8 (ED A0 80: an encoded lone surrogate) reach
    Python as lone surrogates; predict refuses them before loading anything."""
    text = {'--question': 'Who ruled?', '--context': 'The Normans ruled.'}
    text[flag] = b'\xed\xa0\x80 who'
    argv = [sys.executable, os.path.join(ROOT, 'scripts', 'run_squad.py'), 'predict',
            '--output-dir', str(tmp_path), '--threads', '1'] + [
                x for pair in text.items() for x in pair]
    proc = subprocess.run(argv, capture_output=True, env=dict(os.environ, PYTHONWARNINGS='ignore'),
                          timeout=300, cwd=ROOT, check=False)
    err = proc.stderr.decode('utf-8', 'replace').strip().splitlines()
    assert proc.returncode == 2, err
    assert 'Traceback' not in ' '.join(err)
    assert '{} must be Unicode text that can be encoded as UTF-8'.format(flag) in err[-1], err
