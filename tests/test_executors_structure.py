"""The shape of the runtime's three rooms, ``fgnn/runtime/`` (the driver), ``fgnn/executors/`` (the
workers) and ``fgnn/exchange/`` (issue 18, "an explicit epoch coordinator"): the runtime is
composed of objects that hold their own state (no mixins reading each other's attributes), and
no function is longer than 60 lines (def line to last line, docstring included)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "fgnn"
ROOMS = ("runtime", "executors", "exchange")
MAX_LINES = 60
#: Base classes a class of the package may have: exceptions and named tuples (not mixins).
ALLOWED_BASES = {"RuntimeError", "ArithmeticError", "NamedTuple", "Exception", "ValueError",
                 "Protocol"}


def _trees() -> list[tuple[str, ast.Module]]:
    return [(f"{room}/{p.name}", ast.parse(p.read_text(), str(p)))
            for room in ROOMS for p in sorted((PACKAGE / room).glob("*.py"))]


def test_no_function_is_longer_than_60_lines():
    long = [f"{name}:{n.lineno} {n.name} ({n.end_lineno - n.lineno + 1} lines)"
            for name, tree in _trees() for n in ast.walk(tree)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            and n.end_lineno - n.lineno + 1 > MAX_LINES]
    assert not long, "functions over 60 lines: " + "; ".join(long)


def test_no_mixins():
    """A class derives from at most one class of the package (a subclass, e.g.
    ``LocalSampling(SamplerExecutor)``), never from several: composition, not mixins."""
    local = {n.name for _, tree in _trees() for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    mixed = []
    for name, tree in _trees():
        for n in ast.walk(tree):
            if not isinstance(n, ast.ClassDef):
                continue
            bases = [ast.unparse(b).split(".")[-1] for b in n.bases]
            ours = [b for b in bases if b in local]
            others = [b for b in bases if b not in local and b not in ALLOWED_BASES]
            if len(ours) > 1 or others:
                mixed.append(f"{name}: {n.name}({', '.join(bases)})")
    assert not mixed, "classes composed of mixins: " + "; ".join(mixed)


@pytest.mark.parametrize("module", ["cache_plan", "resume", "epoch"])
def test_former_mixins_are_gone(module):
    import importlib

    mod = importlib.import_module(f"fgnn.runtime.{module}")
    for gone in ("CacheSetup", "Checkpointing", "EpochLoop"):
        assert not hasattr(mod, gone), f"fgnn.executors.{module}.{gone} is a mixin"
