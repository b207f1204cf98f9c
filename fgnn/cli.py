"""The command line of ``launch.py``: flags → :class:`~fgnn.config.JobConfig` → :class:`fgnn.Job`.

Every flag but ``--no-progress`` and ``--debug`` is generated from the flag metadata of one
dataclass field in :mod:`fgnn.config` (:func:`fgnn.flags.flag`; :data:`FLAG_FIELDS` lists them),
so a new config field with that metadata is a new flag; nothing deeper reads flags. A bad value
exits with status 2 and one line naming the flag and value, before Ray starts where it can, and
no report is written.

Defaults come from a recipe (:mod:`fgnn.recipes`): Kipf & Welling's for ``--model gcn`` on a
Planetoid dataset, FGNN §7.1's otherwise; a flag the user types always wins over the recipe, and
``--recipe off`` applies none. :func:`fgnn.recipes.resolve_recipe` applies it, as for a
:class:`~fgnn.config.JobConfig` built in Python.

``python -m fgnn.cli --markdown`` prints the flag table of ``docs/cli.md``.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import threading
import time
import traceback
from typing import Any, NoReturn, Optional, Sequence

#: When this module was imported: the start of the run's time line where the kernel does not
#: say when the process started (:func:`fgnn.monitor.timeline.process_start`).
_IMPORTED_AT = time.time()

from fgnn.causes import root_cause, strip_ansi
from fgnn.config import JobConfig
from fgnn.flags import add_flags, build_config, flag_values, leaves, sections
from fgnn.recipes import (FGNN_RECIPE, GAE_RECIPE, KIPF_RECIPE, PINSAGE_REC_RECIPE, Recipe,
                          VELICKOVIC_RECIPE, model_sampler, resolve_recipe)

__all__ = ["build_parser", "config_from_args", "main", "flags_markdown", "FLAG_FIELDS"]

PROG = "launch.py"

#: The help groups of ``--help``, in order (each config field's flag metadata names its group).
GROUPS = ("data", "model", "task", "devices and runtime", "cache", "disk tier (GIDS)",
          "sampling", "training", "output")

_LEAVES = leaves(JobConfig)
#: Flag → dotted JobConfig field it sets.
FLAG_FIELDS: dict[str, str] = {leaf.flag: leaf.path for leaf in _LEAVES}
_FIELD_FLAGS = {v: k for k, v in FLAG_FIELDS.items()}
_DEST_FIELDS = {leaf.dest: leaf.path for leaf in _LEAVES}
#: Config class name → its dotted place in JobConfig ("" for JobConfig itself).
_CLASS_PREFIX = {cls.__name__: path for path, cls in sections(JobConfig).items()}

#: Recipes whose value of a field the field's help names beside its default.
_NOTED_RECIPES = (KIPF_RECIPE, GAE_RECIPE)

_DESCRIPTION = (
    "Train a GNN with the fgnn factored runtime (FGNN/GNNLab design) on Ray. With no flags it "
    "trains on a small synthetic R-MAT graph. Recipes: --model gcn on cora|citeseer|pubmed uses "
    f"{KIPF_RECIPE.name} ({KIPF_RECIPE.summary}) for every flag not given, and --task link on "
    f"them (with --model gcn or sage) uses {GAE_RECIPE.name} ({GAE_RECIPE.summary}); --task "
    f"recsys --model pinsage uses {PINSAGE_REC_RECIPE.name} ({PINSAGE_REC_RECIPE.summary}); "
    f"--model gat on cora|citeseer|pubmed uses {VELICKOVIC_RECIPE.name} "
    f"({VELICKOVIC_RECIPE.summary}); other "
    f"datasets and models use {FGNN_RECIPE.name} ({FGNN_RECIPE.summary}); --recipe off applies "
    "none. The defaults below say where those recipes differ; the run's output and report name "
    "the recipe that applied. --batch-size auto (the default) adapts the batch to the training "
    "split and says so in one line.")
_EPILOG = ("Example: python launch.py --dataset cora --data-root ../shared/data/planetoid "
           "--model gcn --devices 4 --epochs 30 --report r.json")


# ---------------------------------------------------------------------- parser
class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line: ``launch.py: error: argument --x: ...``.

    Its namespaces also carry ``given_dests``, the destinations of the flags the command line
    typed (a recipe fills only the others)."""

    _probe = False

    def error(self, message: str) -> NoReturn:  # noqa: D102
        self.exit(2, f"{self.prog}: error: {message}{self._suggestion(message)}\n")

    def _suggestion(self, message: str) -> str:
        """``; did you mean --batch-size?`` for an unrecognized flag close to a real one
        (:func:`difflib.get_close_matches`), else ``""``."""
        import difflib

        prefix = "unrecognized arguments: "
        if not message.startswith(prefix):
            return ""
        flags = [o for a in self._actions for o in a.option_strings if o.startswith("--")]
        hints = []
        for arg in message[len(prefix):].split():
            if arg.startswith("-"):
                close = difflib.get_close_matches(arg.split("=", 1)[0], flags, n=1, cutoff=0.75)
                hints += [f"{arg.split('=', 1)[0]}: did you mean {c}?" for c in close]
        return f" ({'; '.join(hints)})" if hints else ""

    def parse_known_args(self, args=None, namespace=None):  # noqa: D102
        ns, extras = super().parse_known_args(args, namespace)
        if not self._probe:
            # A twin parser without defaults: what it returns is what the command line typed.
            probe = build_parser(self.prog)
            probe._probe = True
            for action in probe._actions:
                action.default = argparse.SUPPRESS
            ns.given_dests = frozenset(vars(probe.parse_known_args(args)[0]))
        return ns, extras


