"""How runtime faults reach the command line (issue 19), without Ray.

A death or hang ends in one line naming it and the checkpoint, exit 1, the traceback only with
``--debug`` (it was an 86-line traceback for a killed parameter server); ``--resume`` of a
finished run prints its result in one line, exit 0 (it was ``ReportError: epochs must be a
non-empty list`` after a Ray start); a dead service is named in the line.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

ray = pytest.importorskip("ray")

from fgnn.checkpoint import save_checkpoint  # noqa: E402
from fgnn.cli import build_parser, config_from_args, main  # noqa: E402
from fgnn.data import load_dataset  # noqa: E402
from fgnn.runtime.driver import CHECKPOINT_NAME, Runtime, RuntimeFailure  # noqa: E402

TINY = "rmat:scale=7,edge_factor=4,feat_dim=8,num_classes=3,train_frac=0.4,seed=0"
EPOCHS = 3


@pytest.fixture
def no_ray(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("Ray was started")

    monkeypatch.setattr(ray, "init", refuse)


def _checkpoint(directory: Path, finished_epoch: int, best=(0.625, 1)) -> Path:
    """The checkpoint a Runtime writes after ``finished_epoch``, made without Ray."""
    cfg = config_from_args(build_parser().parse_args(["--model", "sage", "--dataset", TINY]))
    rt = Runtime(cfg, load_dataset(TINY))
    rt.best.update(val_acc=best[0], epoch=best[1], state=rt.model.state_dict())
    path = directory / CHECKPOINT_NAME
    save_checkpoint(path, rt.model, torch.optim.Adam(rt.model.parameters()), finished_epoch,
                    extra=rt.checkpointer.extra(finished_epoch))
    return path


def test_resume_of_a_finished_run_prints_its_result(tmp_path, capsys, no_ray):
    path = _checkpoint(tmp_path, EPOCHS - 1)
    rc = main(["--dataset", TINY, "--model", "sage", "--epochs", str(EPOCHS), "--resume",
               "--checkpoint-dir", str(tmp_path), "--no-progress"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert out.err == ""
    [line] = [ln for ln in out.out.splitlines() if "nothing to resume" in ln]
    assert str(path) in line and f"finished all {EPOCHS} epochs" in line
    assert "best val_acc 0.6250 at epoch 2" in line


def test_resume_of_an_unfinished_run_goes_on_to_ray(tmp_path, capsys, no_ray):
    _checkpoint(tmp_path, EPOCHS - 2)
    rc = main(["--dataset", TINY, "--model", "sage", "--epochs", str(EPOCHS), "--resume",
               "--checkpoint-dir", str(tmp_path), "--no-progress", "--ray"])
    assert rc == 1 and "Ray was started" in capsys.readouterr().err


def _fails_with(monkeypatch, capsys, err: BaseException, *flags: str) -> tuple[int, str]:
    from fgnn.job import Job

    def run(self):
        raise err

    monkeypatch.setattr(Job, "run", run)
    rc = main(["--dataset", TINY, "--no-progress", *flags])
    return rc, capsys.readouterr().err


def _dead_server_error() -> BaseException:
    return ray.exceptions.RayActorError(
        "ab12", "The actor died unexpectedly before finishing this task.\n\tclass_name: "
                "ParameterServer\n\tactor_id: ab12\n\tname: fgnn-ps")


@pytest.mark.parametrize("kind", ["failure", "ray-error"])
def test_a_fault_is_one_line_without_debug(monkeypatch, capsys, kind):
    err = (RuntimeFailure("epoch 3: the parameter server died; resume from the checkpoint "
                          "ck/runtime.pt", Path("ck/runtime.pt"))
           if kind == "failure" else _dead_server_error())
    rc, text = _fails_with(monkeypatch, capsys, err)
    assert rc == 1
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    assert lines[0].startswith("launch.py: error: ") and "Traceback" not in text
    if kind == "failure":
        assert "ck/runtime.pt" in lines[0]


def test_debug_adds_the_traceback(monkeypatch, capsys):
    rc, text = _fails_with(monkeypatch, capsys, _dead_server_error(), "--debug")
    assert rc == 1
    assert "Traceback" in text and text.strip().splitlines()[-1].startswith("launch.py: error:")


class _Handle:
    def __init__(self, actor_id: str, cls: str) -> None:
        self._actor_id = type("Id", (), {"hex": lambda _s: actor_id})()
        self._ray_actor_creation_function_descriptor = type("D", (), {"class_name": cls})()


@pytest.mark.parametrize("who,what", [("ps", "the parameter server (ParameterServer)"),
                                      ("queue", "the global queue (QueueService)")])
def test_a_dead_service_is_named_with_the_checkpoint(tmp_path, who, what):
    cfg = config_from_args(build_parser().parse_args(
        ["--model", "sage", "--dataset", TINY, "--checkpoint-dir", str(tmp_path)]))
    rt = Runtime(cfg, load_dataset(TINY))
    rt.load_resume()
    rt.ps, rt.queue = _Handle("aa", "ParameterServer"), _Handle("bb", "QueueService")
    err = ray.exceptions.RayActorError("aa" if who == "ps" else "bb", "died")
    failure = rt._died(err)
    assert str(failure).startswith(f"{what} died (RayActorError)")
    assert failure.checkpoint == tmp_path / CHECKPOINT_NAME and failure.checkpoint.exists()
    assert str(failure.checkpoint) in str(failure) and "\n" not in str(failure)
