"""The run report: schema validation, atomic write + PNG, the table view and its __main__."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import pytest

from fgnn.config import JobConfig
from fgnn.monitor.stats import EpochStats, RunResult, SampleTimes
from fgnn.report import (
    ReportError,
    format_report,
    load_report,
    main,
    png_path_for,
    validate_report,
    write_report,
)


def make_result(epochs: int = 3) -> RunResult:
    """A plausible RunResult as the runtime would fill it."""
    eps = [EpochStats(epoch=i, time_s=1.0 + i, sample=SampleTimes(0.3, 0.05, 0.05),
                      extract_s=0.2, train_s=0.5, hit_rate=0.8, bytes_host_to_device=1 << 20,
                      switches=i, batches=4, loss=1.0 / (i + 1), samplers=1, trainers=3,
                      val_acc=0.5)
           for i in range(epochs)]
    return RunResult(config=JobConfig().to_dict(), mode="factored",
                     allocation={"devices": 4, "samplers": 1, "trainers": 3, "K": 2.5,
                                 "device_kind": "logical"},
                     preprocess={"load_s": 0.1, "hotness_s": 0.2, "cache_fill_s": 0.05},
                     epochs=eps, final={"train_acc": 0.9, "val_acc": 0.7, "test_acc": 0.69})


def test_runresult_shape_validates():
    validate_report(make_result().to_dict())


def _drop(d: dict, path: str) -> None:
    *head, last = path.split(".")
    for k in head:
        d = d[int(k)] if isinstance(d, list) else d[k]
    del d[last]


@pytest.mark.parametrize("path", [
    "config", "mode", "allocation", "allocation.devices", "allocation.samplers",
    "allocation.trainers", "allocation.K", "preprocess.load_s",
    "epochs", "epochs.0.time_s", "epochs.0.sample_s",
    "epochs.0.sample_s.S", "epochs.0.sample_s.M", "epochs.0.sample_s.C", "epochs.0.extract_s",
    "epochs.0.train_s", "epochs.0.hit_rate", "epochs.0.bytes_host_to_device",
    "epochs.0.switches", "epochs.0.batches", "epochs.0.loss", "final.train_acc",
    "final.val_acc", "final.test_acc",
])
def test_every_required_field(path):
    r = make_result().to_dict()
    _drop(r, path)
    with pytest.raises(ReportError, match=path.split(".")[-1]):
        validate_report(r)


@pytest.mark.parametrize("mutate, match", [
    (lambda r: r.update(mode="turbo"), "mode"),
    (lambda r: r["allocation"].update(devices=0), "allocation.devices"),
    (lambda r: r["epochs"][1].update(hit_rate=1.5), r"epochs\[1\].hit_rate"),
    (lambda r: r["epochs"][0].update(batches=2.5), "must be an integer"),
    (lambda r: r["epochs"][0].update(time_s="1"), "must be a number"),
    (lambda r: r["final"].update(test_acc=True), "final.test_acc"),
    (lambda r: r.update(epochs=[]), "non-empty"),
    (lambda r: r["epochs"][0]["sample_s"].update(S=-1.0), ">= 0"),
])
def test_malformed_fields(mutate, match):
    r = make_result().to_dict()
    mutate(r)
    with pytest.raises(ReportError, match=match):
        validate_report(r)


def test_write_atomic_json_and_png(tmp_path):
    res = make_result()
    res.epochs[0].loss = float("nan")  # NaN loss (no batch trained) is written as null
    out = write_report(res, tmp_path / "sub" / "r.json")
    assert out == tmp_path / "sub" / "r.json"
    text = out.read_text()
    assert "NaN" not in text
    data = json.loads(text)
    assert data["epochs"][0]["loss"] is None
    validate_report(data)
    assert set(data) >= {"config", "mode", "allocation", "preprocess", "epochs", "final"}
    assert data["epochs"][1]["sample_s"] == {"total": pytest.approx(0.4), "S": 0.3, "M": 0.05,
                                             "C": 0.05}
    png = png_path_for(out)
    assert png == tmp_path / "sub" / "r.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in out.parent.iterdir()) == ["r.json", "r.png"]  # no temp files


def test_invalid_result_writes_nothing(tmp_path):
    res = make_result()
    res.final = {"train_acc": 0.9}
    with pytest.raises(ReportError, match="val_acc"):
        write_report(res, tmp_path / "r.json")
    assert list(tmp_path.iterdir()) == []


def test_load_report_errors(tmp_path):
    with pytest.raises(ReportError, match="cannot read"):
        load_report(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ReportError, match="not JSON"):
        load_report(bad)


def test_format_table():
    r = make_result(2).to_dict()
    text = format_report(r)
    for word in ("factored", "samplers 1", "trainers 3", "hotness", "hit", "extract",
                 "80.0%", "1.0 MiB", "test 0.6900"):
        assert word in text
    assert len(text.splitlines()) == 4 + 2 + 2 + 3


def test_main_prints_table_and_rejects_bad(tmp_path, capsys):
    out = write_report(make_result(), tmp_path / "r.json", plot=False)
    assert main([str(out)]) == 0
    assert "epoch" in capsys.readouterr().out
    assert main([str(out), "--check"]) == 0
    assert capsys.readouterr().out.strip() == "ok"
    broken = copy.deepcopy(json.loads(out.read_text()))
    del broken["final"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(broken))
    assert main([str(bad)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "final" in err[0]


def test_module_entry_point(tmp_path):
    out = write_report(make_result(), tmp_path / "r.json", plot=False)
    proc = subprocess.run([sys.executable, "-m", "fgnn.report", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "final" in proc.stdout
