"""Outputs never destroy other files (issue 19): every output path is checked before Ray starts,
an atomic write never replaces a non-regular file, and a late write failure keeps the others."""

from __future__ import annotations

import os
import stat
import types
from pathlib import Path

import pytest
import torch

from fgnn.atomic import WriteError, atomic_open
from fgnn.cli import main
from fgnn.config import JobConfig, RuntimeConfig
from fgnn.monitor.stats import EpochStats, RunResult, SampleTimes

#: A tiny dataset so a test that gets past validation loads in milliseconds.
TINY = "rmat:scale=6,edge_factor=4,feat_dim=4,num_classes=2,train_frac=0.5,seed=0"


def _snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under ``root`` with its type, and size, mtime and bytes of regular files (a
    directory's mtime moves: the up-front check creates and removes a probe file in it)."""
    snap = {}
    for p in sorted(root.rglob("*")):
        st = os.lstat(p)
        if stat.S_ISREG(st.st_mode):
            snap[str(p)] = (stat.S_IFREG, st.st_size, st.st_mtime_ns, p.read_bytes())
        else:
            snap[str(p)] = (stat.S_IFMT(st.st_mode),)
    return snap


def _refused(argv: list[str], capsys, tmp_path: Path, dataset: str = TINY) -> str:
    """``main(argv)`` exits 2 with one stderr line, before Ray, changing nothing in tmp_path."""
    import ray

    before = _snapshot(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(argv + ["--dataset", dataset, "--epochs", "1", "--no-progress"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert not ray.is_initialized()
    assert _snapshot(tmp_path) == before
    return err[0]


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("case", ["report-fifo", "model-fifo", "plot-fifo", "checkpoint-fifo",
                                  "checkpoint-is-dir"])
def test_non_regular_output_refused(case, capsys, tmp_path):
    """A device-like target (a FIFO here; /dev/null and /dev/full alike) is refused up front."""
    (tmp_path / "ck").mkdir()
    argv, flag, target = {
        "report-fifo": (["--report", str(tmp_path / "r.json")], "--report", "r.json"),
        "model-fifo": (["--save-model", str(tmp_path / "m.pt")], "--save-model", "m.pt"),
        "plot-fifo": (["--report", str(tmp_path / "r.json")], "--report", "r.png"),
        "checkpoint-fifo": (["--checkpoint-dir", str(tmp_path / "ck")], "--checkpoint-dir",
                            "ck/runtime.pt"),
        "checkpoint-is-dir": (["--checkpoint-dir", str(tmp_path / "ck")], "--checkpoint-dir",
                              "ck/runtime.pt"),
    }[case]
    if case == "checkpoint-is-dir":
        (tmp_path / target).mkdir()
    else:
        _fifo(tmp_path / target)
    line = _refused(argv, capsys, tmp_path)
    assert flag in line, line
    assert ("FIFO" in line or "directory" in line), line
    kind = stat.S_IFDIR if case == "checkpoint-is-dir" else stat.S_IFIFO
    assert stat.S_IFMT(os.lstat(tmp_path / target).st_mode) == kind


@pytest.mark.parametrize("case", ["same-file", "report-is-its-plot", "plot-is-model",
                                  "model-is-checkpoint", "inside-model"])
def test_colliding_outputs_refused(case, capsys, tmp_path):
    t = str(tmp_path)
    (tmp_path / "keep.pt").write_bytes(b"precious")
    argv = {
        "same-file": ["--report", f"{t}/keep.pt", "--save-model", f"{t}/keep.pt"],
        "report-is-its-plot": ["--report", f"{t}/keep.png"],
        "plot-is-model": ["--report", f"{t}/keep.json", "--save-model", f"{t}/sub/../keep.png"],
        "model-is-checkpoint": ["--save-model", f"{t}/ck/runtime.pt", "--checkpoint-dir",
                                f"{t}/ck"],
        "inside-model": ["--save-model", f"{t}/m", "--report", f"{t}/m/r.json"],
    }[case]
    if case == "plot-is-model":
        (tmp_path / "sub").mkdir()
    line = _refused(argv, capsys, tmp_path)
    assert "give each output its own path" in line, line
    assert (tmp_path / "keep.pt").read_bytes() == b"precious"


def _inputs(tmp_path: Path) -> None:
    """An ``ondisk:`` directory ``D``, an OGB directory ``O`` and a Planetoid root ``P``, each
    with files whose bytes the tests compare (outputs are refused before anything is loaded)."""
    for name in ("D/manifest.json", "D/features.npy", "O/raw/edge.csv.gz", "P/ind.cora.graph",
                 "P/ind.cora.x", "P/ind.cora.test.index"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"input " + name.encode())
    (tmp_path / "link.png").symlink_to(tmp_path / "D" / "features.npy")


@pytest.mark.parametrize("case", [
    "model-is-ondisk-features", "report-is-ondisk-manifest", "dotdot-model", "relative-dataset",
    "plot-links-into-dataset", "checkpoint-dir-inside", "checkpoint-dir-is-dataset",
    "report-is-planetoid-file", "model-is-planetoid-file", "inside-ogb-dir"])
def test_an_output_that_would_overwrite_an_input_is_refused(case, capsys, tmp_path, monkeypatch):
    """Issue 29: ``--dataset ondisk:D --save-model D/features.npy`` (and the other cases) exited
    0 and replaced the dataset's own files; now one line names the flag, the output and the
    input, exit 2 before Ray, and every input file keeps its bytes."""
    _inputs(tmp_path)
    monkeypatch.chdir(tmp_path)
    t = str(tmp_path)
    dataset, argv, flag = {
        "model-is-ondisk-features": (f"ondisk:{t}/D", ["--save-model", f"{t}/D/features.npy"],
                                     "--save-model"),
        "report-is-ondisk-manifest": (f"ondisk:{t}/D", ["--report", f"{t}/D/manifest.json"],
                                      "--report"),
        "dotdot-model": ("ondisk:D", ["--save-model", "./D/../D/features.npy"], "--save-model"),
        "relative-dataset": ("ondisk:D", ["--data-root", t, "--report", f"{t}/D/new.json"],
                             "--report"),
        "plot-links-into-dataset": (f"ondisk:{t}/D", ["--report", f"{t}/link.json"], "--report"),
        "checkpoint-dir-inside": (f"ondisk:{t}/D", ["--checkpoint-dir", f"{t}/D/ck"],
                                  "--checkpoint-dir"),
        "checkpoint-dir-is-dataset": (f"ondisk:{t}/D", ["--checkpoint-dir", f"{t}/D"],
                                      "--checkpoint-dir"),
        "report-is-planetoid-file": ("cora", ["--data-root", f"{t}/P", "--report",
                                              f"{t}/P/ind.cora.graph"], "--report"),
        "model-is-planetoid-file": ("cora", ["--data-root", "P", "--save-model",
                                             "P/ind.cora.test.index"], "--save-model"),
        "inside-ogb-dir": (f"ogb:{t}/O", ["--save-model", f"{t}/O/raw/edge.csv.gz"],
                           "--save-model"),
    }[case]
    line = _refused(argv, capsys, tmp_path, dataset=dataset)
    assert line.startswith("launch.py: error: argument " + flag), line
    assert "write outputs outside the dataset" in line, line
    input_named = {"report-is-planetoid-file": "ind.cora.graph",
                   "model-is-planetoid-file": "ind.cora.test.index",
                   "inside-ogb-dir": f"{t}/O"}.get(case, f"{t}/D")
    assert input_named in line, line
    assert not (tmp_path / "D" / "ck").exists()


def test_outputs_beside_a_planetoid_root_are_not_inputs(tmp_path):
    """Only the ``ind.<name>.*`` files of a Planetoid root are its inputs: a report beside them
    passes, while an ``ondisk:`` directory is an input as a whole."""
    from fgnn.data.spec import input_paths
    from fgnn.outputs import check_inputs, output_paths

    _inputs(tmp_path)
    err = lambda field, value, why: ValueError(f"{field}: {why}")  # noqa: E731
    outs = output_paths(str(tmp_path / "P" / "run.json"), str(tmp_path / "P" / "m.pt"),
                        str(tmp_path / "P" / "ck"))
    check_inputs(outs, input_paths("cora", tmp_path / "P"), err)   # no error
    assert (tmp_path / "P" / "ind.cora.graph").resolve() in input_paths("cora", tmp_path / "P")
    assert input_paths("rmat:scale=6", tmp_path) == []
    with pytest.raises(ValueError, match="inside the dataset directory"):
        check_inputs(outs, input_paths(f"ondisk:{tmp_path / 'P'}"), err)


def test_unwritable_directory_refused_up_front(capsys, tmp_path):
    """/proc passes os.access as root, but no file can be created there: refused before Ray."""
    line = _refused(["--report", "/proc/x.json"], capsys, tmp_path)
    assert "--report" in line and "/proc" in line and "writable" in line


@pytest.mark.parametrize("value", [".", "./", "..", "/", "newdir/", "{t}/", "{t}/sub/"])
@pytest.mark.parametrize("flag", ["--report", "--save-model"])
def test_an_output_that_names_a_directory_is_refused(flag, value, capsys, tmp_path, monkeypatch):
    """``--report ./`` ended in ``ValueError: PosixPath('.') has an empty name`` (status 1) and
    ``--save-model newdir/`` wrote a file named ``newdir``: each names a directory."""
    monkeypatch.chdir(tmp_path)
    line = _refused([flag, value.format(t=tmp_path)], capsys, tmp_path)
    assert line.startswith("launch.py: error: argument " + flag), line
    assert "names a directory, not a file" in line, line
    assert not (tmp_path / "newdir").exists()


def test_checkpoint_dir_that_is_a_file_refused(capsys, tmp_path):
    f = tmp_path / "ck"
    f.write_text("not a directory")
    line = _refused(["--checkpoint-dir", str(f)], capsys, tmp_path)
    assert "--checkpoint-dir" in line and "not a directory" in line


@pytest.mark.parametrize("kind", ["fifo", "dir", "symlink-to-fifo"])
def test_atomic_write_never_replaces_a_non_regular_file(kind, tmp_path):
    target = tmp_path / "out.json"
    if kind == "fifo":
        _fifo(target)
    elif kind == "dir":
        target.mkdir()
    else:
        _fifo(tmp_path / "pipe")
        target.symlink_to(tmp_path / "pipe")
    before = _snapshot(tmp_path)
    with pytest.raises(WriteError, match="out.json") as info:
        with atomic_open(target, "w") as f:
            f.write("{}")
    assert len(str(info.value).splitlines()) == 1
    assert _snapshot(tmp_path) == before


# ---------------------------------------------------------------------- late write failures
def _result() -> RunResult:
    eps = [EpochStats(epoch=0, time_s=1.0, sample=SampleTimes(0.3, 0.05, 0.05), extract_s=0.2,
                      train_s=0.5, hit_rate=0.8, bytes_host_to_device=1 << 20, switches=0,
                      batches=4, loss=1.0, samplers=1, trainers=1, val_acc=0.5, eval_s=0.25)]
    return RunResult(config=JobConfig(runtime=RuntimeConfig(devices=2)).to_dict(),
                     mode="factored",
                     allocation={"devices": 2, "devices_requested": 2, "samplers": 1,
                                 "trainers": 1, "K": 1.0, "device_kind": "logical",
                                 "cache_policy": "presc"},
                     preprocess={"load_s": 0.1, "hotness_s": 0.2, "startup_s": 3.5,
                                 "cache_fill_s": 0.05},
                     epochs=eps, final={"train_acc": 0.9, "val_acc": 0.7, "test_acc": 0.69},
                     final_eval_s=0.75)


class _FakeRuntime:
    """Stands in for the Ray runtime; ``during`` runs while "training"."""

    def __init__(self, during) -> None:
        self.model = torch.nn.Linear(4, 2)
        self.best = {"epoch": 0, "val_acc": 0.5}
        self.identity = {"model": {"name": None, "class": "torch.nn.Linear"}}
        self.during = during
        self.in_process = False  # the test stubs Job._init_ray: the Ray path
        # what the job reads of a runtime's settled config: the batch and its tasks per step
        self.config = types.SimpleNamespace(train=types.SimpleNamespace(batch_size=8))
        self.step_tasks = 1

    def num_items(self, split: str) -> int:
        return 8

    def run(self) -> RunResult:
        self.during()
        return _result()


def test_late_write_failure_keeps_the_other_outputs(monkeypatch, capsys, tmp_path):
    """The report path turns into a FIFO while the job runs: the model and the plot are still
    written, the FIFO is untouched, and one line says what failed and what was kept."""
    from fgnn.job import Job

    report, model = tmp_path / "r.json", tmp_path / "m.pt"
    monkeypatch.setattr(Job, "_runtime", lambda self, *a: _FakeRuntime(lambda: _fifo(report)))
    monkeypatch.setattr(Job, "_init_ray", lambda self: False)
    rc = main(["--dataset", TINY, "--epochs", "1", "--no-progress", "--report", str(report),
               "--save-model", str(model)])
    assert rc == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert f"could not write --report {report}" in err[0], err[0]
    assert f"kept: model {model}, plot {report.with_suffix('.png')}" in err[0], err[0]
    assert stat.S_ISFIFO(os.lstat(report).st_mode)
    assert model.stat().st_size > 0 and report.with_suffix(".png").stat().st_size > 0
