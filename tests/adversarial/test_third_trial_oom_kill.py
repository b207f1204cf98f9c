"""The third hostile trial (issue 40), an executor the kernel's OOM killer ends: six Trainers
were OOM-killed and restarted inside a 4 GiB group (``rmat:scale=20,feat_dim=128 --devices 4``),
and the only sign was Ray's ``A worker died or was killed ... unexpected system error``; the
run exited 0 with a ledger saying ``lost 0, reissued 0``.

Now the death is named in one fgnn line (the executor, the group's peak and limit, whether Ray
restarts it), read from the cgroup's ``oom_kill`` counter (no ``dmesg``), and the ledger counts
the dead Trainer's leases the queue handed out again. The counter is read from fake cgroup files,
and once from a real cgroup v1 group where the machine allows (root, v1 memory controller).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest

from fgnn.data.oom import OomWatch, oom_kills
from fgnn.runtime.ledger import epoch_ledger, redelivered

REPO = Path(__file__).resolve().parents[2]
GiB = 1 << 30


def _v1(tmp_path: Path, kills: int, limit: int = 4 * GiB, peak: int = 4 * GiB) -> tuple[str, str]:
    group = tmp_path / "memory" / "a3"
    group.mkdir(parents=True, exist_ok=True)
    (group / "memory.limit_in_bytes").write_text(f"{limit}\n")
    (group / "memory.max_usage_in_bytes").write_text(f"{peak}\n")
    (group / "memory.oom_control").write_text(
        f"oom_kill_disable 0\nunder_oom 0\noom_kill {kills}\n")
    (tmp_path / "memory" / "memory.limit_in_bytes").write_text(f"{1 << 63}\n")
    proc = tmp_path / "cgroup"
    proc.write_text("4:memory:/a3\n0::/\n")
    return str(tmp_path), str(proc)


def test_the_watch_reads_v1_and_v2_kill_counters(tmp_path):
    root, proc = _v1(tmp_path / "v1", kills=2)
    assert oom_kills(root, proc) == {str(Path(root) / "memory" / "a3"): 2}

    v2 = tmp_path / "v2"
    (v2 / "job").mkdir(parents=True)
    (v2 / "cgroup.controllers").write_text("memory\n")
    (v2 / "job" / "memory.max").write_text(f"{GiB}\n")
    (v2 / "job" / "memory.peak").write_text(f"{GiB - 4096}\n")
    (v2 / "job" / "memory.events").write_text("low 0\nhigh 0\nmax 9\noom 1\noom_kill 0\n")
    (tmp_path / "cg2").write_text("0::/job\n")
    watch = OomWatch(str(v2), str(tmp_path / "cg2"))
    assert watch.new_kill() is None
    (v2 / "job" / "memory.events").write_text("low 0\nhigh 0\nmax 9\noom 2\noom_kill 1\n")
    kill = watch.new_kill()
    assert kill is not None and (kill.kills, kill.limit, kill.peak) == (1, GiB, GiB - 4096)
    assert watch.new_kill() is None  # taken


def _group(tmp_path: Path, kills_later: int):
    from fgnn.runtime import workers as _workers

    root, proc = _v1(tmp_path, kills=0)
    group = _workers.WorkerGroup.__new__(_workers.WorkerGroup)
    group.oom, group.oom_deaths, said = OomWatch(root, proc), [], []
    group.say = said.append
    _v1(tmp_path, kills=kills_later)
    return group, said


@pytest.mark.parametrize("restarts", [True, False])
def test_an_oom_killed_trainer_is_named_in_one_line(tmp_path, restarts):
    from fgnn.runtime.workers import _Exec

    group, said = _group(tmp_path, kills_later=1)
    group._named_if_oom(_Exec("fgnn-trainer-2", "trainer", 2, None), restarts=restarts)
    assert len(said) == 1, said
    line = said[0]
    assert line.startswith("warning: Trainer 2 was killed by the kernel's OOM killer")
    assert "peaked at 4.0 GiB of its 4.0 GiB limit" in line and "a3" in line
    assert ("Ray restarts it and the run goes on" in line) == restarts
    assert ("stops if no Trainer is left" in line) == (not restarts)
    group._named_if_oom(_Exec("fgnn-sampler-0", "sampler", 0, None), restarts=True)
    assert len(said) == 1  # one kill names one death; a Sampler that died of something else
    assert group.oom_deaths == said


def test_a_death_that_is_no_oom_kill_says_nothing(tmp_path):
    from fgnn.runtime.workers import _Exec

    group, said = _group(tmp_path, kills_later=0)
    group._named_if_oom(_Exec("fgnn-trainer-1", "trainer", 1, None), restarts=True)
    assert said == []


def test_the_failure_of_a_restarting_trainer_names_the_oom_kill(tmp_path):
    """Through :meth:`WorkerGroup.failed` with Ray's error for a restarting actor."""
    ray_exceptions = pytest.importorskip("ray.exceptions")
    from fgnn.runtime.workers import _Exec

    group, said = _group(tmp_path, kills_later=1)
    group.reinstall = lambda execs: []
    group.services = SimpleNamespace(queue=None)
    err = ray_exceptions.ActorUnavailableError("The actor is temporarily unavailable", None)
    assert group.failed(_Exec("fgnn-trainer-3", "trainer", 3, None), err) is True
    assert len(said) == 1 and "Trainer 3 was killed by the kernel's OOM killer" in said[0]


