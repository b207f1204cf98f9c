"""The JSON run report: schema validation, atomic writing, and a table view.

A report is :meth:`fgnn.monitor.stats.RunResult.to_dict` written as JSON (``NaN`` becomes
``null``), with a PNG beside it (``r.json`` → ``r.png``): the per-epoch stage breakdown, the wall
time of training and validation, the training loss and the validation accuracy.

Reports from older versions (without the start-up / cache-fill split, ``eval_s``,
``final_eval_s``, ``early_stop``, ``allocation.cache_policy``, ``metric``, ``timeline``) still
load and print (a report without ``metric`` is read as its task's: accuracy, AUC, recall@10).

Print one as a table::

    python -m fgnn.report runs/demo/report.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, Union

from fgnn.atomic import atomic_open
from fgnn.config import MODES, task_names
from fgnn.runtime.ledger import LEDGER_KEYS
from fgnn.monitor.stats import PREPROCESS_KEYS, RunResult, early_stop_message
from fgnn.monitor.summary import cache_text, devices_text, metric_name, timing_text
from fgnn.monitor.timeline import PART_LABELS

__all__ = [
    "ReportError",
    "validate_report",
    "load_report",
    "write_report",
    "write_json_atomic",
    "png_path_for",
    "report_dict",
    "format_report",
    "main",
]

_NUM = (int, float)
#: How far the parts of a report's ``timeline`` may sum from its ``wall_s`` (a share of it).
TIMELINE_TOLERANCE = 0.05
#: The ``final`` scores of a link-prediction report (``config.task == "link"``).
LINK_FINAL = ("val_auc", "val_ap", "test_auc", "test_ap")
#: The ``final`` scores a recommender report must have (``config.task == "recsys"``).
RECSYS_FINAL = ("val_recall@10", "test_recall@10", "test_ceiling@10", "test_popularity@10")



class ReportError(ValueError):
    """A report that does not follow the schema; the message names the offending field."""


def _fail(path: str, why: str, value: Any) -> None:
    raise ReportError(f"report field {path}: {why}. Received {value!r}.")


def _get(d: Mapping[str, Any], key: str, path: str) -> Any:
    if key not in d:
        raise ReportError(f"report field {path}.{key}: missing." if path else
                          f"report field {key}: missing.")
    return d[key]


def _number(d: Mapping[str, Any], key: str, path: str, *, lo: Optional[float] = 0.0,
            hi: Optional[float] = None, nullable: bool = False, integer: bool = False) -> None:
    v = _get(d, key, path)
    full = f"{path}.{key}" if path else key
    if v is None:
        if not nullable:
            _fail(full, "must be a number", v)
        return
    if isinstance(v, bool) or not isinstance(v, int if integer else _NUM):
        _fail(full, "must be an integer" if integer else "must be a number", v)
    if not math.isfinite(v):
        _fail(full, "must be finite", v)
    if lo is not None and v < lo:
        _fail(full, f"must be >= {lo:g}", v)
    if hi is not None and v > hi:
        _fail(full, f"must be <= {hi:g}", v)


def _mapping(d: Mapping[str, Any], key: str, path: str = "") -> Mapping[str, Any]:
    v = _get(d, key, path)
    if not isinstance(v, Mapping):
        _fail(f"{path}.{key}" if path else key, "must be an object", v)
    return v


def _optional_number(d: Mapping[str, Any], key: str, path: str, **kw: Any) -> None:
    if key in d:
        _number(d, key, path, **kw)


def validate_report(report: Mapping[str, Any]) -> None:
    """Check a report dict against the schema.

    Required: ``config`` (object); ``mode`` (a runtime mode); ``allocation`` (``devices``,
    ``samplers``, ``trainers``, ``K``); ``preprocess`` (``load_s``, ``presample_s``);
    ``epochs`` (non-empty list; each with ``epoch``, ``time_s``, ``sample_s`` holding ``total``,
    ``S``, ``M``, ``C``, ``extract_s``, ``train_s``, ``hit_rate`` in [0, 1],
    ``bytes_host_to_device``, ``switches``, ``batches``, ``loss`` (number or null); optional
    ``declines``, the standbys' declined tasks); ``final``
    (``train_acc``, ``val_acc``, ``test_acc`` in [0, 1], the last two null where their split
    is empty; with ``config.task == "link"``
    :data:`LINK_FINAL` instead, and any other ``final`` entry (MRR, Hits@K) in [0, 1]).

    Optional (absent from older reports), checked when present: ``preprocess.startup_s``,
    ``cache_fill_s`` and the older ``cache_build_s`` (seconds); ``allocation.devices_requested``
    (integer >= 1) and ``cache_policy`` (string); per epoch ``eval_s`` (seconds) and ``val_acc``
    (in [0, 1] or null), ``val_auc`` and ``val_ap`` (link prediction, the same) and ``ledger`` (null or the exactly-once ledger: integer counts
    ``tasks``, ``issued``, ``lost``, ``reissued``, ``pushed``, ``applied``, ``applied_twice``,
    ``missing``, ``rejected`` with ``applied + missing == tasks``, and ``exactly_once``, true
    exactly when ``missing`` and ``applied_twice`` are 0); ``final_eval_s`` (seconds);
    ``early_stop`` (null or an object with ``epoch``, ``patience``, ``best_val_acc``,
    ``best_epoch``); ``metric`` (null or the name of the task's validation score, e.g.
    ``accuracy``, ``AUC``, ``recall@10``); ``timeline`` (the whole run's wall time by part:
    ``wall_s`` (seconds), ``origin`` (``process`` or ``run``) and ``parts``, a non-empty list of
    ``{"key", "seconds"}`` with the keys of :data:`~fgnn.monitor.timeline.PART_LABELS`, each
    once, whose seconds sum to ``wall_s`` within :data:`TIMELINE_TOLERANCE`).

    Args:
        report: the decoded JSON (or :meth:`RunResult.to_dict` output).

    Raises:
        ReportError: naming the first field that is missing or malformed.
    """
    if not isinstance(report, Mapping):
        raise ReportError(f"report must be a JSON object. Received {type(report).__name__}.")
    _mapping(report, "config")
    mode = _get(report, "mode", "")
    if mode not in MODES:
        _fail("mode", f"must be one of {', '.join(MODES)}", mode)
    _check_allocation(_mapping(report, "allocation"))
    _check_preprocess(_mapping(report, "preprocess"))
    epochs = _get(report, "epochs", "")
    if not isinstance(epochs, list) or not epochs:
        _fail("epochs", "must be a non-empty list", epochs)
    for i, ep in enumerate(epochs):
        _check_epoch(ep, f"epochs[{i}]")
    _check_final(report)
    _optional_number(report, "final_eval_s", "")
    _check_early_stop(report.get("early_stop"))
    metric = report.get("metric")
    if metric is not None and (not isinstance(metric, str) or not metric.strip()):
        _fail("metric", "must be a non-empty string or null", metric)
    if "timeline" in report:
        _check_timeline(report["timeline"])


def _check_allocation(alloc: Mapping[str, Any]) -> None:
    """The report's ``allocation`` section."""
    _number(alloc, "devices", "allocation", lo=1, integer=True)
    _number(alloc, "samplers", "allocation", lo=0, integer=True)
    _number(alloc, "trainers", "allocation", lo=0, integer=True)
    _number(alloc, "K", "allocation", lo=0, nullable=True)
    _optional_number(alloc, "devices_requested", "allocation", lo=1, integer=True)
    if "cache_policy" in alloc and not isinstance(alloc["cache_policy"], str):
        _fail("allocation.cache_policy", "must be a string", alloc["cache_policy"])


def _check_preprocess(pre: Mapping[str, Any]) -> None:
    """The report's ``preprocess`` section (older reports lack some of the timings)."""
    _number(pre, "load_s", "preprocess")
    for key in (*PREPROCESS_KEYS, "presample_s", "cache_build_s"):  # older reports lack some
        if key != "load_s":
            _optional_number(pre, key, "preprocess")


def _check_epoch(ep: Any, p: str) -> None:
    """One entry ``p`` (``epochs[i]``) of the report's ``epochs``."""
    if not isinstance(ep, Mapping):
        _fail(p, "must be an object", ep)
    _number(ep, "epoch", p, integer=True)
    for key in ("time_s", "extract_s", "train_s"):
        _number(ep, key, p)
    sample = _mapping(ep, "sample_s", p)
    for key in ("total", "S", "M", "C"):
        _number(sample, key, f"{p}.sample_s")
    _number(ep, "hit_rate", p, hi=1.0)
    for key in ("bytes_host_to_device", "switches", "batches"):
        _number(ep, key, p, integer=True)
    _optional_number(ep, "declines", p, integer=True)
    _number(ep, "loss", p, lo=None, nullable=True)
    _optional_number(ep, "eval_s", p)
    _optional_number(ep, "val_acc", p, hi=1.0, nullable=True)
    _optional_number(ep, "val_auc", p, hi=1.0, nullable=True)
    _optional_number(ep, "val_ap", p, hi=1.0, nullable=True)
    if ep.get("ledger") is not None:
        _ledger(ep["ledger"], f"{p}.ledger")


def _check_final(report: Mapping[str, Any]) -> None:
    """The report's ``final`` metrics, by ``config.task``."""
    final = _mapping(report, "final")
    task = report["config"].get("task", "node")
    if task not in task_names():
        _fail("config.task", f"must be one of {', '.join(task_names())}", task)
    if task == "recsys":  # recall@K, ceiling, popularity and their ratio per split
        for key in RECSYS_FINAL:
            _number(final, key, "final", hi=1.0)
        for key in final:
            _number(final, key, "final", hi=None)
    scored = report["config"].get("train", {}).get("eval_mode") != "none"
    for key in (() if task == "recsys" else LINK_FINAL if task == "link"
                else ("train_acc", "val_acc", "test_acc")):
        # a node task's empty validation or test split has no accuracy, and a throughput run
        # (train.eval_mode "none") scores nothing: null
        _number(final, key, "final", hi=1.0,
                nullable=key in ("val_acc", "test_acc") or not scored)
    if task == "link":
        for key in final:  # MRR and Hits@K when asked for
            if key not in LINK_FINAL:
                _number(final, key, "final", hi=1.0)


def _check_early_stop(stop: Any) -> None:
    """The report's ``early_stop``: null or the stop's epoch, patience and best validation."""
    if stop is None:
        return
    if not isinstance(stop, Mapping):
        _fail("early_stop", "must be an object or null", stop)
    for key in ("epoch", "patience", "best_epoch"):
        _number(stop, key, "early_stop", integer=True)
    _number(stop, "best_val_acc", "early_stop", hi=1.0)


def _check_timeline(timeline: Any) -> None:
    """The report's ``timeline``: parts with known keys, each once, that add up to the wall."""
    if not isinstance(timeline, Mapping):
        _fail("timeline", "must be an object", timeline)
    _number(timeline, "wall_s", "timeline")
    if timeline.get("origin") not in ("process", "run"):
        _fail("timeline.origin", "must be process or run", timeline.get("origin"))
    parts = _get(timeline, "parts", "timeline")
    if not isinstance(parts, list) or not parts:
        _fail("timeline.parts", "must be a non-empty list", parts)
    seen: set[str] = set()
    for i, part in enumerate(parts):
        path = f"timeline.parts[{i}]"
        if not isinstance(part, Mapping):
            _fail(path, "must be an object", part)
        key = _get(part, "key", path)
        if key not in PART_LABELS or key in seen:
            _fail(f"{path}.key", f"must be one of {', '.join(PART_LABELS)}, each once", key)
        seen.add(key)
        _number(part, "seconds", path)
    total, wall = sum(p["seconds"] for p in parts), timeline["wall_s"]
    if abs(total - wall) > TIMELINE_TOLERANCE * wall + 1e-6:
        _fail("timeline.parts", f"must sum to wall_s={wall:g} within "
                                f"{TIMELINE_TOLERANCE:.0%} (they sum to {total:g})", parts)


def _ledger(ledger: Any, path: str) -> None:
    """An epoch's exactly-once ledger: the counts of :data:`LEDGER_KEYS` and ``exactly_once``,
    which must agree with them."""
    if not isinstance(ledger, Mapping):
        _fail(path, "must be an object or null", ledger)
    for key in LEDGER_KEYS:
        _number(ledger, key, path, integer=True)
    if ledger["applied"] + ledger["missing"] != ledger["tasks"]:
        _fail(f"{path}.missing", "must be tasks - applied", ledger["missing"])
    once = _get(ledger, "exactly_once", path)
    if not isinstance(once, bool):
        _fail(f"{path}.exactly_once", "must be true or false", once)
    if once != (ledger["missing"] == 0 and ledger["applied_twice"] == 0):
        _fail(f"{path}.exactly_once", "must be true exactly when missing and applied_twice "
                                      "are 0", once)


def _finite_or_none(obj: Any) -> Any:
    """Replace NaN / ±inf floats with ``None`` (strict JSON)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {str(k): _finite_or_none(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite_or_none(v) for v in obj]
    return obj


def write_json_atomic(obj: Any, path: Union[str, os.PathLike]) -> Path:
    """Write ``obj`` as JSON to ``path`` via a temp file in the same directory + ``os.replace``.

    Readers never see a partial file; on failure no file is left behind.
    """
    path = Path(path)
    with atomic_open(path, "w") as f:
        json.dump(_finite_or_none(obj), f, indent=2, allow_nan=False, default=str)
        f.write("\n")
    return path


def png_path_for(report_path: Union[str, os.PathLike]) -> Path:
    """The plot beside a report: ``r.json`` → ``r.png``."""
    return Path(report_path).with_suffix(".png")


def report_dict(result: Union[RunResult, Mapping[str, Any]]) -> dict[str, Any]:
    """The report of ``result`` as written: NaN / ±inf as ``None``, validated.

    Raises:
        ReportError: the result does not follow the schema.
    """
    report = result.to_dict() if isinstance(result, RunResult) else dict(result)
    report = _finite_or_none(report)
    validate_report(report)
    return report


def write_report(result: Union[RunResult, Mapping[str, Any]], path: Union[str, os.PathLike], *,
                 plot: bool = True) -> Path:
    """Validate and atomically write a run report, plus its PNG unless ``plot`` is False.

    Args:
        result: a :class:`RunResult` or its ``to_dict()``.
        path: the JSON path; the PNG goes to :func:`png_path_for` ``(path)``.
        plot: also draw the stage-breakdown PNG.

    Returns:
        The JSON path.

    Raises:
        ReportError: the result does not follow the schema (nothing is written).
    """
    report = report_dict(result)
    if plot:  # the PNG first: once the JSON exists, the whole output is complete
        from fgnn.monitor.plot import plot_report
        plot_report(report, png_path_for(path))
    return write_json_atomic(report, path)


def load_report(path: Union[str, os.PathLike]) -> dict[str, Any]:
    """Read and validate a report.

    Raises:
        ReportError: unreadable, not JSON, or not following the schema.
    """
    report = _read_json(path)
    validate_report(report)
    return report


def _read_json(path: Union[str, os.PathLike]) -> Any:
    """The parsed JSON of ``path``; :class:`ReportError` naming the file when it cannot be read,
    is not UTF-8 JSON, or nests too deeply for the parser."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        raise ReportError(f"cannot read report {str(path)!r}: {e.strerror or e}.") from e
    except json.JSONDecodeError as e:
        raise ReportError(f"report {str(path)!r} is not JSON: {e}.") from e
    except UnicodeDecodeError:
        raise ReportError(f"report {str(path)!r} is not JSON: not UTF-8 text.") from None
    except RecursionError:
        raise ReportError(f"report {str(path)!r} is not a report: its JSON nests too deeply "
                          f"to parse.") from None


def _fmt(v: Any, spec: str = ".3f") -> str:
    return "-" if v is None else format(v, spec)


def _bytes(n: int) -> str:
    x = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if x < 1024 or unit == "GiB":
            return f"{x:.0f} {unit}" if unit == "B" else f"{x:.1f} {unit}"
        x /= 1024
    return f"{x:.1f} TiB"  # pragma: no cover


#: What the per-epoch timing columns measure (printed under the table).
_COLUMNS_NOTE = ("wall / eval: wall seconds of the epoch's training / validation",
                 "sample (S+M+C) / extract / train: seconds summed over executors")


def format_report(report: Mapping[str, Any]) -> str:
    """The report as a plain-text table (what ``python -m fgnn.report`` prints).

    Epochs are shown numbered from 1, as in the progress lines (the JSON ``epoch`` is 0-based).
    The header states the devices used (and what was asked for, when that differs), the cache
    policy in force, and where the wall time went; the last column is the per-epoch validation
    score, headed by the task's metric (``val accuracy``, ``val AUC`` for link prediction,
    ``val recall@10``; ``-`` where the epoch was not evaluated).
    """
    cfg = report["config"]
    a, fin = report["allocation"], report["final"]
    model = report.get("allocation", {}).get("model") or (  # a custom model: its class
        cfg.get("model", {}).get("name", "?") if isinstance(cfg.get("model"), Mapping) else "?")
    lines = [
        f"dataset  {cfg.get('dataset', '?')}",
        f"run      model {model}   mode {report['mode']}   cache {cache_text(report)}"
        f"   recipe {cfg.get('recipe', '?')}",
        f"alloc    {devices_text(report)}   samplers {a['samplers']}   trainers {a['trainers']}"
        f"   K {_fmt(a['K'], '.2f')}",
        f"time     {timing_text(report)}",
        "",
    ]
    val = f"val {metric_name(report)}"
    head = (f"{'epoch':>5} {'wall':>7} {'eval':>6} {'sample':>7} {'S':>7} {'M':>7} {'C':>7} "
            f"{'extract':>8} {'train':>7} {'hit':>6} {'h2d':>10} {'sw':>4} {'batch':>5} "
            f"{'loss':>8} {val:>6}")
    lines += [head, "-" * len(head)]
    for e in report["epochs"]:
        s = e["sample_s"]
        lines.append(
            f"{e['epoch'] + 1:>5} {e['time_s']:>7.3f} {_fmt(e.get('eval_s'), '>6.3f'):>6} "
            f"{s['total']:>7.3f} {s['S']:>7.3f} {s['M']:>7.3f} {s['C']:>7.3f} "
            f"{e['extract_s']:>8.3f} {e['train_s']:>7.3f} "
            f"{100 * e['hit_rate']:>5.1f}% {_bytes(e['bytes_host_to_device']):>10} "
            f"{e['switches']:>4} {e['batches']:>5} {_fmt(e['loss'], '>8.4f'):>8} "
            f"{_fmt(_val(e), '.4f'):>{max(6, len(val))}}")
    lines += ["-" * len(head), *_COLUMNS_NOTE, ""]
    ledger = _ledger_text(report["epochs"])
    if ledger:
        lines.append(ledger)
    lines += _partition_text(a.get("feature_partition"))
    if report.get("early_stop"):
        lines.append(early_stop_message(report["early_stop"], metric_name(report)))
    if cfg.get("task") in ("link", "recsys"):
        lines.append("final    " + "   ".join(f"{k} {_fmt(v, '.4f')}" for k, v in fin.items()))
    else:
        lines.append(f"final    train {_fmt(fin['train_acc'], '.4f')}   "
                     f"val {_fmt(fin['val_acc'], '.4f')}   test {_fmt(fin['test_acc'], '.4f')}")
    return "\n".join(lines)


def _partition_text(part: Optional[Mapping[str, Any]]) -> list[str]:
    """The node partition (``allocation.feature_partition``): each node's host rows, and its
    mean traffic per epoch by tier with its remote wait (the epochs after the first, whose
    record holds the cache fill); no lines without a partition."""
    if not part:
        return []
    hosts = ", ".join(str(h) for h in part["host_rows"])
    lines = [f"nodes    {part['strategy']} over {part['nodes']} nodes: host rows {hosts} of "
             f"{part['num_rows']} ({part['replicated_rows']} replicated)"]
    if part.get("owners_from") == "measured":
        reads = ", ".join(f"{r:.0f}" for r in part.get("node_reads") or [])
        lines[0] += f"; owners by warm-up reads per node ({reads} per epoch)"
    elif part.get("owners_from"):
        lines[0] += "; owners row mod M (no warm-up reads counted)"
    epochs = part["traffic"][1:] or part["traffic"]
    for m in range(part["nodes"]):
        recs = [ep[m] for ep in epochs]
        mean = {k: sum(r["rows"][k] for r in recs) / max(1, len(recs))
                for k in ("device", "local", "remote")}
        size = {k: sum(r["bytes"][k] for r in recs) / max(1, len(recs)) for k in ("local", "remote")}
        wait = sum(r["remote_wait_s"] for r in recs) / max(1, len(recs))
        lines.append(f"         node {m} per epoch: device {mean['device']:.0f} rows, local "
                     f"{mean['local']:.0f} ({_bytes(int(size['local']))}), remote "
                     f"{mean['remote']:.0f} ({_bytes(int(size['remote']))}), remote wait "
                     f"{wait:.3f}s")
    return lines


def _val(epoch: Mapping[str, Any]) -> Any:
    """An epoch's validation score: accuracy, or a link job's AUC."""
    return epoch.get("val_acc") if epoch.get("val_acc") is not None else epoch.get("val_auc")


def _ledger_text(epochs: Sequence[Mapping[str, Any]]) -> Optional[str]:
    """The exactly-once ledger summed over the epochs that carry one, in one line, with the
    epochs where it does not hold (None when no epoch has a ledger: older reports)."""
    ledgers = [(e["epoch"], e["ledger"]) for e in epochs if e.get("ledger")]
    if not ledgers:
        return None
    tot = {k: sum(int(lg[k]) for _, lg in ledgers) for k in LEDGER_KEYS}
    broken = [f"{ep + 1} ({lg['missing']} missing, {lg['applied_twice']} applied twice)"
              for ep, lg in ledgers if not lg["exactly_once"]]
    verdict = ("every task applied exactly once" if not broken
               else "NOT exactly once in epoch " + ", ".join(broken))
    return (f"ledger   {tot['tasks']} tasks: {verdict}; {tot['lost']} samples lost, "
            f"{tot['reissued']} reissued, {tot['pushed']} gradients pushed, "
            f"{tot['rejected']} rejected as duplicates")


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m fgnn.report REPORT.json``: validate and print a report.

    Exits 2 with one line naming the file when it cannot be read or parsed as JSON (nesting
    too deep included), 1 when its JSON breaks the report schema.

    Safe in a pipe: when the reader goes away (``| head``) it stops quietly.
    """
    parser = argparse.ArgumentParser(prog="python -m fgnn.report",
                                     description="Print an fgnn run report as a table.")
    parser.add_argument("report", help="path of the JSON report written by launch.py --report")
    parser.add_argument("--check", action="store_true",
                        help="only validate the schema (prints 'ok'), default: off")
    args = parser.parse_args(argv)
    try:
        report = _read_json(args.report)
    except ReportError as e:
        print(f"fgnn.report: error: {e}", file=sys.stderr)
        return 2
    try:
        validate_report(report)
    except ReportError as e:
        print(f"fgnn.report: error: {e}", file=sys.stderr)
        return 1
    try:
        print("ok" if args.check else format_report(report), flush=True)
    except BrokenPipeError:
        # the reader closed the pipe: point stdout at devnull so the interpreter's final flush
        # does not fail again, and stop without a traceback (as the Python docs advise)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
