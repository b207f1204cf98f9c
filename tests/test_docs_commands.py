"""Every ``launch.py`` and ``python`` command on every docs page (README.md and docs/*.md), in
fenced ``bash`` blocks, in the lines of plain fenced blocks that start with one, and in inline
code, is exercised as written:

- ``launch.py`` commands are parsed by fgnn's own parser (``fgnn.cli.build_parser``) and mapped
  to a config (``config_from_args``), and a Planetoid or named OGB dataset must come with the
  ``--data-root`` it cannot load without (or the page's ``FGNN_PLANETOID_ROOT=``);
- ``python -m MODULE`` and ``python SCRIPT.py`` commands are parsed by the parser the module or
  script builds itself: it runs as ``__main__`` until its ``parse_args``, which stops it there
  (a flag that does not exist exits 2 and fails the test; nothing trains, nothing joins a cluster);
- ``python -c CODE`` is compiled, ``python -m pytest PATH`` names a test file that exists.

Placeholders are substituted (``HEAD_IP``, ``DIR``, ``S``, ``$s``, ``OUT``, ...), ``{a|b}`` and
``a|b|c`` alternatives take the first, ``[--flag X]`` optional parts are kept, ``...`` dropped.
Commands that need a cluster, a GPU or a long run are only parsed; the README's and the
quickstart's short runs are run by ``test_docs_first_run.py`` and ``test_dashboard_job.py``.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import runpy
import shlex
import sys
from pathlib import Path

import pytest

from fgnn.cli import build_parser, config_from_args
from fgnn.data.spec import OGB_NAMES, PLANETOID_ENV, PLANETOID_NAMES, parse_spec

REPO = Path(__file__).resolve().parents[1]
DOCS = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md")])
_FENCE = re.compile(r"```([a-z]*)\n(.*?)```", re.S)
_INLINE = re.compile(r"`([^`]+)`")
_IS_COMMAND = re.compile(r"(^|[\s/])python(\s|$)|(^|\s)launch\.py(\s|$)")
_STARTS_COMMAND = re.compile(r"\s*(?:[A-Z_]+=\S+\s+)*(?:time\s+)?(?:\S*/)?(?:python|launch\.py)\s")
_OPERATORS = {";", "|", "||", "&&", ">", ">>", "2>&1", "&"}
#: placeholder -> value; all-caps words and ``$VARS`` not named here become a path
_VALUES = {"S": "0", "N": "2", "D": "2", "H": "16", "E": "1", "LR": "0.01",
           "HEAD_IP": "127.0.0.1", "HEAD": "127.0.0.1:6379", "$s": "0"}


def snippets(text: str) -> list[str]:
    """The page's shell lines (``bash`` blocks, continuations joined) and inline code spans
    that hold a ``python`` or ``launch.py`` command."""
    out = []
    for lang, body in _FENCE.findall(text):
        lines = body.replace("\\\n", " ").splitlines()
        if lang == "bash":
            out += lines
        elif not lang:                   # a plain block: its lines that start with a command
            out += [ln for ln in lines if _STARTS_COMMAND.match(ln)]
    prose = _FENCE.sub("", text)
    out += [re.sub(r",\n", ",", m.group(1)).replace("\n", " ") for m in _INLINE.finditer(prose)]
    return [s for s in out if _IS_COMMAND.search(s)]


def _placeholder(word: str) -> str:
    """``word`` with its placeholders filled and its first alternative taken."""
    word = re.sub(r"\{([^{}|]*)\|[^{}]*\}", r"\1", word)
    if "|" in word and not word.startswith(("'", '"')):
        word = word.split("|")[0]
    if word in _VALUES:
        return _VALUES[word]
    word = word.replace("$s", "0")
    if re.fullmatch(r"\$?[A-Z][A-Z_]*(\.json)?", word) or word.startswith("<"):
        return "/tmp/fgnn-doc-placeholder"
    return word


def split_commands(line: str) -> list[list[str]]:
    """The commands of one shell line: comments cut, optional ``[...]`` parts kept (their first
    alternative; a bare ``[word]`` dropped), split at ``;``, ``|``, ``&&`` and redirections,
    ``for ... do`` and ``time`` prefixes removed, placeholders filled."""
    line = re.sub(r"\[(-[^\]|]*)(\|[^\]]*)?\]", r"\1", line)
    line = re.sub(r"\[[a-z ]+\]", "", line)
    words = shlex.split(line.replace("\\|", "|"), comments=True)
    cmds, cur = [], []
    for w in words + [";"]:
        if w in _OPERATORS:
            cmds.append(cur)
            cur = []
        elif w != "...":
            cur.append(w)
    out = []
    for cmd in cmds:
        while cmd and cmd[0] in ("do", "time", "for", "done"):
            cmd = [] if cmd[0] in ("for", "done") else cmd[1:]
        if cmd:
            out.append([cmd[0]] + [_placeholder(w) for w in cmd[1:]])
    return out


def doc_commands() -> list[tuple[str, list[str]]]:
    """``(page, argv)`` of every python and launch.py command of every docs page."""
    out = []
    for doc in DOCS:
        for line in snippets(doc.read_text()):
            out += [(doc.name, c) for c in split_commands(line)
                    if any(re.search(r"(^|/)python$", w) or w == "launch.py" for w in c)]
    return out


COMMANDS = doc_commands()


class _Parsed(Exception):
    """Raised by the patched ``parse_args`` once a command's flags parsed."""


