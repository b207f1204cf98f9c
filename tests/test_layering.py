"""The declared layering of ``fgnn/`` (docs/architecture.md): no import cycle, imports point down.

Every module under ``fgnn/`` is parsed with :mod:`ast` and each of its imports of an fgnn module
is collected: top-level, function-local and ``TYPE_CHECKING`` imports alike, ``from fgnn.x import
y`` as an import of the submodule ``fgnn.x.y`` when ``y`` is one, relative imports resolved. A
*room* is a top-level module or package of ``fgnn/`` (``fgnn`` itself is the package's
``__init__``, its public API). The rooms stand in :data:`LAYERS`, top to bottom; a module may
import from its own layer and the layers below it, never from one above, and neither modules nor
rooms may import each other in a cycle.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path
from typing import Iterable, Mapping


ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "fgnn"

#: The rooms of fgnn/, top layer first. A room imports only from its own layer and those below.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("cli", "gpucheck", "fgnn"),            # entry points; the package's lazy public API
    ("job", "recipes", "memory_plan"),      # one job: dataset, runtime, outputs; flag recipes;
                                            # the memory plan it starts from
    ("outputs", "report"),                  # run outputs and the JSON report (read ledger keys)
    ("runtime",),                           # the driver: epochs, start-up, faults, resume, plans
    ("executors",),                         # the workers: Sampler, Trainer, queue, actors
    ("exchange",),                          # the gradient exchange: parameter server, collective
    ("tasks",),                             # what a job learns: node, link, recsys (one table)
    ("training", "evaluation", "inference", "model_file", "link"),   # what the tasks use
    ("monitor", "checkpoint"),
    ("models", "cache", "sampling"),
    ("data",),                              # loaders, converters, on-disk; homogeneous, typed
    ("graph", "config", "fieldtypes", "flags", "atomic", "raystart", "raylet_watch", "_lazy",
     "causes", "sigterm", "reaper", "subsets", "threads", "procmem", "gpu", "given", "cores"),
)

#: Imports (importer, imported) allowed against the rules (none: an exception is named here
#: with its reason). Each edge must still exist, so the list cannot go stale.
ALLOWED_IMPORTS: frozenset[tuple[str, str]] = frozenset()


def _modules() -> dict[str, Path]:
    """Dotted name -> file of every module under fgnn/ (a package by its ``__init__``)."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _owner(name: str) -> str:
    """The module ``name`` imports: itself, else its longest prefix that is a module."""
    while name not in MODULES:
        name = name.rpartition(".")[0]
        if not name:
            raise AssertionError(f"no module of fgnn/ matches {name!r}")
    return name


def _imports_of(module: str) -> set[tuple[str, int]]:
    """(imported fgnn module, line) of every import in ``module``."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {(_owner(a.name), node.lineno) for a in node.names
                    if a.name.split(".")[0] == "fgnn"}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            if base.split(".")[0] != "fgnn":
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                out.add((sub if sub in MODULES else _owner(base), node.lineno))
    return out


def _edges() -> dict[tuple[str, str], list[str]]:
    """(importer, imported) -> the ``file:line`` places of that import, self-imports left out."""
    out: dict[tuple[str, str], list[str]] = defaultdict(list)
    for module in MODULES:
        for target, line in sorted(_imports_of(module)):
            if target != module:
                out[module, target].append(f"{MODULES[module].relative_to(ROOT)}:{line}")
    return dict(out)


EDGES = _edges()


def room(module: str) -> str:
    """The top-level module or package of fgnn/ that ``module`` belongs to."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _layer_of() -> dict[str, int]:
    out = {}
    for i, rooms in enumerate(LAYERS):
        for r in rooms:
            assert r not in out, f"room {r!r} stands in two layers of LAYERS"
            out[r] = i
    return out


LAYER_OF = _layer_of()


def _checked() -> dict[tuple[str, str], list[str]]:
    return {e: where for e, where in EDGES.items() if e not in ALLOWED_IMPORTS}


def _cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        comp.append(top)
                        if top == node:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph.get(child, ())))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return out


def _cycle_text(comp: list[str], edges: Mapping[tuple[str, str], list[str]]) -> str:
    inside = set(comp)
    lines = [f"  {a} -> {b}  ({', '.join(where)})" for (a, b), where in sorted(edges.items())
             if a in inside and b in inside]
    return "\n".join(lines)


