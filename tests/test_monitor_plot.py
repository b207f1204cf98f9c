"""The report PNG: loss and validation panels beside the stage breakdown, a title that fits,
epoch axes that start at the first epoch run, and timings named for what they hold."""

from __future__ import annotations

import math

import pytest

from fgnn.config import CacheConfig, JobConfig, RuntimeConfig
from fgnn.monitor import plot as plot_mod
from fgnn.monitor.plot import plot_report, report_figure, report_title
from fgnn.monitor.stats import EpochStats, RunResult, SampleTimes

LONG_SPEC = ("rmat:scale=18,edge_factor=16,feat_dim=128,num_classes=4,train_frac=0.1,seed=3,"
             + ",".join(f"extra_parameter_{i}={1000 * i}" for i in range(20)))


def _report(epochs=range(4), spec=LONG_SPEC, mode="factored") -> dict:
    eps = [EpochStats(epoch=i, time_s=1.0 + 0.1 * i, sample=SampleTimes(0.3, 0.05, 0.05),
                      extract_s=0.2, train_s=0.5, hit_rate=0.8, batches=4,
                      loss=2.0 / (i + 1), samplers=1, trainers=3,
                      val_acc=None if i % 2 else 0.5 + 0.01 * i, eval_s=0.3)
           for i in epochs]
    cfg = JobConfig(dataset=spec, runtime=RuntimeConfig(devices=8, mode=mode),
                    cache=CacheConfig(policy="presc")).to_dict()
    return RunResult(config=cfg, mode=mode,
                     allocation={"devices": 4, "devices_requested": 8, "samplers": 1,
                                 "trainers": 3, "K": 2.0, "device_kind": "logical",
                                 "cache_policy": "degree"},
                     preprocess={"load_s": 0.1, "presample_s": 0.2, "startup_s": 3.5,
                                 "cache_fill_s": 0.4},
                     epochs=eps, final={"train_acc": 0.9, "val_acc": 0.7, "test_acc": 0.65},
                     final_eval_s=0.8,
                     early_stop={"epoch": 3, "patience": 2, "best_val_acc": 0.52,
                                 "best_epoch": 2}).to_dict()


def _axes(fig):
    stage, hit, loss, wall, val = fig.axes
    return {"stage": stage, "hit": hit, "loss": loss, "wall": wall, "val": val}


def _inside(artist, fig) -> bool:
    box = artist.get_window_extent(fig.canvas.get_renderer())
    return (box.x0 >= 0 and box.y0 >= 0 and box.x1 <= fig.bbox.width
            and box.y1 <= fig.bbox.height)


@pytest.mark.parametrize("n", [1, 3, 40])
def test_title_fits_the_figure(n):
    fig = report_figure(_report(range(n)))
    title = fig._suptitle
    assert _inside(title, fig)
    text = title.get_text()
    assert text.startswith("rmat:scale=18,edge_factor=16") and "…" in text  # shortened
    assert "cache degree" in text and "4 devices (8 asked for)" in text


def test_title_check_detects_a_title_that_does_not_fit(monkeypatch):
    """The extent check above fails for the unfitted title (the spec on one line)."""
    monkeypatch.setattr(plot_mod, "_fit_title", lambda fig, report: fig.suptitle(
        report_title(report, width=10_000), fontsize=11))
    fig = report_figure(_report())
    assert not _inside(fig._suptitle, fig)


def test_title_of_a_short_spec_is_kept_whole():
    title = report_title(_report(spec="cora"))
    assert title.splitlines() == ["cora", "gcn · factored · 4 devices (8 asked for) · "
                                          "1 sampler, 3 trainers · cache degree"]


@pytest.mark.parametrize("first, n", [(0, 3), (5, 4), (0, 1)])
def test_epoch_axes_start_at_the_first_epoch_run(first, n):
    fig = report_figure(_report(range(first, first + n)))
    shown = first + 1  # epochs are numbered from 1 in the plot
    for name, ax in _axes(fig).items():
        if name == "hit":
            continue
        lo, hi = ax.get_xlim()
        assert shown - 1 < lo < shown and hi < first + n + 1, (name, lo, hi)
        visible = [t for t in ax.get_xticks() if lo <= t <= hi]
        assert visible and min(visible) >= shown, (name, visible)


