"""Sphinx configuration of the API reference (``make docs``: ``build/docs/index.html``).

The reference is generated from the numpydoc docstrings of the library's public modules; the
jobs (``jobs/``, ``scripts/``) are not part of it. Warnings fail the build (``-W --keep-going``
in the Makefile and in tests/docs/test_api_docs.py).
"""
import importlib
import sys
import warnings
from pathlib import Path

from sphinx.util import logging

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

project = 'gluon_attention'
author = 'gluon_attention contributors'
copyright = '2026, ' + author              # noqa: A001  (the name Sphinx reads)
release = version = importlib.import_module('gluon_attention').__version__

extensions = ['sphinx.ext.autodoc', 'numpydoc']
root_doc = 'index'
exclude_patterns = []
templates_path = []
html_theme = 'alabaster'
html_static_path = []

autodoc_default_options = {'members': True, 'member-order': 'bysource'}
autodoc_inherit_docstrings = False         # MXNet's own docstrings stay in MXNet's reference
autodoc_typehints = 'none'                 # types are written in the docstrings
numpydoc_show_class_members = False        # members come from autodoc, one entry each
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False

#: Pages of modules that other changes add (page -> the file that makes it buildable). A page
#: whose module file is missing is left out of the build; once the file exists, the page builds
#: and any warning it raises fails the build like every other page.
OPTIONAL_PAGES = {
    'optional/kernels': 'gluon_attention/core/kernels.py',
    'optional/pipelines': 'gluon_attention/pipelines/__init__.py',
    'optional/export_onnx': 'gluon_attention/export/onnx.py',
    'optional/hardware': 'gluon_attention/hardware.py',
    'optional/compat_gluonnlp': 'gluon_attention/compat/gluonnlp.py',
    'optional/convert': 'gluon_attention/convert/__init__.py',
}
PRESENT_PAGES = sorted(page for page, path in OPTIONAL_PAGES.items() if (ROOT / path).exists())
exclude_patterns += [page + '.rst' for page in OPTIONAL_PAGES if page not in PRESENT_PAGES]
LOGGER = logging.getLogger('gluon_attention.docs')


def show_warning(message, category, filename, lineno, file=None, line=None):
    """Python warnings raised while building (numpydoc's unknown sections, a deprecation in an
    imported module) become Sphinx warnings, so that ``-W`` fails on them too."""
    del file, line
    LOGGER.warning('%s: %s (%s:%s)', category.__name__, message, filename, lineno)


warnings.showwarning = show_warning


#: Where each name of ``gluon_attention.__all__`` is documented: a name whose target no page
#: documents is a warning (see :func:`resolve_alias`).
EXPORTED_TARGETS = set()


def toplevel_names():
    """reST list of the names ``import gluon_attention`` exports, each linked to its module."""
    package = importlib.import_module('gluon_attention')
    names = getattr(package, '__all__', None)
    curated = names is not None
    if not curated:
        names = sorted(n for n in vars(package) if not n.startswith('_')
                       and getattr(getattr(package, n), '__module__', None))
    lines = []
    for name in names:
        obj = getattr(package, name)
        module = getattr(obj, '__module__', None) or package.__name__
        target = '{}.{}'.format(module, getattr(obj, '__qualname__', name))
        lines.append('* :py:obj:`gluon_attention.{} <{}>`'.format(name, target))
        if curated:
            EXPORTED_TARGETS.add(target)
    return '\n'.join(lines)


def canonical_target(target):
    """The documented name of ``target`` when it is a public alias (``gluon_attention.BertEncoder``
    for ``gluon_attention.models.encoder.BertEncoder``); None when it is no importable object."""
    if not target or not target.startswith('gluon_attention.'):
        return None
    obj = importlib.import_module('gluon_attention')
    for part in target.split('.')[1:]:
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    if isinstance(obj, type(sys)):
        return obj.__name__
    module, qualname = getattr(obj, '__module__', None), getattr(obj, '__qualname__', None)
    return '{}.{}'.format(module, qualname) if module and qualname else None


def resolve_alias(app, env, node, contnode):
    """Resolve a reference to a public alias through the name its object is documented under;
    warn when a name of ``gluon_attention.__all__`` is documented nowhere."""
    target = node.get('reftarget')
    canonical = canonical_target(target)
    if canonical and canonical != target and node.get('refdomain') == 'py':
        found = env.get_domain('py').resolve_any_xref(env, node['refdoc'], app.builder,
                                                      canonical, node, contnode)
        if found:
            return found[0][1]
    if target in EXPORTED_TARGETS:
        LOGGER.warning('gluon_attention.__all__ exports %s, which no page of the reference '
                       'documents', target, location=node)
    return None


def optional_toctree():
    """reST toctree of the optional pages whose modules exist (nothing when none does)."""
    if not PRESENT_PAGES:
        return ''
    return '.. toctree::\n   :maxdepth: 2\n   :caption: More modules\n\n' + ''.join(
        '   {}\n'.format(page) for page in PRESENT_PAGES)


def fill_placeholders(app, docname, source):   # pylint: disable=unused-argument
    """Replace the placeholders of the index and the top-level page by generated lists."""
    if docname == 'gluon_attention':
        source[0] = source[0].replace('.. TOPLEVEL-NAMES', toplevel_names())
    elif docname == 'index':
        source[0] = source[0].replace('.. OPTIONAL-PAGES', optional_toctree())


def setup(app):
    app.connect('source-read', fill_placeholders)
    app.connect('missing-reference', resolve_alias)
