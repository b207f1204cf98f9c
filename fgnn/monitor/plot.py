"""The report's PNG: per-epoch stage breakdown (stacked bars) and cache hit rate.

The bars split each epoch's executor time into Sample (S sampling, M marking cached vertices,
C copying to the global queue; FGNN Table 5), Extract and Train; the line on the right axis is the
cache hit rate. Drawn with matplotlib's Agg backend (no display needed).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Union

from fgnn.atomic import atomic_open

__all__ = ["plot_report"]

_STAGES = (  # (label, getter, colour)
    ("Sample: S", lambda e: e["sample_s"]["S"], "#1f77b4"),
    ("Sample: M", lambda e: e["sample_s"]["M"], "#6baed6"),
    ("Sample: C", lambda e: e["sample_s"]["C"], "#c6dbef"),
    ("Extract", lambda e: e["extract_s"], "#ff7f0e"),
    ("Train", lambda e: e["train_s"], "#2ca02c"),
)


def plot_report(report: Mapping[str, Any], path: Union[str, os.PathLike]) -> Path:
    """Draw the stage breakdown and hit rate of ``report`` to a PNG at ``path`` (atomically).

    Args:
        report: a validated report dict (see :func:`fgnn.report.validate_report`).
        path: output PNG path.

    Returns:
        The PNG path.
    """
    # The Agg canvas directly, no pyplot: no global backend switch, no display needed.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    epochs = report["epochs"]
    xs = [int(e["epoch"]) + 1 for e in epochs]  # shown from 1, like the progress lines
    fig = Figure(figsize=(max(6.0, 0.35 * len(xs) + 3.0), 4.2), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    bottom = [0.0] * len(xs)
    for label, get, colour in _STAGES:
        vals = [float(get(e)) for e in epochs]
        ax.bar(xs, vals, bottom=bottom, color=colour, label=label, width=0.8)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_xlabel("epoch")
    ax.set_ylabel("seconds (summed over executors)")
    alloc = report.get("allocation", {})
    cfg = report.get("config", {})
    model = cfg.get("model", {}).get("name", "") if isinstance(cfg.get("model"), Mapping) else ""
    ax.set_title(f"{cfg.get('dataset', '')} {model} · {report.get('mode', '')} · "
                 f"{alloc.get('samplers', '?')}S/{alloc.get('trainers', '?')}T", fontsize=9)

    ax2 = ax.twinx()
    ax2.plot(xs, [100.0 * float(e["hit_rate"]) for e in epochs], color="#d62728", marker="o",
             markersize=3, label="hit rate")
    ax2.set_ylim(0, 105)
    ax2.set_ylabel("cache hit rate (%)")
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, loc="upper center", bbox_to_anchor=(0.5, -0.14), fontsize=7,
              ncol=6, frameon=False)
    from matplotlib.ticker import MaxNLocator
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.tight_layout()

    path = Path(path)
    with atomic_open(path, "wb") as f:
        fig.savefig(f, format="png")
    return path
