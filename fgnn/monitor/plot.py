"""The report's PNG: four panels per epoch, a title that fits, and the run's timings.

* **Stage breakdown** (top left): stacked bars splitting each epoch's executor time into Sample
  (S sampling, M marking cached vertices, C copying to the global queue; FGNN Table 5), Extract
  and Train, summed over executors; the line on the right axis is the cache hit rate.
* **Training loss** (top right) and the **validation score** (bottom right) per epoch, named
  for the task's metric (accuracy, AUC for link prediction, recall@10 for a recommender;
  :func:`fgnn.monitor.summary.metric_name`); the final test score is a dashed line.
* **Wall time** (bottom left): each epoch's training and validation wall seconds.

The title names the dataset (long specs wrapped at commas, and shortened if still too wide), the
model, mode, devices, layout and cache policy in force. The footer gives the preprocessing and
final evaluation times (:func:`fgnn.monitor.summary.timing_text`) and why training stopped
early, if it did. Epochs are numbered from 1 and the x-axes start at the first epoch run. Drawn
with matplotlib's Agg canvas (no display needed).
"""

from __future__ import annotations

import math
import os
import textwrap
import threading
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, Union

from fgnn.atomic import atomic_open
from fgnn.monitor.stats import early_stop_message
from fgnn.monitor.summary import cache_policy, metric_name, plural, timing_text

__all__ = ["plot_report", "preload", "report_figure", "report_title"]

_STAGES = (  # (label, getter, colour)
    ("Sample: S", lambda e: e["sample_s"]["S"], "#1f77b4"),
    ("Sample: M", lambda e: e["sample_s"]["M"], "#6baed6"),
    ("Sample: C", lambda e: e["sample_s"]["C"], "#c6dbef"),
    ("Extract", lambda e: e["extract_s"], "#ff7f0e"),
    ("Train", lambda e: e["train_s"], "#2ca02c"),
)
_TITLE_PT = (11.0, 6.0)  # the title's font size: first try, smallest before shortening
_TITLE_LINES = 2  # the dataset spec wraps onto at most this many lines


def _number(v: Any) -> Optional[float]:
    """A finite float, or ``None`` for null / NaN (not recorded)."""
    if v is None:
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def _wrap_spec(spec: str, width: int, lines: int = _TITLE_LINES) -> str:
    """``spec`` wrapped at commas onto at most ``lines`` lines of ``width`` characters, the last
    one cut with an ellipsis if the spec is longer still."""
    width = max(width, 8)
    out = textwrap.wrap(spec.replace(",", ", "), width=width, break_long_words=True)
    out = [line.replace(", ", ",") for line in out]
    if len(out) > lines:
        out = out[:lines]
        out[-1] = out[-1][: width - 1].rstrip(",") + "…"
    return "\n".join(out)


def report_title(report: Mapping[str, Any], width: int = 120) -> str:
    """The plot's title: the dataset spec (wrapped to ``width`` characters), then the model,
    mode, devices used (and asked for, when they differ), layout and cache policy in force.

    Example:
        ``cora\\ngcn · factored · 4 devices · 1 sampler, 3 trainers · cache presc``
    """
    cfg = report.get("config", {})
    model = report.get("allocation", {}).get("model") or (  # a custom model: its class
        cfg.get("model", {}).get("name", "?") if isinstance(cfg.get("model"), Mapping) else "?")
    alloc = report.get("allocation", {})
    used = int(alloc.get("devices", 0))
    asked = alloc.get("devices_requested")
    if asked is None and isinstance(cfg.get("runtime"), Mapping):
        asked = cfg["runtime"].get("devices")
    devices = plural(used, "device")
    if isinstance(asked, int) and asked != used:
        devices += f" ({asked} asked for)"
    layout = (f"{plural(int(alloc.get('samplers', 0)), 'sampler')}, "
              f"{plural(int(alloc.get('trainers', 0)), 'trainer')}")
    run = " · ".join((model, str(report.get("mode", "?")), devices, layout,
                      f"cache {cache_policy(report)}"))
    return f"{_wrap_spec(str(cfg.get('dataset', '?')), width)}\n{run}"


def _fit_title(fig: Any, report: Mapping[str, Any]) -> Any:
    """Place the title so that its rendered extent lies inside the figure: shrink the font down
    to the smallest size, then wrap the spec into fewer characters per line."""
    renderer = fig.canvas.get_renderer()
    fig_w = fig.bbox.width
    pt = _TITLE_PT[0]
    width = int(fig_w / (0.62 * pt * fig.dpi / 72))  # characters of an average glyph width
    text = fig.suptitle(report_title(report, width), fontsize=pt)
    while True:
        box = text.get_window_extent(renderer)
        if box.x0 >= 0 and box.x1 <= fig_w:
            return text
        if pt > _TITLE_PT[1]:
            pt = max(_TITLE_PT[1], pt - 1.0)
        else:
            width = int(width * 0.9)
        text.set_fontsize(pt)
        text.set_text(report_title(report, width))


