"""Every command line of the repository refuses an abbreviated flag (``allow_abbrev=False``): a
prefix is a typo until proven otherwise (``run_squad.py --max-step 5`` used to start a run).

Each script's parser is found by running its ``main`` until it parses; then, for the parser and
every sub-command, ``main`` runs on a command line whose one optional flag is a unique prefix of
a real one (the others required given in full), which argparse would take for the flag with
abbreviations on, and must exit with status 2 naming it as unrecognized before any work.
"""
import argparse
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(p.name for p in (ROOT / 'scripts').glob('*.py') if not p.name.startswith('_'))


class _Parsed(Exception):
    """Raised instead of parsing: carries the parser ``main`` built."""


def _load(name):
    if name == '__main__':
        from gluon_attention import __main__ as module
        return module
    spec = importlib.util.spec_from_file_location('script_' + name[:-3], ROOT / 'scripts' / name)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(ROOT / 'scripts'))       # a script may import a sibling script
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(ROOT / 'scripts'))
    return module


def _value(action):
    count = 0 if action.nargs == 0 else action.nargs if isinstance(action.nargs, int) else 1
    return [str(action.choices[0]) if action.choices else '1'] * count


def _abbreviated(parser):
    """[(argv, prefix, flag)]: one command line per leaf parser (per sub-command), ``prefix``
    a unique prefix of ``flag``; an optional flag is chosen when there is one, else a required
    one (whose refusal then reads 'the following arguments are required: <flag>')."""
    cases = []
    for action in parser._actions:                      # pylint: disable=protected-access
        if isinstance(action, argparse._SubParsersAction):  # pylint: disable=protected-access
            for name, sub in action.choices.items():
                cases += [([name] + argv, prefix, flag)
                          for argv, prefix, flag in _abbreviated(sub)]
    if cases:
        return cases
    flags = [s for a in parser._actions for s in a.option_strings if s.startswith('--')]
    required = [a for a in parser._actions if a.required and a.option_strings]
    positional = [a for a in parser._actions if not a.option_strings and a.nargs != '...'
                  and a.nargs != '?']
    optional = [a for a in parser._actions if not a.required and a.help != argparse.SUPPRESS]
    for action in optional + required:
        for flag in (s for s in action.option_strings if s.startswith('--') and s != '--help'):
            for end in range(4, len(flag)):
                prefix = flag[:end]
                if [f for f in flags if f.startswith(prefix)] == [flag]:
                    argv = [s for a in required if a is not action
                            for s in [a.option_strings[-1]] + _value(a)]
                    argv += [prefix] + _value(action)
                    argv += [s for a in positional for s in _value(a)]
                    return [(argv, prefix, flag)]
    return []


def _run_main(module, argv, substitute):
    """``module.main`` with ``sys.argv`` and the outermost parse replaced by ``substitute``."""
    original = argparse.ArgumentParser.parse_known_args
    depth = {'calls': 0}

    def spy(self, args=None, namespace=None):
        depth['calls'] += 1
        if depth['calls'] > 1:
            return original(self, args, namespace)
        if substitute is None:
            raise _Parsed(self)
        namespace, extras = original(self, substitute, namespace)
        if not extras:          # taken for the flag: stop before the script does any work
            raise AssertionError('{} accepted {}'.format(module.__name__, substitute))
        return namespace, extras

    saved = sys.argv
    sys.argv = [module.__name__] + list(argv)
    argparse.ArgumentParser.parse_known_args = spy
    try:
        main = module.main
        return main(list(argv)) if main.__code__.co_argcount else main()
    finally:
        argparse.ArgumentParser.parse_known_args = original
        sys.argv = saved


@pytest.mark.parametrize('name', SCRIPTS + ['__main__'])
def test_abbreviated_flags_are_refused(name, capsys):
    module = _load(name)
    with pytest.raises(_Parsed) as parsed:
        _run_main(module, ['--help-me-not'], None)
    cases = _abbreviated(parsed.value.args[0])
    assert cases, 'no long flag to abbreviate in {}'.format(name)
    for argv, prefix, flag in cases:
        with pytest.raises(SystemExit) as exit_info:
            _run_main(module, argv, argv)
        error = capsys.readouterr().err.strip().splitlines()[-1]
        refused = 'unrecognized arguments: {}'.format(prefix) in error or (
            'the following arguments are required: ' in error and flag in error)
        assert exit_info.value.code == 2 and refused, (name, argv, error)
