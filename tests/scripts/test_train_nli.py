"""scripts/train_nli.py and the NLI job (jobs.nli): the command line (its
sub-commands, every flag with its default, the --ctx grammar, the old mode flags refused), one tiny
run through every command (train, export check, run_config.json, evaluate, predict,
plot-attention) and the resumption of an interrupted run.

Tiny settings (160 training pairs, at most 3 updates of 16 pairs, hidden size 8) keep each run to
a few seconds; the script is loaded as a module and called in this process.
"""
import dataclasses
import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest
from conftest import data_file

from gluon_attention.data import snli
from jobs.engine import checkpoints, common
from jobs.engine.config import read_run_config
from jobs.nli.config import NLIConfig
from jobs.nli.model import INPUT_NAMES

ROOT = Path(__file__).resolve().parents[2]
TINY = ['--threads', '1', '--no-progress', '--max-train', '160', '--epochs', '2', '--max-steps',
        '3', '--batch-size', '16', '--num-hiddens', '8', '--seed', '7']


@pytest.fixture(scope='module')
def script():
    spec = importlib.util.spec_from_file_location('train_nli', ROOT / 'scripts' / 'train_nli.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _without_run_specifics(metrics):
    """The metrics less what differs between two runs of the same options: wall times and the
    export path."""
    metrics = json.loads(json.dumps(metrics))
    del metrics['train_wall_time_s'], metrics['export']['prefix']
    for record in metrics['history']:
        del record['elapsed_s']
    return metrics


def _small_valid(tmp_path, count=40):
    """The first ``count`` lines of a jsonl subset of the data folder, as a validation file."""
    lines = data_file('snli/jsonl/snli_1.0_dev_subsetA_1289.jsonl').read_text(encoding='utf-8')
    path = tmp_path / 'small.jsonl'
    path.write_text('\n'.join(lines.splitlines()[:count]), encoding='utf-8')
    return str(path)


def _subparser(script, command):
    return next(a for a in script.build_parser()._actions
                if a.dest == 'command').choices[command]


def test_help_names_every_command_and_train_is_the_default(script, capsys):
    with pytest.raises(SystemExit) as info:
        script.main(['--help'])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert '{train,evaluate,predict,plot-attention}' in out and "``train`` when none" in out


@pytest.mark.parametrize('command, options', [
    ('evaluate', {'output_dir', 'ctx', 'threads', 'output'}),
    ('predict', {'output_dir', 'ctx', 'threads'}),
    ('plot-attention', {'output_dir', 'ctx', 'threads', 'valid', 'data_dir'})])
def test_commands_that_use_a_trained_model_take_only_the_options_they_read(script, command,
                                                                          options):
    flags = {a.dest for a in _subparser(script, command)._actions if a.option_strings}
    assert flags - {'help'} == options


def test_help_lists_every_flag_with_its_default(script, capsys):
    with pytest.raises(SystemExit) as info:
        script.main(['train', '--help'])
    assert info.value.code == 0
    text = ' '.join(capsys.readouterr().out.split())
    actions = [a for a in _subparser(script, 'train')._actions if a.dest != 'help']
    assert {a.dest for a in actions} >= {f.name for f in dataclasses.fields(NLIConfig)}
    for action in actions:
        assert action.option_strings[0] in text
        assert '(default: {}'.format('' if action.default in ('', None) else action.default) \
            in ' '.join(action.help.split()), action.dest
    for field in dataclasses.fields(NLIConfig):
        assert '(default: {})'.format(field.default) in text, field.name


@pytest.mark.parametrize('ctx', ['gpu0', 'cpu,cpu'])
def test_ctx_outside_the_grammar_is_refused_naming_the_accepted_forms(script, capsys, tmp_path,
                                                                     ctx):
    with pytest.raises(SystemExit) as info:
        script.main(['--ctx', ctx, '--output-dir', str(tmp_path / 'out')])
    err = capsys.readouterr().err
    assert info.value.code == 2 and common.CTX_FORMS in err and 'Received: ctx=' in err
    assert not (tmp_path / 'out').exists()


@pytest.mark.parametrize('command', [[], ['predict', 'A man sleeps.', 'A person rests.']])
def test_ctx_naming_an_absent_gpu_is_a_one_line_error_before_anything_is_written(
        script, capsys, tmp_path, command):
    import mxnet as mx
    ctx = 'gpu({})'.format(mx.context.num_gpus())          # one past the last GPU there is
    with pytest.raises(SystemExit) as info:
        script.main(command + ['--ctx', ctx, '--output-dir', str(tmp_path / 'out')])
    err = capsys.readouterr().err.strip().splitlines()
    assert info.value.code == 2 and err[-1].endswith(
        "--ctx names a GPU but this MXNet sees {} GPU(s). Received: ctx='{}'".format(
            mx.context.num_gpus(), ctx)), err
    assert not (tmp_path / 'out').exists()


@pytest.mark.parametrize('argv, message', [
    (['predict', '', 'A person rests.'], "predict needs a non-empty premise and hypothesis. "
                                         "Received: premise='', hypothesis='A person rests.'"),
    (['predict', 'A man sleeps.', '  '], "predict needs a non-empty premise and hypothesis"),
    (['--evaluate', 'x.jsonl'], 'unrecognized arguments: --evaluate x.jsonl'),
    (['--predict', 'a', 'b'], 'unrecognized arguments: --predict a b'),
    (['--plot-attention', '2'], 'unrecognized arguments: --plot-attention 2'),
])
def test_empty_predict_sentences_and_the_old_mode_flags_are_one_line_errors(
        script, capsys, tmp_path, argv, message):
    with pytest.raises(SystemExit) as info:
        script.main(argv + ['--output-dir', str(tmp_path / 'out')])
    err = capsys.readouterr().err.strip().splitlines()
    assert info.value.code == 2 and message in err[-1], err
    assert not (tmp_path / 'out').exists()


def test_tiny_run_trains_exports_writes_run_config_and_serves_every_mode(script, tmp_path,
                                                                         capsys):
    out = tmp_path / 'run'
    metrics = script.main(TINY + ['--output-dir', str(out), '--glove', 'sample'])
    saved = json.loads((out / 'metrics.json').read_text())
    assert saved == json.loads(json.dumps(metrics)) and saved['data']['train_pairs'] == 160
    assert saved['data']['removed_overlap'] == 2527 and saved['num_examples'] == 2527
    assert saved['export']['same_predictions'] and saved['export']['max_abs_logit_diff'] < 1e-5
    assert saved['export']['num_batches'] == 10 and saved['history'][-1]['steps'] == 3
    assert saved['glove']['found'] > 0 and len(saved['confusion_matrix']) == 3
    config = read_run_config(out, NLIConfig)
    assert json.loads((out / 'run_config.json').read_text())['environment'] == {
        name: os.environ.get(name) for name in ('MXNET_SAFE_ACCUMULATION', 'OMP_NUM_THREADS')}
    assert config == NLIConfig(max_train=160, epochs=2, max_steps=3, batch_size=16, num_hiddens=8,
                               seed=7, glove='sample', threads=1, progress=False,
                               output_dir=str(out))
    assert json.loads((out / 'config.json').read_text())['model'] == {
        'embed_size': 100, 'num_hiddens': 8, 'dropout': 0.2}
    spec = json.loads((out / 'model-inputs.json').read_text())
    assert spec['input_names'] == INPUT_NAMES and spec['input_dtypes'] == ['int32'] * 4
    assert not [p for p in out.rglob('*') if '.tmp' in p.name]

    folder = tmp_path / 'lines'
    folder.mkdir()
    for kind in ('s1', 's2', 'labels'):
        rows = data_file('snli/esnli_infersent_format/' + kind + '.dev').read_text(
            encoding='utf-8').splitlines()
        for split, keep in (('mixed', rows[930:960]), ('late', rows[3000:3030])):
            (folder / (kind + '.' + split)).write_text('\n'.join(keep) + '\n', encoding='utf-8')
    common_args = ['--threads', '1', '--output-dir', str(out)]
    # dev pairs 930-959 hold the last of the 160 pairs trained on (783-942): refused, counted
    trained = _trained_pair_keys(160)
    mixed = snli.read_snli(str(folder / 'mixed'))
    count = sum((snli.normalize_text(p), snli.normalize_text(h)) in trained
                for p, h in zip(mixed.premises, mixed.hypotheses))
    assert 0 < count < 30
    with pytest.raises(SystemExit, match=r'but {} of the 30 pairs of .*mixed were .*validation '
                                         r'files of its training run, .*subsetA_1289\.jsonl, '
                                         r'.*subsetB_1277\.jsonl'.format(count)):
        script.main(['evaluate', str(folder / 'mixed')] + common_args)
    assert not (out / 'eval_metrics.json').exists()
    evaluated = script.main(['evaluate', str(folder / 'late')] + common_args)
    assert evaluated['num_examples'] == 30 and evaluated['trained_pairs_evaluated'] == 0
    assert json.loads((out / 'eval_metrics.json').read_text()) == json.loads(
        json.dumps(evaluated))
    probabilities = script.main(['predict', 'A dog runs.', 'An animal moves.'] + common_args)
    assert set(probabilities) == set(snli.LABELS)
    assert sum(probabilities.values()) == pytest.approx(1, abs=1e-6)
    assert Path(script.main(['plot-attention', '2'] + common_args)).stat().st_size > 1000

    # a folder written before trained_pairs was recorded: evaluated, the check skipped, said so
    model_config = json.loads((out / 'config.json').read_text())
    del model_config['trained_pairs']
    (out / 'config.json').write_text(json.dumps(model_config))
    capsys.readouterr()
    evaluated = script.main(['evaluate', str(folder / 'mixed')] + common_args)
    assert evaluated['num_examples'] == 30 and evaluated['trained_pairs_evaluated'] is None
    assert 'records no trained_pairs' in capsys.readouterr().err


def _trained_pair_keys(max_train):
    """The normalized (premise, hypothesis) of the first ``max_train`` default training pairs:
    the e-SNLI dev pairs that are not in the two jsonl subsets."""
    valid = set()
    for name in ('subsetA_1289', 'subsetB_1277'):
        for line in data_file('snli/jsonl/snli_1.0_dev_' + name + '.jsonl').read_text(
                encoding='utf-8').splitlines():
            record = json.loads(line)
            if record['gold_label'] != '-':         # unlabelled pairs are not read
                    valid.add((snli.normalize_text(record['sentence1']),
                           snli.normalize_text(record['sentence2'])))
    dev = snli.read_snli(str(data_file('snli/esnli_infersent_format/s1.dev')))
    keys = [(snli.normalize_text(p), snli.normalize_text(h))
            for p, h in zip(dev.premises, dev.hypotheses)]
    return set([key for key in keys if key not in valid][:max_train])


def test_plot_attention_refuses_more_pairs_than_it_can_draw_or_validation_holds(
        script, tmp_path, capsys):
    from jobs.nli.model import MAX_PLOT_PAIRS
    out = tmp_path / 'out'
    with pytest.raises(SystemExit, match=r'draws at most {} pairs .*Received: N={}$'.format(
            MAX_PLOT_PAIRS, MAX_PLOT_PAIRS + 1)):
        script.main(['plot-attention', str(MAX_PLOT_PAIRS + 1), '--output-dir', str(out)])
    valid = _small_valid(tmp_path, 6)
    labelled = sum(json.loads(line)['gold_label'] != '-'
                   for line in Path(valid).read_text(encoding='utf-8').splitlines())
    with pytest.raises(SystemExit, match=r'at most the number of validation pairs, {} in .*small'
                                         r'\.jsonl\. Received: N={}$'.format(labelled,
                                                                            labelled + 1)):
        script.main(['plot-attention', str(labelled + 1), '--valid', valid, '--output-dir',
                     str(out)])
    with pytest.raises(SystemExit, match=r'N must be a positive integer\. Received: N=0$'):
        script.main(['plot-attention', '0', '--output-dir', str(out)])
    assert not out.exists()


def test_interrupted_run_resumes_after_its_last_epoch_and_ends_as_an_uninterrupted_run(
        script, tmp_path, monkeypatch, capsys):
    """The run stops right after its first epoch's checkpoint (as if killed there); rerun with the
    same options it restores parameters and Adam state and ends with the straight run's metrics.
    A rerun with other training options is refused before anything is written."""
    args = TINY + ['--valid', _small_valid(tmp_path), '--max-steps', '0', '--max-train', '48']
    straight = script.main(args + ['--output-dir', str(tmp_path / 'straight')])
    real_save = checkpoints.CheckpointManager.save

    def save_then_die(self, *a, **k):
        real_save(self, *a, **k)
        raise KeyboardInterrupt('killed after the checkpoint')
    monkeypatch.setattr(checkpoints.CheckpointManager, 'save', save_then_die)
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        script.main(args + ['--output-dir', str(tmp_path / 'killed')])
    assert info.value.code == 130
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        'train_nli.py: stopped at step 3 of 6; the last checkpoint is step 3 ({}): rerun the '
        'same command to resume from it'.format(tmp_path / 'killed' / 'checkpoints'))
    monkeypatch.setattr(checkpoints.CheckpointManager, 'save', real_save)
    assert not (tmp_path / 'killed' / 'metrics.json').exists()
    capsys.readouterr()
    resumed = script.main(args + ['--output-dir', str(tmp_path / 'killed')])
    out = capsys.readouterr().out
    assert 'resuming from step 3 of 6 (after epoch 1)' in out
    assert [h['steps'] for h in straight['history']] == [3, 6]
    assert _without_run_specifics(resumed) == _without_run_specifics(straight)
    # the training log: a row per step (6 steps), the resumed run's rows after its checkpoint
    assert [line.split(':')[0] for line in out.splitlines() if line.startswith('step ')] == [
        'step 4/6', 'step 5/6', 'step 6/6']
    assert out.splitlines()[-1].startswith('model: {}'.format(tmp_path / 'killed' / 'best.params'))
    logs = [[{k: v for k, v in json.loads(line).items()
              if k in ('step', 'loss', 'lr', 'grad_norm')}
             for line in (tmp_path / run / 'train_log.jsonl').read_text().splitlines()]
            for run in ('straight', 'killed')]
    assert [row['step'] for row in logs[1]] == [1, 2, 3, 4, 5, 6] and logs[0] == logs[1]

    before = {p.name: p.read_bytes() for p in (tmp_path / 'killed').iterdir() if p.is_file()}
    with pytest.raises(SystemExit, match=r'other options \(--lr: 0\.001 there, 0\.01 now\).*'
                                         r'Received: options=\[.lr.\]'):
        script.main(args + ['--output-dir', str(tmp_path / 'killed'), '--lr', '0.01'])
    assert {p.name: p.read_bytes() for p in (tmp_path / 'killed').iterdir()
            if p.is_file()} == before
    # a damaged newest checkpoint is reported once; the run resumes from the older one
    folder = tmp_path / 'killed' / 'checkpoints'
    newest = json.loads((folder / 'checkpoints.json').read_text())[-1]
    (folder / newest['files']['params']['file']).write_bytes(b'damaged')
    capsys.readouterr()
    again = script.main(args + ['--output-dir', str(tmp_path / 'killed')])
    out, err = capsys.readouterr()
    assert err.count('checkpoint of step {} in'.format(newest['step'])) == 1, err
    assert 'fails its sha256 check' in err and 'resuming from step 3 of 6 (after epoch 1)' in out
    assert _without_run_specifics(again) == _without_run_specifics(straight)


def test_plot_without_matplotlib_says_how_to_install_it(script, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, 'matplotlib', None)      # import matplotlib fails
    with pytest.raises(SystemExit, match=r'pip install gluon_attention\[plots\]'):
        script.main(['plot-attention', '2', '--output-dir', str(tmp_path)])
    assert not list(tmp_path.iterdir())
