"""The third hostile trial (issue 40), a late interrupt: a run interrupted after its last epoch
(in the final evaluation, or while it writes its outputs) keeps a checkpoint whose ``--resume``
goes on to the final evaluation and the outputs instead of ``nothing to resume``; a run that
wrote them is finished. In-process jobs (one device, no Ray).
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

import fgnn
from fgnn.config import JobConfig, RuntimeConfig, SamplerConfig, TrainConfig
from fgnn.runtime.resume import RunFinished
from fgnn.runtime.driver import Runtime
from fgnn.job import Job

TINY = "rmat:scale=7,edge_factor=4,feat_dim=8,num_classes=3,train_frac=0.4,seed=0"
EPOCHS = 2


@pytest.fixture
def no_ray(monkeypatch):
    def refuse(self):
        raise AssertionError("Ray would start")
    monkeypatch.setattr(Job, "_init_ray", refuse)


def _cfg(ckpt: Path, report: Path, resume: bool = False, **train) -> JobConfig:
    return JobConfig(dataset=TINY, sampler=SamplerConfig(fanouts=(4, 4)), recipe="off",
                     runtime=RuntimeConfig(devices=1), report=str(report),
                     train=TrainConfig(epochs=EPOCHS, batch_size=32, checkpoint_dir=str(ckpt),
                                       resume=resume, **train))


def _run(cfg: JobConfig) -> tuple[fgnn.RunResult, str]:
    out = io.StringIO()
    result = Job(cfg, progress=False, out=out).run()
    return result, out.getvalue()


def _interrupt(monkeypatch, cls, name):
    """``cls.name`` raises KeyboardInterrupt (Ctrl-C, or SIGTERM through fgnn.sigterm) once."""
    original = getattr(cls, name)

    def interrupted(*a, **k):
        monkeypatch.setattr(cls, name, original)
        raise KeyboardInterrupt
    monkeypatch.setattr(cls, name, interrupted)


def _no_training(monkeypatch):
    def refuse(self, epoch, first):
        raise AssertionError(f"epoch {epoch + 1} trained again")
    monkeypatch.setattr(Runtime, "_train_epoch", refuse)


@pytest.mark.parametrize("where", ["final evaluation", "outputs"])
def test_a_late_interrupt_resumes_into_the_final_evaluation_and_outputs(
        tmp_path, monkeypatch, no_ray, where):
    ck, report = tmp_path / "ck", tmp_path / "r.json"
    if where == "final evaluation":
        _interrupt(monkeypatch, Runtime, "_final_scores")
    else:  # the model file or report being written
        _interrupt(monkeypatch, Job, "_write_outputs")
    with pytest.raises(KeyboardInterrupt):
        _run(_cfg(ck, report))
    assert (ck / "runtime.pt").is_file() and not report.exists()

    _no_training(monkeypatch)
    result, said = _run(_cfg(ck, report, resume=True))
    assert "resuming into the final evaluation and the outputs" in said
    written = json.loads(report.read_text())
    assert [e["epoch"] for e in written["epochs"]] == list(range(EPOCHS))
    assert set(written["final"]) == {"train_acc", "val_acc", "test_acc"}
    assert written["final"] == pytest.approx(result.final, nan_ok=True)
    assert 0.0 <= result.final["test_acc"] <= 1.0

    with pytest.raises(RunFinished, match=r"finished all 2 epochs and written its outputs"):
        _run(_cfg(ck, tmp_path / "again.json", resume=True))


def test_a_run_that_wrote_its_outputs_is_finished(tmp_path, monkeypatch, no_ray):
    ck = tmp_path / "ck"
    _run(_cfg(ck, tmp_path / "r.json"))
    with pytest.raises(RunFinished, match="nothing to resume"):
        _run(_cfg(ck, tmp_path / "r2.json", resume=True))
    assert not (tmp_path / "r2.json").exists()
