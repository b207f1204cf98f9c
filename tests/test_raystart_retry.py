"""Ray's node start under load (issue 30, item 11): Ray waits a fixed 30 s for a new node's
raylet to register, and on a loaded machine that wait runs out (``The current node timed out
during startup``). A local start is tried once more, saying so; a second timeout is one line.
``ray.init`` is faked: no Ray starts."""

from __future__ import annotations

import os
import types

import pytest

ray = pytest.importorskip("ray")

from fgnn import raystart  # noqa: E402
from fgnn.cli import main  # noqa: E402
from fgnn.job import Job  # noqa: E402

TIMEOUT = ("The current node timed out during startup. This could happen because some of the "
           "raylet failed to startup or the GCS has become overloaded.")


class FakeInit:
    """``ray.init`` that times out ``fails`` times, then returns a context."""

    def __init__(self, fails: int) -> None:
        self.fails, self.calls, self.gcs_wait = fails, [], []

    def __call__(self, **kw):
        self.calls.append(kw)
        self.gcs_wait.append(os.environ.get(raystart.GCS_WAIT_ENV))
        if len(self.calls) <= self.fails:
            raise Exception(TIMEOUT)
        return "context"


@pytest.fixture
def fake(monkeypatch):
    def make(fails: int) -> FakeInit:
        init = FakeInit(fails)
        monkeypatch.setattr(ray, "init", init)
        monkeypatch.setattr(ray, "shutdown", lambda: None)
        monkeypatch.delenv(raystart.GCS_WAIT_ENV, raising=False)
        return init
    return make


def test_a_timed_out_start_is_tried_once_more_and_said(fake):
    init, said = fake(1), []
    assert raystart.init_local(say=said.append, num_cpus=2) == "context"
    assert len(init.calls) == 2 and init.calls[1]["num_cpus"] == 2
    assert len(said) == 1 and said[0].startswith(
        "fgnn: warning: Ray's node did not start in time"), said
    assert said[0].endswith("; starting it once more")
    # the GCS gets longer than Ray's 30 s while the node starts, and the variable is put back
    assert init.gcs_wait == [str(raystart.GCS_PORT_WAIT_S)] * 2
    assert raystart.GCS_WAIT_ENV not in os.environ


def test_a_second_timeout_is_one_line(fake):
    init, said = fake(2), []
    with pytest.raises(raystart.RayStartError) as info:
        raystart.init_local(say=said.append)
    assert len(init.calls) == 2 and len(said) == 1
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith("Ray's local node did not start in time, twice"), msg


def test_other_start_errors_are_not_retried(fake, monkeypatch):
    init = fake(0)

    def broken(**kw):
        init.calls.append(kw)
        raise ValueError("bad argument")

    monkeypatch.setattr(ray, "init", broken)
    with pytest.raises(ValueError, match="bad argument"):
        raystart.init_local(say=print)
    assert len(init.calls) == 1


def test_the_cli_says_the_retry_and_the_second_failure(fake, monkeypatch, capsys):
    fake(2)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(Job, "_prepare_dataset", lambda self: 0.0)
    monkeypatch.setattr(Job, "_runtime", lambda self, progress, from_spec: _FakeRuntime())
    rc = main(["--no-progress", "--dashboard-host", "off", "--devices", "2"])
    out, err = capsys.readouterr()
    assert rc == 1
    assert "fgnn: warning: Ray's node did not start in time" in out, out
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "launch.py: error: RayStartError: Ray's local node did not start in time, twice"), lines


class _FakeRuntime:
    """What the job reads of a runtime before Ray starts: the settled batch, the tasks per
    step, the items to train, and that it runs on Ray."""

    config = types.SimpleNamespace(train=types.SimpleNamespace(batch_size=10))
    step_tasks = 1
    in_process = False

    def num_items(self, split: str) -> int:
        return 100