def _epoch_axis(ax: Any, xs: Sequence[int]) -> None:
    """Integer epoch ticks, the axis starting at the first epoch run (not at an empty 0)."""
    from matplotlib.ticker import MaxNLocator

    ax.set_xlim(xs[0] - 0.5, xs[-1] + 0.5)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
    ax.set_xlabel("epoch")


def _headroom(ax: Any, tops: Sequence[float]) -> None:
    """Room above the tallest stacked bar (stacked bars pin the autoscaled top to their edge)."""
    ax.set_ylim(0, 1.1 * max(tops) if tops and max(tops) > 0 else 1.0)


def _nothing(ax: Any, what: str) -> None:
    ax.text(0.5, 0.5, what, transform=ax.transAxes, ha="center", va="center", color="0.4")


def _plot_stages(ax_stage: Any, ax_hit: Any, xs: Sequence[int],
                 epochs: Sequence[Mapping[str, Any]]) -> None:
    """Stage breakdown, seconds summed over executors, stacked per epoch, with the cache hit
    rate on the twin axis ``ax_hit``."""
    bottom = [0.0] * len(xs)
    for label, get, colour in _STAGES:
        vals = [float(get(e)) for e in epochs]
        ax_stage.bar(xs, vals, bottom=bottom, color=colour, label=label, width=0.8)
        bottom = [b + v for b, v in zip(bottom, vals)]
    _headroom(ax_stage, bottom)
    ax_stage.set_ylabel("seconds, summed over executors")
    ax_stage.set_title("stage breakdown per epoch", fontsize=10)
    ax_hit.plot(xs, [100.0 * float(e["hit_rate"]) for e in epochs], color="#d62728",
                marker="o", markersize=3, label="cache hit rate")
    ax_hit.set_ylim(0, 105)
    ax_hit.set_ylabel("cache hit rate (%)")
    h1, l1 = ax_stage.get_legend_handles_labels()
    h2, l2 = ax_hit.get_legend_handles_labels()
    ax_stage.legend(h1 + h2, l1 + l2, loc="upper center", bbox_to_anchor=(0.5, -0.16),
                    fontsize=7, ncol=6, frameon=False)
    _epoch_axis(ax_stage, xs)


def _plot_wall(ax_wall: Any, xs: Sequence[int], epochs: Sequence[Mapping[str, Any]]) -> None:
    """Wall time of each epoch: training, then its validation."""
    train_wall = [float(e["time_s"]) for e in epochs]
    ax_wall.bar(xs, train_wall, color="#7f7f7f", width=0.8, label="training")
    top = train_wall
    if any("eval_s" in e for e in epochs):
        eval_wall = [float(e.get("eval_s") or 0.0) for e in epochs]
        ax_wall.bar(xs, eval_wall, bottom=train_wall, color="#9467bd", width=0.8,
                    label="validation")
        top = [t + v for t, v in zip(train_wall, eval_wall)]
    _headroom(ax_wall, top)
    ax_wall.set_ylabel("wall seconds")
    ax_wall.set_title("wall time per epoch", fontsize=10)
    ax_wall.legend(fontsize=7, frameon=False, loc="best")
    _epoch_axis(ax_wall, xs)


def _plot_loss(ax_loss: Any, xs: Sequence[int], epochs: Sequence[Mapping[str, Any]]) -> None:
    """Training loss per epoch."""
    pts = [(x, _number(e.get("loss"))) for x, e in zip(xs, epochs)]
    pts = [(x, v) for x, v in pts if v is not None]
    if pts:
        ax_loss.plot([p[0] for p in pts], [p[1] for p in pts], color="#1f77b4", marker="o",
                     markersize=3)
    else:
        _nothing(ax_loss, "no batch trained")
    ax_loss.set_ylabel("loss")
    ax_loss.set_title("training loss (mean over the epoch's batches)", fontsize=10)
    _epoch_axis(ax_loss, xs)


