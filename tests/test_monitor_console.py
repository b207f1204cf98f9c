"""What a run says, end to end through ``fgnn.Job`` (one shared Ray instance): the devices it
used and asked for, the cache policy in force, why it stopped early, and its timings — on the
console and in the report alike."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from fgnn.config import CacheConfig, JobConfig, RuntimeConfig, SamplerConfig, TrainConfig
from fgnn.job import Job
from fgnn.report import format_report, validate_report

TINY = "rmat:scale=8,edge_factor=4,feat_dim=16,num_classes=4,train_frac=0.3,seed=1"


def _run(cfg: JobConfig) -> tuple[list[str], dict]:
    out = io.StringIO()
    Job(cfg, progress=False, out=out).run()
    report = json.loads(Path(cfg.report).read_text())
    validate_report(report)
    return out.getvalue().splitlines(), report


def test_single_mode_says_one_device_and_why_it_stopped(ray_cluster, tmp_path):
    # lr so small that the weights do not move: the second evaluation is no better than the
    # first, and patience 1 stops the run there, four epochs early
    cfg = JobConfig(dataset=TINY, sampler=SamplerConfig(fanouts=(4, 4)),
                    runtime=RuntimeConfig(mode="single", devices=3),
                    train=TrainConfig(epochs=6, batch_size=64, lr=1e-9, patience=1),
                    report=str(tmp_path / "r.json"))
    log, report = _run(cfg)

    (devices,) = [line for line in log if "Ray logical GPUs" in line or "CUDA" in line]
    assert devices.startswith("fgnn: 1 device: ")
    assert devices.endswith("; single mode uses 1 device; 3 were asked for")
    assert not any("1 devices" in line for line in log)
    a = report["allocation"]
    assert (a["devices"], a["devices_requested"]) == (1, 3)

    stop = report["early_stop"]
    assert len(report["epochs"]) == 2 and stop["epoch"] == 1 and stop["best_epoch"] == 0
    assert stop["patience"] == 1 and stop["best_val_acc"] == report["epochs"][0]["val_acc"]
    why = (f"early stop after epoch 2: no better validation accuracy in 1 evaluation "
           f"(best {stop['best_val_acc']:.4f} at epoch 1)")
    assert f"fgnn: {why}" in log
    table = format_report(report)
    assert why in table.splitlines()
    assert "1 device (logical; single mode uses 1 device; 3 were asked for)" in table \
        or "1 device (gpu; single mode uses 1 device; 3 were asked for)" in table

    (timing,) = [line for line in log if line.startswith("fgnn: time: ")]
    for label in ("load ", "worker start-up ", "cache fill ", "training (2 epochs) ", "validation "):
        assert label in timing, label


def test_time_sharing_reports_the_degree_policy_it_ran(ray_cluster, tmp_path):
    cfg = JobConfig(dataset=TINY, sampler=SamplerConfig(fanouts=(4, 4)),
                    cache=CacheConfig(policy="presc"),
                    runtime=RuntimeConfig(mode="time-sharing", devices=2),
                    train=TrainConfig(epochs=1, batch_size=64, patience=1),
                    report=str(tmp_path / "r.json"))
    log, report = _run(cfg)
    assert report["allocation"]["cache_policy"] == "degree"
    assert report["config"]["cache"]["policy"] == "presc"
    assert "cache degree (presc asked for; time-sharing mode ranks by degree)" \
        in format_report(report)
    assert report["early_stop"] is None  # the only epoch was the last: not an early stop
    assert not any("early stop" in line for line in log)
    assert any(line.startswith("fgnn: 2 devices: ") for line in log)
    assert not any("asked for" in line for line in log)
