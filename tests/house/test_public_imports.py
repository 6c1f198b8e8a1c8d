"""The jobs and scripts use the library through its public modules: no import of a
``gluon_attention`` module or name that starts with ``_`` (``_checks``, ``_resources``, ``_ops``,
a private function). What a job needs from the library is public there (``gluon_attention.checks``,
``gluon_attention.resources``, ``gluon_attention.files``, ...)."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def private_imports(source):
    """``module`` or ``module.name`` of every import in ``source`` that reaches a private part of
    ``gluon_attention`` (a module or a name starting with ``_``; dunder modules such as
    ``__main__`` are entry points, not private)."""
    def private(dotted):
        return any(p.startswith('_') and not p.endswith('__') for p in dotted.split('.'))
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names
                      if a.name.split('.')[0] == 'gluon_attention' and private(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (
                node.module or '').split('.')[0] == 'gluon_attention':
            found += ['{}.{}'.format(node.module, a.name) for a in node.names
                      if private('{}.{}'.format(node.module, a.name))]
    return found


def test_the_check_finds_private_imports():
    source = ('import gluon_attention._checks\nfrom gluon_attention import _resources, checks\n'
              'def f():\n    from gluon_attention.core._ops import get_F\n'
              '    from gluon_attention.models.qa import _head\n'
              'from gluon_attention.export.__main__ import main\nimport _threads\n')
    assert private_imports(source) == ['gluon_attention._checks', 'gluon_attention._resources',
                                       'gluon_attention.core._ops.get_F',
                                       'gluon_attention.models.qa._head']


def test_jobs_and_scripts_import_only_public_library_modules_and_names():
    paths = sorted((ROOT / 'jobs').rglob('*.py')) + sorted((ROOT / 'scripts').glob('*.py'))
    assert len(paths) > 40
    bad = {str(p.relative_to(ROOT)): private_imports(p.read_text(encoding='utf-8'))
           for p in paths}
    assert not {k: v for k, v in bad.items() if v}