def parse_launch(argv: list[str], env: dict[str, str]) -> None:
    """``launch.py``'s arguments through fgnn's parser, and the data directory the dataset
    needs."""
    parser = build_parser()
    if len(argv) == 1 and argv[0].startswith("--"):   # a flag named in prose: it exists
        assert argv[0] in parser._option_string_actions, argv[0]
        return
    args = parser.parse_args(argv)
    config_from_args(args)
    kind = parse_spec(args.dataset)[0] if args.dataset else ""
    if (kind in PLANETOID_NAMES and PLANETOID_ENV not in env) or kind in OGB_NAMES:
        assert args.data_root, f"--dataset {args.dataset} loads only with --data-root DIR"


def parse_python(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """``python ARGS`` up to its own ``parse_args`` (``-m MODULE`` or ``SCRIPT.py``)."""
    if not argv:
        return                                    # the bare interpreter, named in prose
    if argv[0] == "-c":
        compile(argv[1], "<doc>", "exec")
        return
    if argv[0] == "-X":
        argv = argv[2:]
    if not argv:
        return
    if argv[:2] == ["-m", "pytest"]:
        paths = [a.split("::")[0] for a in argv[2:] if a.startswith("tests/")]
        assert all((REPO / p).exists() for p in paths), paths
        return
    target = argv[1] if argv[0] == "-m" else str(REPO / argv[0])
    if len(argv) == (2 if argv[0] == "-m" else 1):      # the program named in prose: it exists
        assert argv[0] != "-m" or importlib.util.find_spec(target), target
        assert argv[0] == "-m" or Path(target).is_file(), target
        return
    original = argparse.ArgumentParser.parse_args

    def stop(self, args=None, namespace=None):
        original(self, args, namespace)
        raise _Parsed()

    with monkeypatch.context() as patch:
        patch.setattr(argparse.ArgumentParser, "parse_args", stop)
        patch.chdir(REPO)
        patch.syspath_prepend(str(REPO))
        patch.setattr(sys, "argv", [target] + argv[2 if argv[0] == "-m" else 1:])
        run = runpy.run_module if argv[0] == "-m" else runpy.run_path
        with pytest.raises(_Parsed):
            run(target, run_name="__main__")


def exercise(cmd: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """One docs command: its ``VAR=value`` prefixes as its environment, then parsed."""
    env = {}
    while cmd and re.fullmatch(r"[A-Z_]+=.*", cmd[0]):
        key, value = cmd.pop(0).split("=", 1)
        env[key] = value
    if "launch.py" in cmd:
        parse_launch(cmd[cmd.index("launch.py") + 1:], env)
    else:
        parse_python(cmd[1:], monkeypatch)


def test_every_page_with_commands_is_covered():
    pages = {page for page, _ in COMMANDS}
    for name in ("README.md", "quickstart.md", "cluster.md", "cli.md", "dashboard.md", "gpu.md",
                 "large-graphs.md", "own-graph.md", "benchmarks.md", "api.md"):
        assert name in pages, name
    assert len(COMMANDS) >= 100, len(COMMANDS)


@pytest.mark.parametrize("page, cmd", COMMANDS,
                         ids=[f"{p}-{i}" for i, (p, _) in enumerate(COMMANDS)])
def test_docs_command_parses(page, cmd, monkeypatch):
    exercise(list(cmd), monkeypatch)


def test_a_flag_that_does_not_exist_fails(monkeypatch):
    """The check itself: a misspelt flag of launch.py, of a module and of a bench script fails,
    and so does a Planetoid dataset without its data directory (docs/cluster.md's old job)."""
    for line in ("python launch.py --dataset cora --data-root DIR --batchsize 8",
                 "python -m fgnn.report r.json --chek",
                 "PYTHONPATH=. python bench/link_gae.py --data-root DIR --no-such-flag"):
        with pytest.raises(SystemExit):
            exercise(split_commands(line)[0], monkeypatch)
    with pytest.raises(AssertionError, match="--data-root"):
        exercise(split_commands(".venv/bin/python launch.py --address HEAD_IP:6379 --devices 2 "
                                "--dataset cora --model gcn --report r.json")[0], monkeypatch)
