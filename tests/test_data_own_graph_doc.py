"""docs/own-graph.md: every python snippet runs (those needing an optional library skip without
it; those marked "not run" are only counted), so the page cannot rot."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "own-graph.md"
_BLOCK = re.compile(r"(?:<!-- (?P<mark>[^>]*) -->\n)?```python\n(?P<code>.*?)```", re.S)


def _blocks() -> list[tuple[str, str, str]]:
    """``(section, marker, code)`` of each python block; the marker is the HTML comment above
    it, the section its ``##`` heading."""
    text, out = DOC.read_text(), []
    for m in _BLOCK.finditer(text):
        heads = re.findall(r"^## (.+)$", text[:m.start()], re.M)
        section = re.sub(r"\W+", "-", heads[-1] if heads else "top").strip("-").lower()
        out.append((section, m.group("mark") or "", m.group("code")))
    return out


BLOCKS = _blocks()


def test_doc_covers_every_route():
    text = DOC.read_text()
    for needle in ("CSRGraph.from_edge_index", "CSRGraph.from_scipy", "from_pyg(", "from_dgl(",
                   "ogb:tiny_ogb", "from_ogb(", "save_dataset(", "ondisk:mygraph"):
        assert needle in text, needle
    assert sum(1 for _, mark, _ in BLOCKS if not mark) >= 4     # most snippets really run


@pytest.mark.parametrize("mark, code", [(m, c) for _, m, c in BLOCKS],
                         ids=[f"{i}-{h}" for i, (h, _, _) in enumerate(BLOCKS)])
def test_snippet_runs(mark, code, tmp_path, monkeypatch):
    if mark.startswith("not run"):
        compile(code, str(DOC), "exec")                          # still valid Python
        pytest.skip(mark)
    if mark.startswith("needs:"):
        pytest.importorskip(mark.split(":", 1)[1].strip())
    else:
        assert not mark, f"unknown marker {mark!r}"
    monkeypatch.chdir(tmp_path)                                   # snippets write relative dirs
    exec(compile(code, str(DOC), "exec"), {"__name__": "own_graph_doc"})
