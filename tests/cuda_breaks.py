"""Break each CUDA-only branch of :data:`cuda_coverage.BRANCHES` on purpose and show its tests fail.

A tool, not a test (pytest collects ``test_*.py`` only). The package and the tests are copied to
a temporary directory once; for each branch its line is replaced by the broken one there (the
worktree is never touched), its covering tests run against the copy, and the break counts as
caught when they fail. Prints one line per branch and the counts; exits 1 if a break survives.

Usage::

    PYTHONPATH=. python tests/cuda_breaks.py [--only SUBSTRING] [--python PYTHON]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cuda_coverage import BRANCHES, ROOT, Branch, line_number  # noqa: E402


def copy_tree(dest: Path) -> None:
    """The package, the tests and the project file under ``dest``."""
    shutil.copytree(ROOT / "fgnn", dest / "fgnn", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "tests", dest / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")


def run_broken(b: Branch, tree: Path, python: str) -> tuple[bool, str]:
    """Apply ``b``'s break in ``tree``, run its tests, restore; ``(caught, last output line)``."""
    path = tree / b.path
    original = path.read_text()
    lines = original.splitlines(keepends=True)
    n = line_number(b, tree) - 1
    lines[n] = b.replaced() + "\n"
    path.write_text("".join(lines))
    try:
        proc = subprocess.run(
            [python, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *b.tests],
            cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)}, capture_output=True,
            text=True, timeout=300)
        tail = (proc.stdout.strip().splitlines() or [""])[-1]
        return proc.returncode != 0, tail
    finally:
        path.write_text(original)


def main(argv: list[str] | None = None) -> int:
    """Break every branch (or those matching ``--only``) in turn; print the counts."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="only branches whose path or line has this")
    ap.add_argument("--python", default=sys.executable)
    args = ap.parse_args(argv)
    chosen = [b for b in BRANCHES if args.only in b.path or args.only in b.line]
    caught = 0
    with tempfile.TemporaryDirectory(prefix="fgnn-breaks-") as tmp:
        tree = Path(tmp)
        copy_tree(tree)
        for b in chosen:
            ok, tail = run_broken(b, tree, args.python)
            caught += ok
            where = f"{b.path}:{line_number(b, tree)}"
            print(f"{'caught  ' if ok else 'SURVIVED'}  {where}  {b.replaced().strip()[:60]}"
                  f"  -> {tail}", flush=True)
    print(f"breaks caught: {caught}/{len(chosen)}")
    return 0 if caught == len(chosen) else 1


if __name__ == "__main__":
    sys.exit(main())
