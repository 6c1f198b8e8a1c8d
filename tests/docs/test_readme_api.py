"""The README stays a user's page: at most 250 lines, no commit hashes or load averages (those
belong in docs/ and git), and its "Public API" section names exactly gluon_attention.__all__."""
import re
from pathlib import Path

import pytest

import gluon_attention

README = Path(__file__).resolve().parents[2] / 'README.md'


def _text():
    return README.read_text(encoding='utf-8')


def api_names(text):
    """The backquoted identifiers of the "Public API" section's bullet list."""
    section = text.split('\n## Public API\n', 1)[1].split('\n## ', 1)[0]
    bullets = re.findall(r'^- .*?(?=^\S|\Z)', section, re.S | re.M)
    return {name for bullet in bullets for name in re.findall(r'`([A-Za-z_]\w*)`', bullet)}


def test_readme_is_short_and_holds_no_measurement_history():
    text = _text()
    assert len(text.splitlines()) <= 250
    assert not re.findall(r'\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b', text)
    assert 'load average' not in text.lower()


def test_api_names_parses_the_bullets_only():
    text = '## Public API\n\n- a: `foo` (`x`), `Bar`\n- `baz`\n\nAfter: `not_this`\n## Next\n`no`'
    assert api_names('intro\n' + text) == {'foo', 'x', 'Bar', 'baz'}


@pytest.mark.skipif(not hasattr(gluon_attention, '__all__'),
                    reason='gluon_attention has no curated __all__ yet')
def test_readme_public_api_is_the_top_level_all():
    assert api_names(_text()) == set(gluon_attention.__all__)