def _recipe_note(recipe: Recipe, field: str) -> str:
    """``; NAME: V`` for a help text's default, V the recipe's value of ``field`` (``""`` when
    the recipe leaves the field alone)."""
    if field not in recipe.values:
        return ""
    value = recipe.values[field]
    text = ",".join(map(str, value)) if isinstance(value, tuple) else str(value)
    return f"; {recipe.name}: {text}"


def _recipe_notes(field: str) -> str:
    """The notes of every recipe of :data:`_NOTED_RECIPES` that sets ``field``
    (``; kipf-welling: 64; gae: 32``)."""
    return "".join(_recipe_note(r, field) for r in _NOTED_RECIPES)


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """The ``launch.py`` parser: a flag for every :class:`JobConfig` field with flag metadata,
    in the groups of :data:`GROUPS`; every default shown in ``--help`` comes from the configs."""
    p = _Parser(prog=prog, description=_DESCRIPTION, epilog=_EPILOG)
    groups = add_flags(p, JobConfig, GROUPS, note=_recipe_notes)
    out = groups["output"]
    out.add_argument("--no-progress", action="store_true", default=False,
                     help="no progress bars or per-epoch lines (default: %(default)s)")
    out.add_argument("--debug", action="store_true", default=False,
                     help="on a failure, print the Python traceback after the one-line error "
                          "(default: %(default)s)")
    return p


# ---------------------------------------------------------------------- flags → config
def config_from_args(args: argparse.Namespace) -> JobConfig:
    """Map parsed flags onto a :class:`JobConfig`, then resolve its recipe
    (:func:`fgnn.recipes.resolve_recipe`: unless ``--recipe off``, the recipe of the dataset,
    model and task fills the fields whose flags ``args.given_dests`` does not name; a namespace
    without ``given_dests``, built by hand, counts the values other than the defaults as given).

    Raises:
        ValueError: from a config's own validation (e.g. ``--samplers`` >= ``--devices``).
    """
    values = flag_values(JobConfig, args)
    _sampler_defaults(values)
    config = build_config(JobConfig, values)
    given = getattr(args, "given_dests", None)
    fields = None if given is None else {_DEST_FIELDS[d] for d in given if d in _DEST_FIELDS}
    return resolve_recipe(config, fields)