def test_loss_and_validation_panels_hold_the_epochs():
    r = _report(range(5))
    ax = _axes(report_figure(r))
    (loss_line,) = ax["loss"].get_lines()
    assert list(loss_line.get_xdata()) == [1, 2, 3, 4, 5]
    assert list(loss_line.get_ydata()) == pytest.approx([e["loss"] for e in r["epochs"]])
    val_line, test_line = ax["val"].get_lines()
    assert list(val_line.get_xdata()) == [1, 3, 5]  # only the evaluated epochs
    assert list(val_line.get_ydata()) == pytest.approx([0.5, 0.52, 0.54])
    assert list(test_line.get_ydata()) == [0.65, 0.65]  # final test accuracy, dashed
    stage_top = [p.get_y() + p.get_height() for p in ax["stage"].patches[-5:]]
    assert stage_top == pytest.approx([1.1] * 5)  # S+M+C+extract+train per epoch


def test_wall_panel_and_footer_say_what_the_times_are():
    r = _report(range(3))
    fig = report_figure(r)
    wall = _axes(fig)["wall"]
    heights = [p.get_height() for p in wall.patches]
    assert heights == pytest.approx([1.0, 1.1, 1.2, 0.3, 0.3, 0.3])  # training, validation
    assert [t.get_text() for t in wall.get_legend().get_texts()] == ["training", "validation"]
    footer = fig.texts[0].get_text()
    for part in ("load 0.10s", "cache ranking (degree) 0.20s", "worker start-up 3.50s",
                 "cache fill 0.40s", "validation 0.90s", "final evaluation 0.80s",
                 "early stop after epoch 4"):
        assert part in footer, part
    assert _inside(fig.texts[0], fig)


def test_missing_loss_and_no_validation():
    r = _report(range(2))
    for e in r["epochs"]:
        e["loss"], e["val_acc"] = None, None
    r["final"]["test_acc"] = math.nan
    ax = _axes(report_figure(r))
    assert ax["loss"].get_lines() == [] and ax["val"].get_lines() == []
    assert [t.get_text() for t in ax["val"].texts] == ["not evaluated"]


def test_older_report_plots(tmp_path):
    r = _report(range(2))
    for e in r["epochs"]:
        del e["eval_s"]
    for key in ("final_eval_s", "early_stop"):
        del r[key]
    del r["preprocess"]["startup_s"], r["preprocess"]["cache_fill_s"]
    r["preprocess"]["cache_build_s"] = 3.9
    fig = report_figure(r)
    assert len(_axes(fig)["wall"].patches) == 2  # training only: validation was not measured
    assert "worker start-up + cache fill 3.90s" in fig.texts[0].get_text()
    out = plot_report(r, tmp_path / "p.png")
    assert out.read_bytes()[:4] == b"\x89PNG"
    assert [p.name for p in tmp_path.iterdir()] == ["p.png"]


@pytest.mark.parametrize("metric", ["AUC", None])
def test_a_link_run_plots_its_validation_auc_under_that_name(metric):
    """A link job's panel says AUC (title, axis), and its dashed line is the test AUC; a report
    written before reports named their metric reads the same from its task."""
    from test_report import link_report

    ax = _axes(report_figure(link_report(metric)))["val"]
    assert ax.get_title() == "validation AUC" and ax.get_ylabel() == "AUC"
    val_line, test_line = ax.get_lines()
    assert list(val_line.get_ydata()) == pytest.approx([0.91, 0.91])
    assert list(test_line.get_ydata()) == [0.93, 0.93]            # final test AUC, dashed
    assert "final test 0.9300" in [t.get_text() for t in ax.get_legend().get_texts()]


def test_a_node_run_plots_validation_accuracy():
    ax = _axes(report_figure(_report()))["val"]
    assert (ax.get_title(), ax.get_ylabel()) == ("validation accuracy", "accuracy")