def test_the_ledger_counts_a_dead_trainers_leases_given_again():
    deliveries = {0: 1, 1: 2, 2: 3, 3: 1}  # tasks 1 and 2 leased to a Trainer that died
    assert redelivered(deliveries) == 3
    ledger = epoch_ledger(4, 4, 0, 0 + redelivered(deliveries),
                          {"applied": {t: 1 for t in range(4)}, "attempts": {}, "rejected": {}})
    assert ledger["reissued"] == 3 and ledger["exactly_once"]


# ---------------------------------------------------------------------- a real group
_HUNGRY = textwrap.dedent("""
    import subprocess, sys
    sys.path.insert(0, {repo!r})
    from fgnn.data.oom import OomWatch
    watch = OomWatch()
    child = subprocess.run([sys.executable, "-c",
                            "b = []\\nwhile True: b.append(bytearray(32 << 20))"])
    kill = watch.new_kill()
    print(child.returncode, None if kill is None else kill.describe(), flush=True)
""")


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.isdir("/sys/fs/cgroup/memory"),
                    reason="needs root and the cgroup v1 memory controller")
@pytest.mark.timeout(120)
def test_a_real_oom_kill_in_a_small_group_is_counted(tmp_path):
    group = Path("/sys/fs/cgroup/memory") / f"fgnn-test-oom-{uuid.uuid4().hex[:8]}"
    try:
        group.mkdir()
        (group / "memory.limit_in_bytes").write_text(str(600 << 20))
    except OSError as e:
        pytest.skip(f"cannot make a memory group: {e}")
    try:
        code = _HUNGRY.format(repo=str(REPO))
        enter = f"echo $$ > {group}/cgroup.procs && exec {sys.executable} -c \"$0\""
        out = subprocess.run(["sh", "-c", enter, code], capture_output=True, text=True,
                             timeout=100)
        status, _, described = out.stdout.strip().partition(" ")
        assert status == "-9", out
        assert described.startswith(f"its memory group {group} peaked at"), out
        assert "of its 600.0 MiB limit" in described
    finally:
        for _ in range(50):
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.1)


