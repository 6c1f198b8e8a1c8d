"""Ctrl-C during ``run_squad.py train``: no traceback, one line naming the step it stopped at and
the last checkpoint, exit status 130; rerunning the same command resumes from that checkpoint."""
import pytest

from jobs.squad import loop
from squad_tiny import make_tiny_bert, make_train_file, script_module, tiny_args

run_squad = script_module()


def test_ctrl_c_names_the_last_checkpoint_and_the_rerun_resumes(tmp_path, monkeypatch, capsys):
    bert, train_file = make_tiny_bert(tmp_path / 'bert'), make_train_file(tmp_path / 'train.json')
    out = tmp_path / 'run'
    argv = ['train', '--output-dir', str(out)] + tiny_args(bert, train_file) + ['--skip-export']
    counted = loop._Progress.__call__

    def ctrl_c_after_the_third_step(self, result):
        counted(self, result)
        if result.step == 2:
            raise KeyboardInterrupt
    with monkeypatch.context() as patch:
        patch.setattr(loop._Progress, '__call__', ctrl_c_after_the_third_step)
        capsys.readouterr()
        with pytest.raises(SystemExit) as info:
            run_squad.main(argv)
    assert info.value.code == 130
    # --max-steps 3, --checkpoint-every 2: the third step is done, the checkpoint is the second
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        'run_squad.py: stopped at step 3 of 3; the last checkpoint is step 2 ({}): rerun the '
        'same command to resume from it'.format(out / 'checkpoints'))
    assert run_squad.main(argv) == 0
    assert 'resuming from step 2 of 3' in capsys.readouterr().out
