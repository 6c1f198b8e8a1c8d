"""Tracked files speak of the project only: no absolute paths of the machine they were written on
(the repository's parent folder, the temporary folder, the home folder, a side virtual
environment) and no words about how the work was organised (source documents, their row ids).

System paths (``/proc``, ``/dev``, ``/usr/bin/env``) are fine. The package holds code only: data
sets are read from the data folder (docs/data.md), never shipped.
"""
import os
import re
import subprocess
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
#: What a tracked file of the package may be: Python, the C++ kernel sources.
PACKAGE_SUFFIXES = {'.py', '.cc', '.h', '.inc'}

# Words about how the work was organised rather than about the code. Each pattern is written
# (character classes, escapes) so that it does not match its own line.
PROCESS_WORDS = [
    r'\bseed[ -]00[0-9]\b',                      # the programs the library started from
    r'\bCASE[S](?:\.md| C[0-9])', r'(?<![A-Za-z0-9])C[0-9]{2}(?![0-9])',   # an outside case table, its ids
    r'\bTEAM[_]CONTRACT\b', r'\bteam\b',
    '\N{SECTION SIGN}',                          # sections of notes outside the repository
    r'\bissue[ -]#?[0-9]',
    r'\bsession[ -]?[0-9]', r'\b(?:this|last|same|next|previous) session\b',
    r'\bpeer[-]venv\b',                          # a side environment on one machine
]


def _tracked():
    """Paths (relative to the repository) of the tracked files that exist in the work tree."""
    out = subprocess.run(['git', 'ls-files', '-z'], cwd=str(REPO), capture_output=True,
                         check=True).stdout.decode('utf-8')
    return [p for p in out.split('\0') if p and (REPO / p).is_file()]


def _text(path):
    data = (REPO / path).read_bytes()
    return None if b'\0' in data else data.decode('utf-8', errors='replace')


def _machine_paths():
    """Absolute folders of this machine that a tracked file must not name."""
    folders = {str(REPO.parent), tempfile.gettempdir(), os.path.expanduser('~')}
    return sorted(f.rstrip('/') + '/' for f in folders if f.rstrip('/') not in ('', '/'))


def _offences(patterns):
    """'path:line: text' for every line of a tracked text file matching one of ``patterns``."""
    regex = re.compile('|'.join('(?:{})'.format(p) for p in patterns))
    found = []
    for path in _tracked():
        text = _text(path)
        if text is None:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if regex.search(line):
                found.append('{}:{}: {}'.format(path, number, line.strip()[:120]))
    return found


@pytest.fixture(scope='module')
def tracked():
    if not (REPO / '.git').exists():
        pytest.skip('not a git checkout')
    return _tracked()


def test_no_absolute_paths_of_this_machine(tracked):
    paths = [re.escape(p) for p in _machine_paths()]
    offences = _offences(paths)
    assert not offences, 'machine paths in tracked files:\n' + '\n'.join(offences)


def test_no_process_words(tracked):
    offences = _offences(PROCESS_WORDS)
    assert not offences, 'process words in tracked files:\n' + '\n'.join(offences)


def test_the_package_ships_no_data(tracked):
    """No data set inside the package or its wheel: the jobs read the data folder."""
    data = [p for p in tracked if p.startswith('gluon_attention/')
            and Path(p).suffix not in PACKAGE_SUFFIXES]
    assert not data, 'files other than code under gluon_attention/: {}'.format(data)
    setup = (REPO / 'setup.py').read_text(encoding='utf-8')
    assert 'resources' not in setup