# ------------------------------------------------- a Ray Trainer the kernel kills, end to end
_JOB_IN_GROUP = textwrap.dedent("""
    import json, sys, time
    sys.path.insert(0, {repo!r})
    import ray
    from fgnn.config import (CacheConfig, JobConfig, ModelConfig, RuntimeConfig, SamplerConfig,
                             TrainConfig)
    from fgnn.data.synthetic import rmat_dataset
    from fgnn.executors.fault_injection import FaultSpec
    from fgnn.runtime.driver import Runtime
    from fgnn.monitor.timeline import Timeline
    from fgnn.raystart import local_system_config

    ray.init(address="local", num_cpus=4, num_gpus=3, include_dashboard=False,
             log_to_driver=False, _system_config=local_system_config())
    ds = rmat_dataset(scale=9, edge_factor=8, feat_dim=16, num_classes=4, train_frac=0.3125,
                      val_frac=0.1, test_frac=0.1, seed=0)
    cfg = JobConfig(model=ModelConfig("sage", hidden=16, dropout=0.0),
                    sampler=SamplerConfig(fanouts=(4, 4)),
                    cache=CacheConfig(policy="degree", cache_ratio=0.25),
                    train=TrainConfig(epochs=1, batch_size=16, lr=0.01, seed=1),
                    runtime=RuntimeConfig(devices=3, samplers=1, switching=False, queue_size=4,
                                          stall_timeout_s=120, exchange="server"))
    said = []
    rt = Runtime(cfg, ds, faults=FaultSpec(oom_after_apply={{0}}), evaluate=False,
                 timeline=Timeline(time.perf_counter(), announce=said.append))
    result = rt.run()
    print("RESULT", json.dumps({{"said": said,
                                "ledger": result.to_dict()["epochs"][0]["ledger"]}}), flush=True)
    ray.shutdown()
""")


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.isdir("/sys/fs/cgroup/memory"),
                    reason="needs root and the cgroup v1 memory controller")
@pytest.mark.timeout(400)
def test_a_ray_trainer_the_kernel_kills_is_named_and_its_task_given_again():
    """The trial's case itself, small: a Ray job inside a 3 GiB group whose Trainer 0 eats
    memory right after a gradient of its was applied (``FaultSpec.oom_after_apply``) until the
    kernel kills it. The run goes on with the restarted Trainer; it says in one line that the
    OOM killer ended that Trainer, and its ledger counts the task given again (not ``lost 0,
    reissued 0`` and nothing said)."""
    group = Path("/sys/fs/cgroup/memory") / f"fgnn-test-oom-ray-{uuid.uuid4().hex[:8]}"
    try:
        group.mkdir()
        (group / "memory.limit_in_bytes").write_text(str(3 * GiB))
    except OSError as e:
        pytest.skip(f"cannot make a memory group: {e}")
    try:
        code = _JOB_IN_GROUP.format(repo=str(REPO))
        enter = f"echo $$ > {group}/cgroup.procs && exec {sys.executable} -c \"$0\""
        out = subprocess.run(["sh", "-c", enter, code], capture_output=True, text=True,
                             timeout=360, cwd=str(REPO))
        assert out.returncode == 0, out.stderr[-3000:]
        kills = int((group / "memory.oom_control").read_text().split("oom_kill ")[1].split()[0])
        assert kills >= 1, "the kernel killed nothing: the fault did not eat the group"
        [result] = [json.loads(line[len("RESULT "):]) for line in out.stdout.splitlines()
                    if line.startswith("RESULT ")]
        named = [s for s in result["said"] if "OOM killer" in s]
        assert len(named) == 1, result["said"]
        assert named[0].startswith("warning: Trainer 1 was killed by the kernel's OOM killer "
                                   f"(its memory group {group} peaked at"), named[0]
        assert "of its 3.0 GiB limit); Ray restarts it and the run goes on" in named[0]
        ledger = result["ledger"]
        assert ledger["reissued"] >= 1 and ledger["lost"] == 0 and ledger["exactly_once"], ledger
        assert ledger["applied"] == ledger["tasks"] and ledger["rejected"] >= 1, ledger
    finally:
        for _ in range(100):
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.1)
