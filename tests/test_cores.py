"""A layout the machine can run (issue 39): more logical devices than the CPU cores can start
(4 per core) are refused in one line naming the cores, before Ray starts, exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import fgnn.cores
from fgnn.cores import MAX_DEVICES_PER_CORE, check_device_cores, usable_cores
from fgnn.job import Job

REPO = Path(__file__).resolve().parents[1]


def test_the_bound_is_four_devices_a_core():
    assert check_device_cores(8, cores=2) is None
    why = check_device_cores(9, cores=2)
    assert "2 CPU cores" in why and "at most 8" in why and "--devices" in why
    assert "1 CPU core " in check_device_cores(5, cores=1)
    assert 1 <= usable_cores() <= (os.cpu_count() or 1)
    assert MAX_DEVICES_PER_CORE == 4


def test_launch_refuses_too_many_devices_before_ray(cli_error, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(fgnn.cores, "usable_cores", lambda: 2)
    monkeypatch.setattr(Job, "_init_ray", lambda self: pytest.fail("Ray would start"))
    line = cli_error(["--devices", "9"])
    assert line.startswith("launch.py: error: argument --devices: 9 logical devices are more "
                           "than this machine's 2 CPU cores can start")
    assert "Received --devices=9." in line


def test_a_fitting_layout_passes_the_check(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(fgnn.cores, "usable_cores", lambda: 2)
    from fgnn.config import JobConfig, RuntimeConfig
    Job(JobConfig(runtime=RuntimeConfig(devices=8))).validate()
    Job(JobConfig(runtime=RuntimeConfig(mode="single", devices=64))).validate()  # one device


@pytest.mark.skipif(torch.cuda.is_available(), reason="GPUs bound the layout themselves")
def test_the_refusal_comes_as_a_process_exits(tmp_path):
    devices = MAX_DEVICES_PER_CORE * usable_cores() + 1
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, str(REPO / "launch.py"), "--devices", str(devices)],
                       capture_output=True, text=True, cwd=tmp_path, timeout=120)
    took = time.perf_counter() - t0
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "CPU core" in p.stderr and not p.stdout.strip()
    print(f"\nrefused in {took:.1f}s (load {os.getloadavg()[0]:.1f})")


def test_the_cli_refuses_before_importing_torch(tmp_path):
    """launch.py checks the layout against the cores before it imports torch (seconds under a
    load of 20), on a machine without a GPU device file; the line and exit status as above."""
    if fgnn.cores.gpu_may_be_present():
        pytest.skip("a GPU may be present: the check waits for torch to say")
    devices = MAX_DEVICES_PER_CORE * usable_cores() + 1
    code = ("import sys, runpy\n"
            f"sys.argv = ['launch.py', '--devices', '{devices}', '--epochs', '1']\n"
            "try:\n    runpy.run_path(%r, run_name='__main__')\n"
            "except SystemExit as e:\n    print('EXIT', e.code, 'torch' in sys.modules)\n"
            % str(REPO / "launch.py"))
    env = {**os.environ, "PYTHONPATH": str(REPO)}  # this checkout's fgnn, from tmp_path
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=tmp_path, timeout=120, env=env)
    assert p.stdout.strip() == "EXIT 2 False", (p.stdout, p.stderr)
    assert p.stderr.startswith(f"launch.py: error: argument --devices: {devices} logical "
                               "devices are more than this machine's"), p.stderr
    assert p.stderr.strip().endswith(f"Received --devices={devices}.")


def test_the_early_check_leaves_clusters_and_gpus_to_the_job(monkeypatch):
    from fgnn.config import RuntimeConfig
    monkeypatch.setattr(fgnn.cores, "usable_cores", lambda: 2)
    monkeypatch.setattr(fgnn.cores.glob, "glob", lambda pattern: [])
    many = RuntimeConfig(devices=9)
    assert "2 CPU cores" in fgnn.cores.layout_refusal(many)
    assert fgnn.cores.layout_refusal(RuntimeConfig(devices=8)) is None
    assert fgnn.cores.layout_refusal(RuntimeConfig(devices=9, address="10.0.0.1:6379")) is None
    monkeypatch.setattr(fgnn.cores.glob, "glob",
                        lambda pattern: ["/dev/nvidia0"] if "nvidia" in pattern else [])
    assert fgnn.cores.gpu_may_be_present()
    assert fgnn.cores.layout_refusal(many) is None           # torch will say, in Job.validate
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")            # every GPU hidden
    assert not fgnn.cores.gpu_may_be_present()
    assert "2 CPU cores" in fgnn.cores.layout_refusal(many)
