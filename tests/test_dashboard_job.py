"""Whole ``launch.py`` runs: a dashboard that cannot start, and the demo's quiet output.

Both run the real CLI in a subprocess with stdout and stderr on pipes, as ``make demo > log``
would, and read what a user would read.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow

# A Ray log line: Python's "... WARNING file.py:12 -- ..." or C++'s "[date time E pid tid] ...".
_RAY_NOISE = re.compile(r"\b(WARNING|ERROR)\b|^\[\S+ \S+ [EWF] \d+ \d+\]", re.M)


def _demo_flags() -> list[str]:
    text = (REPO / "Makefile").read_text()
    return shlex.split(re.search(r"^DEMO_FLAGS \?= (.+)$", text, re.M).group(1))


def _launch(tmp_path: Path, flags: list[str], **env: str) -> subprocess.CompletedProcess:
    run_env = {**os.environ, "PYTHONPATH": str(REPO), **env}
    run_env.pop("RAY_AUTH_MODE", None)  # a fresh user's environment: Ray's default mode
    return subprocess.run([sys.executable, str(REPO / "launch.py"), *flags,
                           "--report", str(tmp_path / "runs" / "report.json")],
                          cwd=tmp_path, env=run_env, capture_output=True, text=True, timeout=900)


def _ray_noise(text: str) -> list[str]:
    return [ln for ln in text.replace("\r", "\n").splitlines() if _RAY_NOISE.search(ln)]


def test_job_trains_on_when_the_dashboard_does_not_start(tmp_path):
    # The failure of the issue: under load the dashboard does not come up within Ray's startup
    # timeout, and ray.init(include_dashboard=True) raises. A 1 s timeout makes that certain.
    run = _launch(tmp_path, ["--model", "sage", "--devices", "2", "--batch-size", "256",
                             "--epochs", "2"], RAY_DASHBOARD_STARTUP_TIMEOUT_S="1")
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.splitlines()
    warn = [ln for ln in lines if "dashboard did not start" in ln]
    assert len(warn) == 1 and warn[0].startswith("fgnn: warning: Ray's dashboard did not start")
    assert "fgnn: Ray dashboard off" in lines
    assert any(ln.startswith("fgnn: final train_acc") for ln in lines)
    assert (tmp_path / "runs" / "report.json").is_file()
    assert "Traceback" not in run.stderr and not _ray_noise(run.stdout + run.stderr)


def test_demo_output_is_short_and_free_of_ray_warnings(tmp_path):
    run = _launch(tmp_path, _demo_flags())
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.splitlines()
    assert len(lines) < 40, run.stdout
    assert any(ln.startswith("fgnn: Ray dashboard at http") for ln in lines)
    assert not _ray_noise(run.stdout), _ray_noise(run.stdout)
    assert not _ray_noise(run.stderr), _ray_noise(run.stderr)  # nor on the terminal
    # docs/quickstart.md says what the demo reaches; the figure must be what it reaches.
    import json
    claim = re.findall(r"≈(0\.\d+) test", (REPO / "docs" / "quickstart.md").read_text())[0]
    report = json.loads((tmp_path / "runs" / "report.json").read_text())
    assert abs(report["final"]["test_acc"] - float(claim)) <= 0.05, (report["final"], claim)