def test_every_room_of_fgnn_stands_in_one_layer():
    rooms = {room(m) for m in MODULES}
    missing = sorted(rooms - set(LAYER_OF))
    assert not missing, f"rooms of fgnn/ missing from LAYERS (place each in one layer): {missing}"
    gone = sorted(set(LAYER_OF) - rooms)
    assert not gone, f"LAYERS names rooms fgnn/ no longer has: {gone}"


def _private(module: str) -> bool:
    """Whether ``module`` is private to its room: some part of its dotted name below the room
    starts with an underscore (``fgnn.executors._streams``)."""
    return any(p.startswith("_") for p in module.split(".")[2:])


def test_no_module_imports_a_private_module_of_another_room():
    reach = [f"  {a} -> {b}  ({', '.join(where)})" for (a, b), where in sorted(EDGES.items())
             if _private(b) and room(a) != room(b)]
    assert not reach, ("imports of another room's private module (make it public or move the "
                       "caller):\n" + "\n".join(reach))


def test_the_private_module_rule_sees_a_reach_into_another_room():
    assert _private("fgnn.executors._streams") and _private("fgnn.data._x.y")
    assert not _private("fgnn.executors.trainer") and not _private("fgnn._lazy")


def test_no_import_cycle_between_modules():
    edges = _checked()
    graph: dict[str, set[str]] = defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
    found = [_cycle_text(c, edges) for c in _cycles(graph)]
    assert not found, "import cycles between modules:\n" + "\n\n".join(found)


def test_no_import_cycle_between_rooms():
    by_room: dict[tuple[str, str], list[str]] = defaultdict(list)
    for (a, b), where in _checked().items():
        if room(a) != room(b):
            by_room[room(a), room(b)].extend(f"{a} -> {b} ({w})" for w in where)
    graph: dict[str, set[str]] = defaultdict(set)
    for a, b in by_room:
        graph[a].add(b)
    found = [_cycle_text(c, by_room) for c in _cycles(graph)]
    assert not found, "rooms importing each other:\n" + "\n\n".join(found)


def test_every_import_points_to_its_own_layer_or_below():
    upward = [f"  {a} (layer {LAYER_OF[room(a)]}) -> {b} (layer {LAYER_OF[room(b)]})  "
              f"({', '.join(where)})" for (a, b), where in sorted(_checked().items())
              if LAYER_OF.get(room(b), -1) < LAYER_OF.get(room(a), -1)]
    assert not upward, "imports against LAYERS (top layer is 0):\n" + "\n".join(upward)


def test_the_architecture_doc_shows_the_layers():
    doc = (ROOT / "docs" / "architecture.md").read_text()
    block = doc.split("<!-- BEGIN LAYERS", 1)[1].split("<!-- END LAYERS -->", 1)[0]
    fenced = block.split("```")[1]
    shown = [tuple(r.strip() for r in line.split(",")) for line in fenced.splitlines()
             if line.strip()]
    assert shown == list(LAYERS), "docs/architecture.md's layers differ from LAYERS"


def test_every_allow_listed_import_still_exists():
    stale = sorted(ALLOWED_IMPORTS - set(EDGES))
    assert not stale, ("ALLOWED_IMPORTS lists imports that no longer exist; remove "
                       f"them: {stale}")


def test_the_import_collector_sees_local_relative_and_submodule_imports(tmp_path, monkeypatch):
    pkg = tmp_path / "fgnn"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "leaf.py").write_text("X = 1\n")
    (pkg / "other.py").write_text("Y = 2\n")
    (pkg / "sub" / "user.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "from fgnn.sub import leaf\n"
        "if TYPE_CHECKING:\n    import fgnn.other\n"
        "def f():\n    from ..other import Y\n    from . import leaf as L\n    return Y, L\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", pkg)
    monkeypatch.setattr(sys.modules[__name__], "MODULES", _modules())
    assert _imports_of("fgnn.sub.user") == {("fgnn.sub.leaf", 2), ("fgnn.other", 4),
                                            ("fgnn.other", 6), ("fgnn.sub.leaf", 7)}


def test_cycle_finder_reports_a_cycle_and_ignores_a_chain():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": {"c"}}) == []