def _plot_validation(ax_val: Any, xs: Sequence[int], epochs: Sequence[Mapping[str, Any]],
                     final: Mapping[str, Any], metric: str = "accuracy") -> None:
    """The validation ``metric`` per epoch (accuracy; a link job's AUC; a recommender's
    recall@10), with the final test score."""
    pts = [(x, _number(e.get("val_acc") if e.get("val_acc") is not None else e.get("val_auc")))
           for x, e in zip(xs, epochs)]
    pts = [(x, v) for x, v in pts if v is not None]
    if pts:
        ax_val.plot([p[0] for p in pts], [p[1] for p in pts], color="#2ca02c", marker="o",
                    markersize=3, label="validation")
    else:
        _nothing(ax_val, "not evaluated")
    test = _number(final.get("test_acc" if metric == "accuracy" else f"test_{metric.lower()}"))
    if test is not None:
        ax_val.axhline(test, color="0.3", linestyle="--", linewidth=1,
                       label=f"final test {test:.4f}")
    if pts or test is not None:
        ax_val.legend(fontsize=7, frameon=False, loc="best")
    ax_val.set_ylabel(metric)
    ax_val.set_title(f"validation {metric}", fontsize=10)
    _epoch_axis(ax_val, xs)


def _add_footer(fig: Any, report: Mapping[str, Any]) -> None:
    """The timing line (and early stop) under the axes, wrapped to the figure's width, with
    room reserved for it in the layout."""
    footer = [f"time: {timing_text(report)}"]
    if report.get("early_stop"):
        footer.append(early_stop_message(report["early_stop"], metric_name(report)))
    chars = int(fig.bbox.width / (0.62 * 8 * fig.dpi / 72))  # 8 pt characters across
    footer = [part for line in footer for part in textwrap.wrap(line, chars)]
    fig.text(0.5, 0.005, "\n".join(footer), ha="center", va="bottom", fontsize=8, color="0.25")
    reserve = (0.012 + 0.018 * len(footer)) * 7.6 / fig.get_figheight()
    fig.get_layout_engine().set(rect=(0, reserve, 1, 1 - reserve))


def report_figure(report: Mapping[str, Any]) -> Any:
    """The report's matplotlib ``Figure`` (Agg canvas attached, layout done), for
    :func:`plot_report` and for tests that measure what it draws.

    Args:
        report: a validated report dict (see :func:`fgnn.report.validate_report`).

    Returns:
        A ``matplotlib.figure.Figure`` whose axes are, in order: stage breakdown, its hit-rate
        twin, loss, wall time, validation score (the task's metric).
    """
    # The Agg canvas directly, no pyplot: no global backend switch, no display needed.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    epochs = report["epochs"]
    xs = [int(e["epoch"]) + 1 for e in epochs]  # shown from 1, like the progress lines
    fig = Figure(figsize=(min(16.0, max(11.0, 0.12 * len(xs) + 8.0)), 7.6), dpi=100,
                 layout="constrained")
    FigureCanvasAgg(fig)
    grid = fig.add_gridspec(2, 2, width_ratios=(1.35, 1.0))
    ax_stage = fig.add_subplot(grid[0, 0])
    ax_hit = ax_stage.twinx()
    ax_loss = fig.add_subplot(grid[0, 1])
    ax_wall = fig.add_subplot(grid[1, 0])
    ax_val = fig.add_subplot(grid[1, 1])

    _plot_stages(ax_stage, ax_hit, xs, epochs)
    _plot_wall(ax_wall, xs, epochs)
    _plot_loss(ax_loss, xs, epochs)
    _plot_validation(ax_val, xs, epochs, report.get("final", {}), metric_name(report))
    _add_footer(fig, report)
    _fit_title(fig, report)
    fig.draw_without_rendering()  # run the layout with the final title in place
    return fig


def preload() -> threading.Thread:
    """Import matplotlib's figure and Agg canvas in a background thread (about a second of CPU):
    a job starts it while it waits for something else (Ray's shutdown), so that the plot it
    draws next does not wait for the import. Returns the started daemon thread."""
    def load() -> None:
        try:
            import matplotlib.backends.backend_agg  # noqa: F401
            import matplotlib.figure  # noqa: F401
            import matplotlib.ticker  # noqa: F401
        except ImportError:  # the plot says so when it is drawn
            pass

    thread = threading.Thread(target=load, name="fgnn-plot-preload", daemon=True)
    thread.start()
    return thread


def plot_report(report: Mapping[str, Any], path: Union[str, os.PathLike]) -> Path:
    """Draw ``report`` (see :func:`report_figure`) to a PNG at ``path`` (atomically).

    Args:
        report: a validated report dict (see :func:`fgnn.report.validate_report`).
        path: output PNG path.

    Returns:
        The PNG path.
    """
    fig = report_figure(report)
    fig.set_layout_engine("none")  # laid out above: the render keeps it (no second layout)
    path = Path(path)
    with atomic_open(path, "wb") as f:
        fig.savefig(f, format="png")
    return path
