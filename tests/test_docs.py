"""Every ```python block in docs/*.md runs (each block in a fresh default graph)."""

import re
from pathlib import Path

import pytest

import tensorweave as tw

DOCS = Path(__file__).resolve().parent.parent / "docs"
BLOCKS = [
    pytest.param(block, id=f"{path.name}:{i}")
    for path in sorted(DOCS.glob("*.md"))
    for i, block in enumerate(re.findall(r"```python\n(.*?)```", path.read_text(), re.S))
]


@pytest.mark.parametrize("code", BLOCKS)
def test_doc_example_runs(code, capsys):
    tw.reset_default_graph()
    exec(compile(code, "<doc>", "exec"), {"__name__": "__doc_example__"})  # our own docs, not remote input
