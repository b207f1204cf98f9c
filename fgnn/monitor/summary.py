"""Plain statements of a run report, shared by the table, the plot and the console lines.

Each helper reads a report dict (:meth:`fgnn.monitor.stats.RunResult.to_dict`, or a decoded JSON
report, older ones included) and says one thing about it in words: the devices used (and what was
asked for), the cache policy in force, and where the wall time went.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

__all__ = ["plural", "cluster_text", "devices_note", "devices_text", "cache_policy", "cache_text",
           "timeline_parts", "timing_parts", "timing_text", "LEGACY_CACHE_BUILD", "metric_name",
           "TASK_METRICS"]

#: Label of the pre-split ``cache_build_s`` of older reports (start-up and cache fill together).
LEGACY_CACHE_BUILD = "worker start-up + cache fill"


def plural(n: int, word: str, many: Optional[str] = None) -> str:
    """``1 device``, ``2 devices`` (``many`` when the plural is not ``word + "s"``)."""
    return f"{n} {word if n == 1 else (many or word + 's')}"


def cluster_text(address: str, resources: Mapping[str, float], nodes: int) -> str:
    """A joined Ray cluster in words: its address, live nodes, CPUs, GPUs and memory (the
    ``memory`` resource, when the cluster declares it).

    Example: ``10.1.2.3:6379 (1 node: 16 CPUs, 2 GPUs, 24.0 GiB memory)``.
    """
    def count(key: str, word: str) -> str:
        n = float(resources.get(key, 0.0))
        return plural(int(n), word) if n.is_integer() else f"{n:g} {word}s"

    parts = [count("CPU", "CPU"), count("GPU", "GPU")]
    if resources.get("memory"):
        parts.append(f"{float(resources['memory']) / 2 ** 30:.1f} GiB memory")
    return f"{address} ({plural(nodes, 'node')}: {', '.join(parts)})"


def devices_note(used: int, asked: int, mode: str) -> Optional[str]:
    """Why a run uses other than the devices asked for, or ``None`` when it uses them all.

    Example:
        ``devices_note(1, 8, "single")`` → ``"single mode uses 1 device; 8 were asked for"``
    """
    if used == asked:
        return None
    return f"{mode} mode uses {plural(used, 'device')}; {asked} were asked for"


def _config(report: Mapping[str, Any], *keys: str) -> Any:
    d: Any = report.get("config", {})
    for k in keys:
        d = d.get(k) if isinstance(d, Mapping) else None
    return d


def devices_text(report: Mapping[str, Any]) -> str:
    """The devices a run used, with its kind and, when they differ, what was asked for.

    Example: ``1 device (logical; single mode uses 1 device; 8 were asked for)``.
    """
    alloc = report["allocation"]
    used = int(alloc["devices"])
    asked = alloc.get("devices_requested", _config(report, "runtime", "devices"))
    notes = [str(alloc.get("device_kind") or "?")]
    note = devices_note(used, int(asked), report["mode"]) if isinstance(asked, int) else None
    if note:
        notes.append(note)
    return f"{plural(used, 'device')} ({'; '.join(notes)})"


def cache_policy(report: Mapping[str, Any]) -> str:
    """The hotness policy that ranked the cache: ``allocation.cache_policy`` as the runtime
    recorded it; for older reports the rule the runtime applied then (time-sharing ranks by
    degree, the other modes by the configured policy)."""
    in_force = report.get("allocation", {}).get("cache_policy")
    if in_force:
        return str(in_force)
    if report.get("mode") == "time-sharing":
        return "degree"
    return str(_config(report, "cache", "policy") or "?")


def cache_text(report: Mapping[str, Any]) -> str:
    """The policy in force, and the one asked for when they differ.

    Example: ``degree (presc asked for; time-sharing mode ranks by degree)``.
    """
    in_force = cache_policy(report)
    asked = _config(report, "cache", "policy")
    if asked and asked != in_force:
        return f"{in_force} ({asked} asked for; {report.get('mode')} mode ranks by {in_force})"
    return in_force


def _rank_label(report: Mapping[str, Any]) -> str:
    policy = cache_policy(report)
    return "pre-sampling" if policy.startswith("presc") else f"cache ranking ({policy})"


def timeline_parts(report: Mapping[str, Any]) -> list[tuple[str, float]]:
    """The report's ``timeline`` (the whole run, parts that add up to its wall time) as
    ``(label, seconds)`` in order, ``other`` last; empty for a report without one."""
    timeline = report.get("timeline")
    if not timeline:
        return []
    from fgnn.monitor.timeline import PART_LABELS

    epochs = len(report.get("epochs", []))
    special = {"training": f"training ({plural(epochs, 'epoch')})",
               "ranking": _rank_label(report)}
    return [(special.get(p["key"]) or PART_LABELS.get(p["key"], p["key"]), float(p["seconds"]))
            for p in timeline["parts"]]


def timing_parts(report: Mapping[str, Any]) -> list[tuple[str, float]]:
    """Where a run's wall time went, in order, as ``(label, seconds)``: the report's
    ``timeline`` (:func:`timeline_parts`) when it has one, else the steps an older report holds.

    Preprocessing (load, ranking on the driver, worker start-up -- which overlaps the ranking --,
    cache sizing and fill after the warm-up epochs, executors the allocation added), training
    (the epochs' wall time; PreSC pre-samples inside the warm-up epochs), the per-epoch
    validation and the final scoring. Entries a report does not hold (older reports, a policy
    with nothing to rank) are left out rather than shown as zero; an older report's
    ``cache_build_s`` appears as :data:`LEGACY_CACHE_BUILD`.
    """
    if report.get("timeline"):
        return timeline_parts(report)
    pre = report.get("preprocess", {})
    policy = cache_policy(report)
    rank = _rank_label(report)
    parts: list[tuple[str, float]] = []
    for key, label in (("load_s", "load"), ("presample_s", rank), ("hotness_s", rank),
                       ("startup_s", "worker start-up"), ("sizing_s", "cache sizing"),
                       ("cache_fill_s", "cache fill"), ("relayout_s", "re-layout")):
        if key == "hotness_s" and policy.startswith(("presc", "none")):
            continue
        if pre.get(key) is not None:
            parts.append((label, float(pre[key])))
    if ("startup_s" not in pre and "cache_fill_s" not in pre
            and pre.get("cache_build_s") is not None):
        parts.append((LEGACY_CACHE_BUILD, float(pre["cache_build_s"])))
    epochs = report.get("epochs", [])
    parts.append((f"training ({plural(len(epochs), 'epoch')})",
                  sum(float(e["time_s"]) for e in epochs)))
    if any("eval_s" in e for e in epochs):
        parts.append(("validation", sum(float(e.get("eval_s") or 0.0) for e in epochs)))
    if report.get("final_eval_s") is not None:
        parts.append(("final evaluation", float(report["final_eval_s"])))
    return parts


def timing_text(report: Mapping[str, Any], sep: str = ", ") -> str:
    """:func:`timing_parts` in one line: ``wall 9.81s: start-up and imports 2.10s, load 0.28s,
    ..., other 0.04s`` (an older report without a ``timeline``: ``load 0.28s, ...``)."""
    text = sep.join(f"{label} {seconds:.2f}s" for label, seconds in timing_parts(report))
    timeline = report.get("timeline")
    return f"wall {float(timeline['wall_s']):.2f}s: {text}" if timeline else text


#: The validation score of each built-in task, for reports that do not name theirs (written
#: before the report carried ``metric``); :attr:`fgnn.tasks.Task.metric` is the source.
TASK_METRICS = {"node": "accuracy", "link": "AUC", "recsys": "recall@10"}


def metric_name(report: Mapping[str, Any]) -> str:
    """What the report's validation scores measure: its ``metric`` (the task's), else the
    metric of its ``config.task`` (older reports), else ``accuracy``."""
    metric = report.get("metric")
    if isinstance(metric, str) and metric:
        return metric
    return TASK_METRICS.get(str(_config(report, "task") or "node"), "accuracy")
