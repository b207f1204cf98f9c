"""The raylet killed under a running job (issue 19): the CLI ends with status 1, no Python
traceback (c58204e printed a 77-line one), and the last finished epoch's checkpoint kept.

Usually the last line is fgnn's ``error:`` line naming what died and the checkpoint. In a race
seen about one run in three here, Ray's core worker ends the driver process itself (status 1)
after its raylet report, before fgnn can print: then stderr holds only Ray's line. That gap is
open (docs/cli.md); the test asserts what holds in both cases."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("ray")

from conftest import descendants  # noqa: E402
from fgnn.checkpoint import read_checkpoint  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def _raylet(root: int) -> int | None:
    for pid in descendants(root):
        try:
            exe = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")[0]
        except OSError:
            continue
        if exe.endswith(b"/raylet"):
            return pid
    return None


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_killed_raylet_ends_without_a_traceback_and_keeps_the_checkpoint(tmp_path):
    cmd = [sys.executable, str(REPO / "launch.py"), "--dataset",
           "rmat:scale=9,edge_factor=8,feat_dim=16,num_classes=4,train_frac=0.5,seed=0",
           "--model", "sage", "--hidden", "16", "--fanouts", "4,4", "--batch-size", "16",
           "--epochs", "500", "--devices", "2", "--no-progress", "--dashboard-host", "off",
           "--stall-timeout", "60", "--checkpoint-dir", str(tmp_path)]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (tmp_path / "runtime.pt").exists():
            time.sleep(0.5)  # the first epoch's checkpoint: training is under way
        assert (tmp_path / "runtime.pt").exists(), "no epoch finished in 120 s"
        pid = _raylet(proc.pid)
        assert pid is not None, "no raylet among the job's processes"
        os.kill(pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, (out[-2000:], err[-3000:])
    assert "Traceback" not in err, err[-3000:]
    finished = read_checkpoint(tmp_path / "runtime.pt")["extra"]["runtime"]["finished_epoch"]
    assert finished >= 0
    lines = [ln for ln in err.strip().splitlines() if ln.startswith("launch.py: error: ")]
    print(f"finished epoch {finished}; fgnn's line: {lines or '(none: Ray ended the driver)'}")
    assert len(lines) <= 1
    if lines:
        assert lines == err.strip().splitlines()[-1:] and "died" in lines[0], err[-3000:]
        assert str(tmp_path / "runtime.pt") in lines[0], lines[0]