def _sampler_defaults(values: dict[str, Any]) -> None:
    """Fill ``sampler.kind`` and ``sampler.fanouts`` (``None`` when their flags are not given)
    from the model (:func:`fgnn.recipes.model_sampler`): random walks for pinsage, k-hop with
    :data:`fgnn.config.DEFAULT_FANOUTS` otherwise.

    Raises:
        ValueError: ``--fanouts`` given to random-walk sampling.
    """
    fanouts = values["sampler.fanouts"]
    kind, full = model_sampler(values["model.name"], values["sampler.kind"], fanouts)
    if kind == "random_walk" and fanouts is not None:
        raise ValueError(f"SamplerConfig.fanouts: not used by random-walk sampling (PinSAGE); "
                         f"set --num-layers, --num-walks, --walk-length, --top-k instead. "
                         f"Received fanouts={','.join(map(str, fanouts))} instead.")
    values.update({"sampler.kind": kind, "sampler.fanouts": full})


def flag_for_error(err: ValueError) -> str:
    """Rewrite a config or job error as ``argument --flag: ...`` (the flag the user typed)."""
    from fgnn.job import JobConfigError
    if isinstance(err, JobConfigError):
        flag = _FIELD_FLAGS.get(err.field)
        if flag:
            if err.value is None:  # the flag was not given: fgnn chose the value
                return f"argument {flag}: {err.why}. {flag} was not given (its default chosen)."
            return f"argument {flag}: {err.why}. Received {flag}={err.value!r}."
        return str(err)
    m = re.match(r"^(\w+)\.(\w+): (.*)$", str(err), re.S)
    if m and m.group(1) in _CLASS_PREFIX:
        prefix = _CLASS_PREFIX[m.group(1)]
        field = f"{prefix}.{m.group(2)}" if prefix else m.group(2)
        flag = _FIELD_FLAGS.get(field)
        if flag:
            return f"argument {flag}: {m.group(3)}"
    return str(err)


# ---------------------------------------------------------------------- docs
def flags_markdown(parser: Optional[argparse.ArgumentParser] = None) -> str:
    """The flag table of ``docs/cli.md``, generated from the parser (a test keeps them equal)."""
    parser = parser or build_parser()
    rows = ["| flag | value | default | sets | description |",
            "|---|---|---|---|---|"]
    for action in parser._actions:  # argparse has no public iterator over actions
        if not action.option_strings or action.dest == "help":
            continue
        flag = max(action.option_strings, key=len)
        if action.choices:
            value = "{" + ",".join(map(str, action.choices)) + "}"
        elif action.nargs == 0:
            value = ""
        else:
            value = action.metavar or action.dest.upper()
        help_text = (action.help or "").replace("%(default)s", str(action.default))
        m = re.search(r"\s*\(default:? ?(.*)\)$", help_text)
        default = m.group(1) if m else str(action.default)
        desc = help_text[:m.start()] if m else help_text
        field = FLAG_FIELDS.get(flag, "")
        sets = f"`{field}`" if field else "-"
        cell = lambda s: s.replace("|", "\\|")  # noqa: E731
        rows.append(f"| `{flag}` | {cell(f'`{value}`' if value else '')} | "
                    f"{cell(f'`{default}`')} | {sets} | {cell(desc)} |")
    return "\n".join(rows) + "\n"


