"""The API reference (docs/api, Sphinx + numpydoc) builds without a single warning, as make docs
builds it (-W --keep-going): a docstring numpydoc cannot parse, a reST error, a page whose module
does not import, or a name of ``gluon_attention.__all__`` that no page documents fails here."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytest.importorskip('sphinx', reason='the [docs] extra is not installed')
pytest.importorskip('numpydoc', reason='the [docs] extra is not installed')


@pytest.fixture(scope='module')
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp('api')
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS='1')
    proc = subprocess.run([sys.executable, '-m', 'sphinx', '-b', 'html', '-q', '-W',
                           '--keep-going', str(ROOT / 'docs' / 'api'), str(out)],
                          capture_output=True, text=True, env=env, cwd=str(ROOT), timeout=300)
    return proc, out


def test_the_reference_builds_without_warnings(built):
    proc, out = built
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == '', proc.stderr          # -q: only warnings reach stderr
    assert (out / 'index.html').is_file()


def test_every_public_page_documents_its_objects(built):
    """Each page holds documented functions or classes (an automodule that imported nothing,
    or a module with an empty __all__, would render an empty page without a warning)."""
    _, out = built
    for page in ('core', 'compat', 'models', 'data', 'export', 'fused'):
        html = (out / (page + '.html')).read_text(encoding='utf-8')
        assert len(re.findall(r'<dl class="py (?:function|class)">', html)) >= 2, page


def test_the_top_level_page_links_every_exported_name(built):
    """Every name ``import gluon_attention`` exports is listed, linked to its documentation."""
    import gluon_attention
    _, out = built
    html = (out / 'gluon_attention.html').read_text(encoding='utf-8')
    linked = set(re.findall(r'<a class="reference internal" href="[^"]+" title="[^"]+">'
                            r'<code[^>]*><span class="pre">gluon_attention\.(\w+)</span>', html))
    names = getattr(gluon_attention, '__all__', None)
    if names is None:     # before the curated __all__: the names the package defines
        names = ['MultiHeadAttention', 'masked_softmax', 'BertEncoder', 'attend']
    assert set(names) <= linked, sorted(set(names) - linked)
