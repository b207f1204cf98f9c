"""README.md and docs/quickstart.md as a newcomer follows them: after the two set-up commands
(``make demo``, ``make test``) every command runs as written, and the figures the pages give come
from a run (the demo's accuracy is checked in ``test_dashboard_job.py``, which runs it). Every
``launch.py`` and ``python`` command of every page is parsed by ``test_docs_commands.py``."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", REPO / "docs" / "quickstart.md"]
_BLOCK = re.compile(r"```(bash|python)\n(.*?)```", re.S)


def blocks(page: Path, lang: str) -> list[str]:
    """The page's fenced code blocks in ``lang``."""
    return [body for kind, body in _BLOCK.findall(page.read_text()) if kind == lang]


def commands(page: Path) -> list[list[str]]:
    """Each shell command of the page's bash blocks, continuation lines joined, comments cut."""
    out = []
    for body in blocks(page, "bash"):
        for line in body.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words:
                out.append(words)
    return out


def claimed(text: str, what: str) -> float:
    """The figure a page gives as ``≈0.NN <what>`` (the one place the page states it)."""
    found = re.findall(rf"≈(0\.\d+)\s*{what}", text)
    assert len(found) == 1, f"expected one '≈0.NN {what}' claim, found {found}"
    return float(found[0])


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_python_command_runs_from_the_venv_make_creates(page):
    """``python launch.py`` fails with ``No module named 'torch'`` unless the venv is active;
    the pages call the venv's interpreter, as a newcomer after ``make demo`` has it."""
    cmds = [c for c in commands(page) if any("python" in w for w in c)]
    assert cmds, f"{page.name}: no python command found"
    for cmd in cmds:
        assert cmd[0] == ".venv/bin/python", f"{page.name}: {' '.join(cmd)}"


def test_the_readme_python_snippet_reaches_what_it_claims(tmp_path):
    """The README's Python job on Cora, run as written from the repository root."""
    if not (REPO.parent / "shared" / "data" / "planetoid" / "ind.cora.x").is_file():
        pytest.skip("the Planetoid files are not beside the repository")
    (snippet,) = blocks(REPO / "README.md", "python")
    claim = claimed(snippet, "")
    code = snippet + "\nimport json, sys\njson.dump(result.final, open(sys.argv[1], 'w'))\n"
    out = tmp_path / "final.json"
    run = subprocess.run([sys.executable, "-c", code, str(out)], cwd=REPO, capture_output=True,
                         text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    import json
    acc = json.loads(out.read_text())["test_acc"]
    assert acc >= 0.78, acc
    assert abs(acc - claim) <= 0.03, (acc, claim)
