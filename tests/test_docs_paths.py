"""The docs name no machine-specific path: every command in them runs on a user's machine."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md")])
# Home and workspace folders of particular machines, and interpreters inside them.
MACHINE_PATH = re.compile(r"(?<![\w.])/(?:work|home|Users|root)/[\w.-]+")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_doc_names_no_machine_specific_path(doc):
    hits = [f"{doc.name}:{n}: {m.group(0)}" for n, line in enumerate(doc.read_text().splitlines(), 1)
            for m in MACHINE_PATH.finditer(line)]
    assert not hits, "machine-specific paths in the docs:\n" + "\n".join(hits)
