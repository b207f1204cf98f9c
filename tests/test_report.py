"""The run report: schema validation, atomic write + PNG, the table view and its __main__."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from typing import Optional

import pytest

from fgnn.config import JobConfig, RuntimeConfig
from fgnn.monitor.stats import EpochStats, RunResult, SampleTimes
from fgnn.monitor.summary import metric_name
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
                      val_acc=min(0.5 + 0.01 * i, 0.6), eval_s=0.25)
           for i in range(epochs)]
    cfg = JobConfig(runtime=RuntimeConfig(devices=4)).to_dict()
    return RunResult(config=cfg, mode="factored",
                     allocation={"devices": 4, "devices_requested": 4, "samplers": 1,
                                 "trainers": 3, "K": 2.5, "device_kind": "logical",
                                 "cache_policy": "presc"},
                     preprocess={"load_s": 0.1, "hotness_s": 0.2, "startup_s": 3.5,
                                 "cache_fill_s": 0.05},
                     epochs=eps, final={"train_acc": 0.9, "val_acc": 0.7, "test_acc": 0.69},
                     final_eval_s=0.75)


#: Fields a report written before the start-up / evaluation split and the policy record lacks.
NEW_FIELDS = ("preprocess.startup_s", "preprocess.cache_fill_s", "allocation.devices_requested",
              "allocation.cache_policy", "final_eval_s", "early_stop", "epochs.*.eval_s",
              "metric")


def older_report(epochs: int = 3) -> dict:
    """A report as older versions wrote it: ``cache_build_s``, none of :data:`NEW_FIELDS`."""
    r = make_result(epochs).to_dict()
    for path in NEW_FIELDS:
        if path.startswith("epochs.*."):
            for e in r["epochs"]:
                del e[path.rsplit(".", 1)[1]]
        else:
            _drop(r, path)
    r["preprocess"]["cache_build_s"] = 3.55
    return r


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
    (lambda r: r["epochs"][2].update(eval_s=-0.1), r"epochs\[2\].eval_s"),
    (lambda r: r["epochs"][0].update(val_acc=1.2), r"epochs\[0\].val_acc"),
    (lambda r: r["preprocess"].update(startup_s="3"), "preprocess.startup_s"),
    (lambda r: r["preprocess"].update(cache_fill_s=-1), "preprocess.cache_fill_s"),
    (lambda r: r["preprocess"].update(cache_build_s=None), "preprocess.cache_build_s"),
    (lambda r: r.update(final_eval_s=-2.0), "final_eval_s: must be >= 0"),
    (lambda r: r["allocation"].update(devices_requested=0), "allocation.devices_requested"),
    (lambda r: r["allocation"].update(cache_policy=3), "allocation.cache_policy"),
    (lambda r: r.update(early_stop="yes"), "early_stop"),
    (lambda r: r.update(early_stop={"epoch": 4, "patience": 2, "best_epoch": 1}),
     "early_stop.best_val_acc: missing"),
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


def test_older_report_loads_prints_and_plots(tmp_path):
    r = older_report()
    validate_report(r)
    text = format_report(r)
    assert "worker start-up + cache fill 3.55s" in text  # the old sum, named as what it holds
    time_line = next(line for line in text.splitlines() if line.startswith("time"))
    assert "validation" not in time_line and "final" not in time_line  # not measured: not shown
    assert "cache presc" in text and "4 devices (logical)" in text
    row = text.splitlines()[text.splitlines().index(_rule(text)) + 1]
    assert row.split()[2] == "-"  # no eval_s: shown as unknown, not as 0
    path = tmp_path / "old.json"
    path.write_text(json.dumps(r))
    assert main([str(path)]) == 0
    write_report(r, tmp_path / "again.json")  # validates and draws


def _rule(text: str) -> str:
    return next(line for line in text.splitlines() if line and set(line) == {"-"})


def test_format_table():
    r = make_result(2).to_dict()
    r["epochs"][1]["val_acc"] = None  # not evaluated in epoch 2
    text = format_report(r)
    for word in ("factored", "samplers 1", "trainers 3", "hit", "extract", "80.0%", "1.0 MiB",
                 "test 0.6900", "cache presc", "4 devices (logical)"):
        assert word in text, word
    lines = text.splitlines()
    head = lines[lines.index(_rule(text)) - 1].split()
    assert head[:3] == ["epoch", "wall", "eval"] and head[-3:] == ["loss", "val", "accuracy"]
    rows = [line.split() for line in lines[lines.index(_rule(text)) + 1:][:2]]
    assert [row[0] for row in rows] == ["1", "2"]
    assert [row[2] for row in rows] == ["0.250", "0.250"]  # eval_s per epoch
    assert [row[-1] for row in rows] == ["0.5000", "-"]  # val_acc per epoch, '-' when absent
    assert len(lines) == 5 + 2 + 2 + 1 + 2 + 1 + 1


def test_format_table_timings_say_what_they_are():
    text = format_report(make_result(2).to_dict())
    time_line = next(line for line in text.splitlines() if line.startswith("time"))
    # PreSC ranks inside the warm-up epochs: no ranking step on the driver to show
    assert time_line == ("time     load 0.10s, worker start-up 3.50s, "
                         "cache fill 0.05s, training (2 epochs) 3.00s, validation 0.50s, "
                         "final evaluation 0.75s")
    assert "summed over executors" in text and "wall seconds" in text


def test_format_table_states_devices_used_and_asked():
    r = make_result(2).to_dict()
    r["mode"] = "single"
    r["allocation"].update(devices=1, devices_requested=8, samplers=1, trainers=0)
    text = format_report(r)
    assert "1 device (logical; single mode uses 1 device; 8 were asked for)" in text
    assert "1 devices" not in text
    del r["allocation"]["devices_requested"]  # older report: what was asked is in the config
    r["config"]["runtime"]["devices"] = 8
    assert "8 were asked for" in format_report(r)


def test_format_table_states_policy_in_force():
    r = make_result(2).to_dict()
    r["mode"] = "time-sharing"
    r["allocation"]["cache_policy"] = "degree"
    text = format_report(r)
    assert "cache degree (presc asked for; time-sharing mode ranks by degree)" in text
    assert "pre-sampling" not in text and "cache ranking (degree) 0.20s" in text
    old = older_report(2)  # written before the field: time-sharing ranked by degree then too
    old["mode"] = "time-sharing"
    assert "cache degree (presc asked for" in format_report(old)


def test_format_table_early_stop():
    r = make_result(3).to_dict()
    assert "early stop" not in format_report(r)
    r["early_stop"] = {"epoch": 6, "patience": 3, "best_val_acc": 0.812, "best_epoch": 3}
    validate_report(r)
    assert ("early stop after epoch 7: no better validation accuracy in 3 evaluations "
            "(best 0.8120 at epoch 4)") in format_report(r).splitlines()


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


@pytest.mark.parametrize("content, why", [
    (b"[" * 200_000, "nests too deeply"),
    (b"{not json", "is not JSON"),
    (b"\xff\xfe{}", "not UTF-8"),
])
def test_main_refuses_unparseable_json_in_one_line(content, why, tmp_path, capsys):
    """Issue 29: 200,000 ``[`` raised a RecursionError traceback; a file that does not parse
    exits 2 with one line naming it and why, and is left as it was."""
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    assert main([str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("fgnn.report: error:") and str(bad) in err[0] and why in err[0]
    assert bad.read_bytes() == content


def test_module_entry_point(tmp_path):
    out = write_report(make_result(), tmp_path / "r.json", plot=False)
    proc = subprocess.run([sys.executable, "-m", "fgnn.report", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "final" in proc.stdout


def test_pipe_to_head_is_quiet(tmp_path):
    # a table far longer than a pipe's buffer (64 KiB): head exits while the writer still writes
    out = write_report(make_result(3000), tmp_path / "r.json", plot=False)
    writer = subprocess.Popen([sys.executable, "-m", "fgnn.report", str(out)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    head = subprocess.run(["head", "-n", "3"], stdin=writer.stdout, capture_output=True,
                          text=True, timeout=120)
    writer.stdout.close()  # only head holds the read end now
    err = writer.stderr.read().decode()
    writer.wait(timeout=120)
    assert head.stdout.splitlines()[0].startswith("dataset")
    assert len(head.stdout.splitlines()) == 3
    assert err == "", err  # no BrokenPipeError traceback, no "Exception ignored" note


@pytest.mark.parametrize("empty", ["val_acc", "test_acc"])
def test_empty_split_score_is_recorded_as_null(tmp_path, empty):
    result = make_result()
    result.final[empty] = float("nan")  # what the node task scores on an empty split
    path = tmp_path / "r.json"
    write_report(result, str(path))
    report = load_report(str(path))
    assert report["final"][empty] is None
    assert f"{empty.split('_')[0]} -" in format_report(report)


def test_train_score_must_still_be_a_number():
    report = make_result().to_dict()
    report["final"]["train_acc"] = None
    with pytest.raises(ReportError, match="final.train_acc: must be a number"):
        validate_report(report)


def link_report(metric: Optional[str] = "AUC") -> dict:
    """A link-prediction report: validation AUC and AP per epoch, the final AUC and AP."""
    r = make_result(2).to_dict()
    r["config"]["task"] = "link"
    for e in r["epochs"]:
        e["val_acc"], e["val_auc"], e["val_ap"] = None, 0.91, 0.9
    r["final"] = {"val_auc": 0.92, "val_ap": 0.91, "test_auc": 0.93, "test_ap": 0.92}
    if metric is None:
        del r["metric"]  # written before reports named their metric
    else:
        r["metric"] = metric
    return r


@pytest.mark.parametrize("metric", ["AUC", None])
def test_a_link_report_table_names_auc_not_accuracy(metric):
    r = link_report(metric)
    validate_report(r)
    text = format_report(r)
    lines = text.splitlines()
    head = lines[lines.index(_rule(text)) - 1].split()
    assert head[-2:] == ["val", "AUC"] and "accuracy" not in text
    rows = [line.split() for line in lines[lines.index(_rule(text)) + 1:][:2]]
    assert [row[-1] for row in rows] == ["0.9100", "0.9100"]


def test_the_report_carries_the_metric_of_its_task():
    assert make_result().to_dict()["metric"] is None       # unnamed: the task's (accuracy)
    assert metric_name(make_result().to_dict()) == "accuracy"
    r = make_result().to_dict()
    r["config"]["task"], r["metric"] = "recsys", None
    assert metric_name(r) == "recall@10"
    for bad in (3, "", "  "):
        r = make_result().to_dict()
        r["metric"] = bad
        with pytest.raises(ReportError, match="report field metric"):
            validate_report(r)
    from fgnn.tasks.link import LinkTask
    from fgnn.tasks import NodeTask
    from fgnn.tasks.recsys import RecsysTask
    assert (NodeTask.metric, LinkTask.metric, RecsysTask.metric) == \
        ("accuracy", "AUC", "recall@10")


def test_a_link_run_stopped_early_names_its_auc():
    r = link_report()
    r["early_stop"] = {"epoch": 5, "patience": 2, "best_val_acc": 0.93, "best_epoch": 3}
    assert ("early stop after epoch 6: no better validation AUC in 2 evaluations (best 0.9300 "
            "at epoch 4)") in format_report(r)
