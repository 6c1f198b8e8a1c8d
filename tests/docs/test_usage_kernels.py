"""docs/usage.md teaches the kernel choice as ``kernels=Kernels(...)``, never the deprecated
keywords (``backend=``, the encoders' ``fused_attention=``/``fused_rowwise=``/``matmul_dtype=``),
and ``python -m gluon_attention --help`` describes both of its jobs."""
import re
from pathlib import Path

import pytest

from gluon_attention.__main__ import main

ROOT = Path(__file__).resolve().parents[2]
DEPRECATED = r'(?<![\w.])(backend|fused_attention|fused_rowwise)=|(?<!Kernels\()matmul_dtype='


def test_usage_teaches_kernels_not_the_deprecated_keywords():
    text = (ROOT / 'docs' / 'usage.md').read_text(encoding='utf-8')
    found = [line for line in text.splitlines() if re.search(DEPRECATED, line)]
    assert re.search(DEPRECATED, "MultiHeadAttentionCell(backend='fused')")   # the pattern bites
    assert not re.search(DEPRECATED, "Kernels(matmul_dtype='bfloat16')")
    assert not found, found
    assert "MultiHeadAttentionCell(kernels=Kernels(attention='fused'))" in text


def test_help_describes_convert(capsys):
    with pytest.raises(SystemExit) as done:
        main(['--help'])
    assert done.value.code == 0
    out = ' '.join(capsys.readouterr().out.split())
    assert 'convert a GluonNLP 0.10 model' in out and 'convert --help' in out
