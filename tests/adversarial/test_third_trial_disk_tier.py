"""The third hostile trial (issue 40), an on-disk dataset in a memory group too small for it:
1 GiB of features in a 1 GiB group was killed silently with ``--feature-tier disk`` and with
``--device-memory 0.2``. The memory plan now holds every host byte of the disk tier too: its
constant CPU buffer (``--cpu-buffer``, a share of the rows each Trainer keeps in host memory)
was not counted, so a plan that "fitted" filled the buffer and the kernel killed the job
(measured: scale 20, 256 features, ``--device-memory 0.1 --cpu-buffer 0.9`` in a 1 GiB group,
exit 137 and no line). It is refused before any work in one line naming ``--cpu-buffer``, and
the same job with a buffer the group holds trains.

The plan is checked on a small built dataset against a stated limit, and once end to end inside
a real cgroup v1 group (root and the v1 memory controller; skipped elsewhere), the data and the
group scaled down: 640 MiB of features in a 768 MiB group.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

import fgnn.memory_plan as mp
from fgnn.config import (CacheConfig, DiskConfig, JobConfig, ModelConfig, RuntimeConfig,
                         SamplerConfig, TrainConfig)
from fgnn.data.memory import MemoryLimit
from fgnn.data.ondisk import load_ondisk
from fgnn.data.outofcore import GraphRecipe, build

REPO = Path(__file__).resolve().parents[2]
GIB, MIB = 1 << 30, 1 << 20
BUFFER = "CPU buffer (disk tier, each Trainer)"


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    path = tmp_path_factory.mktemp("disk_tier") / "g"
    return build(GraphRecipe("g", 20000, 100000, feat_dim=64, num_classes=4), path,
                 progress=False).path


def _config(path, tier: str = "disk", buffer: float = 0.5, devices: int = 1) -> JobConfig:
    return JobConfig(dataset=f"ondisk:{path}", model=ModelConfig(name="sage", hidden=32),
                     sampler=SamplerConfig(fanouts=(5, 5)),
                     train=TrainConfig(epochs=1, batch_size=64, eval_batch_size=64),
                     cache=CacheConfig(device_memory_gib=0.0001),
                     disk=DiskConfig(feature_tier=tier, cpu_buffer=buffer),
                     runtime=RuntimeConfig(devices=devices))


def test_the_plan_counts_each_trainers_cpu_buffer(small):
    ds = load_ondisk(small)
    roomy = MemoryLimit(64 * GIB, "a test's group", 64 * GIB)
    rows = int(0.5 * ds.num_nodes)
    for devices in (1, 4):
        plan = mp.plan_job(_config(small, devices=devices), ds, limit=roomy, logical=True)
        term = {t.name: t for t in plan.terms}[BUFFER]
        holders = plan.layout["trainers"] + plan.layout.get("standbys", 0)
        assert (term.each, term.count) == (rows * ds.feature_row_bytes, holders)
        assert term.field == "disk.cpu_buffer" and term.flag == "lower --cpu-buffer (0.5)"
    # the memory tier has no CPU buffer, whatever --cpu-buffer says; nor a buffer of 0
    for config in (_config(small, tier="memory"), _config(small, buffer=0.0)):
        plan = mp.plan_job(config, ds, limit=roomy, logical=True)
        assert BUFFER not in {t.name for t in plan.terms}


def test_a_buffer_the_group_cannot_hold_is_refused_in_one_line(small, monkeypatch, cli_error):
    from fgnn.job import Job

    monkeypatch.setattr(Job, "_init_ray", lambda self: pytest.fail("Ray would start"))
    ds = load_ondisk(small)
    monkeypatch.setattr(mp, "PROCESS_BYTES", 1 << 16)     # a small graph: the buffer is the
    without = mp.plan_job(_config(small, buffer=0.0), ds,  # largest term, as on a large one
                          limit=MemoryLimit(64 * GIB, "x"), logical=True).total
    buffer = int(0.9 * ds.num_nodes) * ds.feature_row_bytes
    group = MemoryLimit(without + buffer // 2, "a test's cgroup", without + buffer // 2)
    monkeypatch.setattr(mp, "host_memory_limit", lambda: group)
    line = cli_error(["--dataset", f"ondisk:{small}", "--feature-tier", "disk",
                      "--cpu-buffer", "0.9", "--device-memory", "0.0001", "--batch-size", "64",
                      "--eval-batch-size", "64", "--fanouts", "5,5", "--epochs", "1",
                      "--model", "sage", "--hidden", "32"])
    assert line.startswith("launch.py: error: argument --cpu-buffer: the memory plan needs"), line
    assert f"the largest term is {BUFFER}" in line and "lower --cpu-buffer (0.9)" in line


# ---------------------------------------------------------------------- a real group
@pytest.fixture
def group():
    """A cgroup v1 memory group of 768 MiB, removed after the test."""
    if os.geteuid() != 0 or not os.path.isdir("/sys/fs/cgroup/memory"):
        pytest.skip("needs root and the cgroup v1 memory controller")
    path = Path("/sys/fs/cgroup/memory") / f"fgnn-test-disk-{uuid.uuid4().hex[:8]}"
    try:
        path.mkdir()
        (path / "memory.limit_in_bytes").write_text(str(768 * MIB))
    except OSError as e:
        pytest.skip(f"cannot make a memory group: {e}")
    yield path
    for _ in range(50):
        try:
            path.rmdir()
            break
        except OSError:
            time.sleep(0.1)


def _in_group(group: Path, argv: list[str]) -> subprocess.CompletedProcess:
    enter = f'echo $$ > {group}/cgroup.procs && exec "$@"'
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(["sh", "-c", enter, "sh", sys.executable, str(REPO / "launch.py"),
                           *argv], capture_output=True, text=True, timeout=400, env=env,
                          cwd=str(REPO))


def _oom_kills(group: Path) -> int:
    text = (group / "memory.oom_control").read_text()
    return int(text.split("oom_kill ")[1].split()[0]) if "oom_kill " in text else 0


@pytest.mark.timeout(600)
def test_in_a_real_group_the_job_is_refused_or_trains(tmp_path, group):
    # 131072 rows of 1280 float32 (640 MiB) in 768 MiB: a 90% buffer and the process do not fit
    data = build(GraphRecipe("g", 1 << 17, 1 << 19, feat_dim=1280, num_classes=4,
                             train_frac=0.01, val_frac=0.005, test_frac=0.005),
                 tmp_path / "g", progress=False).path
    common = ["--dataset", f"ondisk:{data}", "--feature-tier", "disk", "--device-memory",
              "0.01", "--batch-size", "128", "--eval-batch-size", "128", "--fanouts", "5,5",
              "--epochs", "1", "--model", "sage", "--hidden", "32", "--disk-io", "buffered"]
    out = _in_group(group, common + ["--cpu-buffer", "0.9"])
    lines = [line for line in out.stderr.splitlines() if line.startswith("launch.py:")]
    assert out.returncode == 2, (out.returncode, out.stderr[-2000:])
    assert len(lines) == 1 and "argument --cpu-buffer: the memory plan needs" in lines[0], lines
    out = _in_group(group, common + ["--cpu-buffer", "0.05"])
    assert out.returncode == 0, (out.returncode, out.stderr[-2000:])
    assert "fgnn: final train_acc" in out.stdout + out.stderr
    assert _oom_kills(group) == 0


def test_a_refusal_of_a_setting_not_given_does_not_say_none():
    """The plan names the flag of its largest term; when the user gave no value (fgnn chose the
    evaluation chunk) the line said ``Received --eval-batch-size=None.``."""
    from fgnn.cli import flag_for_error
    from fgnn.job import JobConfigError

    why = "the memory plan needs 6.1 GiB, more than the 847.8 MiB this machine can give"
    line = flag_for_error(JobConfigError("train.eval_batch_size", None, why))
    assert line == (f"argument --eval-batch-size: {why}. --eval-batch-size was not given "
                    f"(its default chosen).")
    given = flag_for_error(JobConfigError("train.batch_size", 1024, why))
    assert given.endswith("Received --batch-size=1024.")
