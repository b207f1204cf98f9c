"""Progress bars and per-epoch summary lines; the report PNG."""

from __future__ import annotations

import io

from fgnn.monitor.plot import plot_report
from fgnn.monitor.progress import Progress, format_epoch
from fgnn.monitor.stats import EpochStats, SampleTimes


def _stats(epoch: int = 2) -> EpochStats:
    return EpochStats(epoch=epoch, time_s=1.5, sample=SampleTimes(0.3, 0.06, 0.04),
                      extract_s=0.2, train_s=0.7, hit_rate=0.875, switches=2, batches=5,
                      loss=0.512, samplers=1, trainers=3, val_acc=0.71)


def test_format_epoch_has_every_number():
    line = format_epoch(_stats(), epochs=30)  # EpochStats.epoch is 0-based, shown from 1
    for part in ("epoch  3/30", "1.50s", "sample 0.40s", "S 0.30", "M 0.06", "C 0.04",
                 "extract 0.20s", "train 0.70s", "hit 87.5%", "1 samplers", "3 trainers",
                 "2 switches", "loss 0.5120", "val 0.7100"):
        assert part in line, part
    nan = _stats()
    nan.loss, nan.val_acc = float("nan"), None
    assert "loss -" in format_epoch(nan) and "val" not in format_epoch(nan)


def test_progress_bar_and_lines():
    buf = io.StringIO()
    p = Progress(epochs=2, batch_size=100, num_train=250, file=buf, mininterval=0)
    for epoch in (0, 1):
        for done in (1, 2, 3):
            p.on_batch(epoch, done, 3, 1.0 / done)
        p.on_epoch(_stats(epoch))
    p.close()
    text = buf.getvalue()
    assert "epoch 1/2" in text and "samples/s" in text and "loss" in text
    assert len(p.lines) == 2 and p.lines[1].startswith("epoch 2/2")  # epochs 0, 1 shown as 1, 2


def test_progress_disabled_records_only():
    buf = io.StringIO()
    p = Progress(epochs=1, batch_size=10, enabled=False, file=buf)
    p.on_batch(0, 1, 1, 0.3)
    p.on_epoch(_stats(0))
    assert buf.getvalue() == "" and len(p.lines) == 1


def test_plot_report_png(tmp_path):
    eps = [dict(_stats(i).to_dict()) for i in range(1, 4)]
    report = {"config": {"dataset": "cora", "model": {"name": "gcn"}}, "mode": "factored",
              "allocation": {"samplers": 1, "trainers": 3}, "epochs": eps}
    out = plot_report(report, tmp_path / "p.png")
    assert out.read_bytes()[:4] == b"\x89PNG"
    assert [p.name for p in tmp_path.iterdir()] == ["p.png"]