# ---------------------------------------------------------------------- entry point
def main(argv: Optional[Sequence[str]] = None, prog: str = PROG) -> int:
    """Parse flags, validate, run the job; returns the exit status (bad input exits 2)."""
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    try:
        config = config_from_args(args)
    except ValueError as e:
        parser.error(flag_for_error(e))
    from fgnn.cores import layout_refusal

    too_many = layout_refusal(config.runtime)  # before torch's import: seconds under load
    if too_many is not None:
        parser.error(f"argument --devices: {too_many}. "
                     f"Received --devices={config.runtime.devices!r}.")

    from fgnn.monitor.heartbeat import heartbeat

    with heartbeat(lambda line: print(line, flush=True), "importing torch"):  # seconds, loaded
        from fgnn.atomic import WriteError
        from fgnn.runtime.epoch import RuntimeFailure
        from fgnn.runtime.resume import RunFinished
        from fgnn.job import Job, JobConfigError
        from fgnn.monitor.timeline import process_start
        from fgnn.outputs import OutputsError
        from fgnn.sigterm import Terminated, interrupt_on_sigterm
    restore_sigterm = interrupt_on_sigterm()  # until Ray starts (the job installs it again)
    # the time line covers the whole process: interpreter start-up and imports included
    job = Job(config, progress=not args.no_progress, since=process_start() or _IMPORTED_AT)
    said = threading.Lock()  # held by whoever prints the failure line: this thread or the watcher
    job.on_node_death = lambda failure: _exit_at_once(parser.prog, str(failure), said)
    try:
        job.run()  # validates first: fast checks before any data is loaded or Ray starts
    except JobConfigError as e:
        if args.debug:
            traceback.print_exc()
        parser.error(flag_for_error(e))
    except OutputsError as e:  # the run finished; some outputs were written, some not
        return _fail_line(parser.prog, e.describe(_output_name), args.debug)
    except RunFinished as e:  # --resume of a finished run: its result, nothing to do
        print(f"fgnn: {e}", flush=True)
        return 0
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM (fgnn.sigterm)
        what = "terminated (SIGTERM)" if isinstance(e, Terminated) else "interrupted"
        print(f"{parser.prog}: {what}; no report written", file=sys.stderr)
        return 143 if isinstance(e, Terminated) else 130
    except (WriteError, RuntimeFailure) as e:  # a full disk; a death or hang (with checkpoint)
        return _fail_line(parser.prog, str(e), args.debug, said)
    except Exception as e:  # anything else: one line too, the traceback with --debug
        return _fail_line(parser.prog, f"{root_cause(e)} (--debug prints the traceback)",
                          args.debug, said)
    finally:
        restore_sigterm()
    return 0


def exit_now(status: int) -> NoReturn:
    """End the command with ``status`` once :func:`main` returned: the exit handlers run and
    the output is flushed, but Python's interpreter finalization is skipped. Tearing down the
    modules of torch (its compiler's, which the optimizer imports) takes seconds, after the time
    line (which ends at the report) has closed."""
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing left to flush
            pass
    os._exit(status)


def _output_name(field: str, what: str) -> str:
    """How the CLI calls an output in a message: the flag, or ``plot`` for the report's PNG."""
    return _FIELD_FLAGS[field] if what in ("model", "report") else what


def _fail_line(prog: str, message: str, debug: bool,
               said: Optional[threading.Lock] = None) -> int:
    """Print ``PROG: error: MESSAGE`` (after the traceback with ``--debug``); returns 1.

    ``said``: taken before printing; when the raylet watcher holds it, its line is the job's
    and it is ending the process (:func:`_exit_at_once`), so this one is not printed.
    """
    if said is not None and not said.acquire(blocking=False):
        said.acquire(timeout=_WATCHER_EXIT_S)  # the watcher exits the process meanwhile
        return 1
    if debug:
        traceback.print_exc()
    print(f"{prog}: error: {' '.join(strip_ansi(message).split())}", file=sys.stderr, flush=True)
    return 1


#: Most seconds the main thread waits for the raylet watcher to end the process.
_WATCHER_EXIT_S = 30.0


def _exit_at_once(prog: str, message: str, said: threading.Lock) -> None:
    """The raylet died (:attr:`fgnn.job.Job.on_node_death`): print the job's one line and end
    the process with status 1 now, before Ray's core worker ends it without a word. The node's
    other processes share the driver's fate (Ray starts them with ``PR_SET_PDEATHSIG``); the
    checkpoint in the line is already written. Does nothing when the main thread is printing
    its own failure line."""
    if not said.acquire(blocking=False):
        return
    print(f"{prog}: error: {' '.join(message.split())}", file=sys.stderr, flush=True)
    sys.stdout.flush()
    os._exit(1)


def _module_main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fgnn.cli",
                                 description="Print the CLI flag table of docs/cli.md.")
    ap.add_argument("--markdown", action="store_true", help="print the markdown flag table")
    a = ap.parse_args(argv)
    if a.markdown:
        sys.stdout.write(flags_markdown())
        return 0
    ap.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(_module_main())
