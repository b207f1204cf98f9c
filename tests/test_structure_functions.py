"""No function in ``fgnn/`` is longer than 60 lines (def line to last line, docstring included),
the project's standard; nested functions and methods count on their own."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MAX_LINES = 60
#: Functions allowed over the limit (none: a function that must be long is named here with the
#: reason). The list cannot go stale: an entry that no longer exists or is no longer too long
#: fails the test.
ALLOWED_LONG: frozenset[str] = frozenset()


def function_lengths(root: Path, package: str = "fgnn") -> dict[str, list[tuple[int, int]]]:
    """``"package/path.py:name" -> [(def line, length in lines), ...]`` for every function
    (``def`` or ``async def``, at any depth) of the ``.py`` files under ``root / package``."""
    out: dict[str, list[tuple[int, int]]] = {}
    for path in sorted((root / package).rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out.setdefault(f"{rel}:{node.name}", []).append(
                    (node.lineno, node.end_lineno - node.lineno + 1))
    return out


def too_long(lengths: dict[str, list[tuple[int, int]]]) -> dict[str, str]:
    """``"path:name" -> "path:line name (N lines)"`` of the functions over :data:`MAX_LINES`."""
    out = {}
    for key, found in lengths.items():
        path, name = key.rsplit(":", 1)
        over = [f"{path}:{line} {name} ({n} lines)" for line, n in found if n > MAX_LINES]
        if over:
            out[key] = "; ".join(over)
    return out


def test_no_function_is_longer_than_60_lines():
    long = too_long(function_lengths(REPO))
    offenders = [where for key, where in sorted(long.items()) if key not in ALLOWED_LONG]
    assert not offenders, "functions over 60 lines: " + "; ".join(offenders)


def test_the_allow_list_names_only_functions_still_too_long():
    lengths = function_lengths(REPO)
    long = too_long(lengths)
    gone = sorted(key for key in ALLOWED_LONG if key not in lengths)
    short = sorted(key for key in ALLOWED_LONG if key in lengths and key not in long)
    assert not gone, f"ALLOWED_LONG names functions that no longer exist: {gone}"
    assert not short, f"ALLOWED_LONG names functions of at most 60 lines now: {short}"


def test_the_check_names_a_61_line_function_and_passes_a_60_line_one(tmp_path):
    pkg = tmp_path / "pkg" / "sub"
    pkg.mkdir(parents=True)

    def source(name: str, lines: int) -> str:  # def line + (lines - 1) body lines
        return f"def {name}():\n" + "    x = 0\n" * (lines - 1)

    (pkg / "mod.py").write_text(source("fits", 60) + "\n\n" + source("long", 61) + "\n\n"
                                + "class C:\n    " + source("method", 62).replace("\n", "\n    "))
    long = too_long(function_lengths(tmp_path, "pkg"))
    assert long == {"pkg/sub/mod.py:long": "pkg/sub/mod.py:63 long (61 lines)",
                    "pkg/sub/mod.py:method": "pkg/sub/mod.py:127 method (62 lines)"}
