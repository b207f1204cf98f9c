"""Errors that name their cause (issue 30, item 8).

Hostile trial: an executor's exception printed Ray's header line with its colour codes
(``executor fgnn-sampler-0 failed: \\x1b[36mray::SamplerExecutor.sample_task()...``), the cause
only with ``--debug``, and no resume hint; ``num_classes=2^40`` failed in torch's allocator, a
non-UTF-8 path inside ``ray.init``, ``hetero:signal=nan`` was taken, and a join of a
token-authenticated cluster said only "cannot join". All in-process, no Ray started.
"""

from __future__ import annotations

import traceback

import pytest

ray = pytest.importorskip("ray")

from fgnn.causes import root_cause, strip_ansi  # noqa: E402
from fgnn.cli import main  # noqa: E402
from fgnn.config import (JobConfig, ModelConfig, RuntimeConfig, SamplerConfig,  # noqa: E402
                         TrainConfig)
from fgnn.data.synthetic import rmat_dataset  # noqa: E402
from fgnn.runtime.driver import Runtime, RuntimeFailure  # noqa: E402
from fgnn.job import Job, JobConfigError  # noqa: E402

TITLE = "\x1b[36mray::SamplerExecutor.sample_task()\x1b[39m"


def _task_error(exc: BaseException, title: str = TITLE) -> "ray.exceptions.RayTaskError":
    """Ray's error for ``exc`` raised inside an actor's call (as the driver receives it)."""
    try:
        raise exc
    except BaseException as e:  # noqa: BLE001
        tb = traceback.format_exc()
        return ray.exceptions.RayTaskError("sample_task", tb, e, proctitle=title, pid=4242,
                                           ip="127.0.0.1")


def test_root_cause_unwraps_nested_task_errors_and_strips_colours():
    inner = _task_error(ValueError("seeds must be distinct\nmore detail"),
                        "\x1b[36mray::ArgStore.get()\x1b[39m")
    outer = _task_error(inner)  # the Sampler called the store, which raised
    assert root_cause(outer) == "ValueError: seeds must be distinct"
    assert root_cause(outer.as_instanceof_cause()) == "ValueError: seeds must be distinct"
    # an actor whose constructor raised: Ray keeps only the text
    died = ray.exceptions.ActorDiedError(_task_error(OSError("short read of features.npy: 96 "
                                                             "of 4096 bytes")))
    assert root_cause(died) == "OSError: short read of features.npy: 96 of 4096 bytes"
    assert root_cause(KeyError("x")) == "KeyError: 'x'"
    assert strip_ansi(TITLE) == "ray::SamplerExecutor.sample_task()"


@pytest.fixture(scope="module")
def dataset():
    return rmat_dataset(scale=7, edge_factor=4, feat_dim=8, num_classes=3, train_frac=0.4,
                        val_frac=0.2, test_frac=0.2, seed=0)


def test_an_executor_exception_stops_in_one_line_with_cause_and_resume_hint(dataset, tmp_path):
    from fgnn.runtime.epoch import _Exec

    cfg = JobConfig(model=ModelConfig("sage", hidden=8), sampler=SamplerConfig(fanouts=(3, 3)),
                    train=TrainConfig(epochs=2, batch_size=16, checkpoint_dir=str(tmp_path)))
    rt = Runtime(cfg, dataset)
    rt.load_resume()
    err = _task_error(ValueError("seeds must be distinct"))
    with pytest.raises(RuntimeFailure) as info:
        rt.workers.failed(_Exec("fgnn-sampler-0", "sampler", 0, handle=None), err)
    msg = str(info.value)
    # before any epoch finished a resume would start where a new run does: run it again
    assert msg.startswith("executor fgnn-sampler-0 failed: ValueError: seeds must be "
                          "distinct; the job stopped; no epoch finished"), msg
    assert "run the job again" in msg and "--resume" not in msg
    assert "\x1b" not in msg and "\n" not in msg
    assert info.value.checkpoint is not None and info.value.checkpoint.is_file()
    assert str(info.value.checkpoint) in msg


def test_the_cli_line_of_an_unexpected_ray_error_names_the_cause(monkeypatch, capsys):
    def run(self):
        raise _task_error(ValueError("seeds must be distinct")).as_instanceof_cause()

    monkeypatch.setattr(Job, "run", run)
    assert main(["--no-progress"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["launch.py: error: ValueError: seeds must be distinct (--debug prints the "
                   "traceback)"], err


@pytest.mark.parametrize("spec, words", [
    ("rmat:scale=5,num_classes=1099511627776", "num_classes must be at most 16777216"),
    ("hetero:signal=nan", "key 'signal' has malformed value 'nan' (not a finite number)"),
    ("hetero:papers=50,classes=1099511627776", "classes must be at most 16777216"),
])
def test_unsized_spec_values_are_refused_in_one_line(spec, words, capsys):
    with pytest.raises(SystemExit) as info:
        main(["--dataset", spec, "--no-progress"])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("launch.py: error: argument --dataset"), err
    assert words in err[0], err


def test_a_manifest_with_2_to_the_40_classes_is_refused(tmp_path):
    import json

    from fgnn.data import load_dataset
    from fgnn.data.ondisk import save_dataset

    save_dataset(rmat_dataset(scale=5, edge_factor=4, feat_dim=4, num_classes=3,
                              train_frac=0.5, seed=0), tmp_path / "d")
    manifest = json.loads((tmp_path / "d" / "manifest.json").read_text())
    manifest["num_classes"] = 2 ** 40
    (tmp_path / "d" / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match=r"num_classes=1099511627776 is more than 16777216"):
        load_dataset(f"ondisk:{tmp_path / 'd'}")


@pytest.mark.parametrize("field", ["report", "data_root"])
def test_a_path_that_is_not_utf8_is_refused_before_ray(tmp_path, field):
    bad = str(tmp_path) + "/caf\udce9"  # b"caf\xe9": Latin-1, as os.fsdecode gives it
    kw = {"report": bad + "/r.json"} if field == "report" else {"data_root": bad}
    job = Job(JobConfig(dataset="cora", **kw))
    with pytest.raises(JobConfigError, match="is not UTF-8 text") as info:
        job.validate()
    assert info.value.field == field


def test_a_failed_join_says_the_cluster_may_need_token_auth(monkeypatch):
    import fgnn.job as job_mod

    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)

    def refuse(**kw):
        raise ConnectionError("Could not connect to the GCS at 10.0.0.9:6379")

    monkeypatch.setattr(ray, "init", refuse)
    job = job_mod.Job(JobConfig(runtime=RuntimeConfig(address="10.0.0.9:6379")), out=None)
    with pytest.raises(JobConfigError) as info:
        job._start_ray()
    why = info.value.why
    assert why.startswith("cannot join the Ray cluster (Could not connect"), why
    assert "may require token authentication" in why and "RAY_AUTH_MODE=token" in why, why
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    with pytest.raises(JobConfigError) as info:
        job._start_ray()
    assert "RAY_AUTH_TOKEN" in info.value.why and "may require" not in info.value.why
