"""Signals and leftovers (issue 30, item 9): SIGTERM stops a job as Ctrl-C does, and nothing of
a job outlives its driver.

Hostile trial: SIGTERM to the driver printed Ray's native ``*** SIGTERM received ... PC: @``
dump and no fgnn line; after ``kill -9`` of the driver (dashboard on, collective exchange),
Ray's DashboardAgent and RuntimeEnvAgent were alive 75 s later and four gradient-ring files
stayed in ``/dev/shm``. The watcher of :mod:`fgnn.reaper` is tested here with a stand-in driver
(no Ray), and once end to end with a real job killed with ``SIGKILL``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import descendants
from fgnn.reaper import RING_STEM, sweep_stale_rings
from fgnn.sigterm import Terminated, interrupt_on_sigterm

REPO = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------------- SIGTERM
def test_sigterm_raises_terminated_and_the_old_handler_comes_back():
    seen = []
    old = signal.signal(signal.SIGTERM, lambda s, f: seen.append(s))  # Ray's, say
    try:
        restore = interrupt_on_sigterm()
        with pytest.raises(Terminated, match="SIGTERM"):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)  # the handler runs between bytecodes
        assert isinstance(Terminated(), KeyboardInterrupt)
        restore()
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.1)
        assert seen == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, old)


def test_a_job_turns_sigterm_into_an_interrupt_after_ray_starts(monkeypatch):
    """Ray's handler (here a stand-in that swallows the signal, as Ray's replaces the default)
    is in place when the job starts training; SIGTERM must still stop the job."""
    from fgnn.job import Job

    class Runtime:
        model = None
        in_process = False  # a Ray job: the one whose handler Ray replaces

        def run(self):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
            return "finished"

    class Progress:
        def close(self):
            pass

    seen = []
    monkeypatch.setattr(Job, "_init_ray", lambda self: False)  # Ray "already up"
    old = signal.signal(signal.SIGTERM, lambda s, f: seen.append(s))
    try:
        from fgnn.monitor.timeline import Timeline
        job = Job()
        job.timeline = Timeline()  # as Job.run starts it
        with pytest.raises(Terminated):
            job._train(Runtime(), Progress())
        os.kill(os.getpid(), signal.SIGTERM)  # the job put Ray's handler back
        time.sleep(0.1)
        assert seen == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, old)


def test_the_cli_says_terminated_with_status_143(monkeypatch, capsys):
    from fgnn.cli import main
    from fgnn.job import Job

    def run(self):
        raise Terminated("received SIGTERM")

    monkeypatch.setattr(Job, "run", run)
    assert main(["--no-progress"]) == 143
    assert capsys.readouterr().err.strip().splitlines() == [
        "launch.py: terminated (SIGTERM); no report written"]


# ---------------------------------------------------------------------- the watcher
_DRIVER = textwrap.dedent("""
    import os, subprocess, sys, time
    sys.path.insert(0, {repo!r})
    from fgnn.reaper import ring_prefix, watch_driver
    child = subprocess.Popen(["sleep", "300"])  # the node's raylet, say
    reaper = watch_driver({{child.pid}}, ring_dir={ring_dir!r})
    # a worker that raylet started after the watcher (Ray marks it with the raylet's pid)
    worker = subprocess.Popen(["sleep", "300"],
                              env={{**os.environ, "RAY_RAYLET_PID": str(child.pid)}})
    open(os.path.join({ring_dir!r}, ring_prefix() + "-fgnn-trainer-1-0"), "w").close()
    print(child.pid, worker.pid, flush=True)
    if sys.argv[1] == "stop":
        reaper.stop()
        sys.exit(0)
    time.sleep(300)
""")


def _start_driver(tmp_path: Path, how: str) -> tuple[subprocess.Popen, list[int]]:
    code = _DRIVER.format(repo=str(REPO), ring_dir=str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-c", code, how], stdout=subprocess.PIPE,
                            text=True)
    return proc, [int(p) for p in proc.stdout.readline().split()]


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="the watcher reads /proc")
def test_a_killed_driver_leaves_no_process_and_no_ring(tmp_path):
    proc, kids = _start_driver(tmp_path, "kill")
    try:
        assert list(tmp_path.glob(f"{RING_STEM}-{proc.pid}-*"))
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not (all(map(_gone, kids)) and not
                                                   list(tmp_path.glob(f"{RING_STEM}-*"))):
            time.sleep(0.1)
        assert _gone(kids[0]), "the driver's node process outlived it"
        assert _gone(kids[1]), "a worker of the node's raylet outlived the driver"
        assert not list(tmp_path.glob(f"{RING_STEM}-*")), "ring files outlived the driver"
    finally:
        for pid in kids:
            if not _gone(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="the watcher reads /proc")
def test_a_driver_that_stops_its_watcher_leaves_things_alone(tmp_path):
    proc, kids = _start_driver(tmp_path, "stop")
    try:
        assert proc.wait(timeout=30) == 0
        time.sleep(0.5)
        assert not any(map(_gone, kids)), "the watcher acted on a normal shutdown"
        assert list(tmp_path.glob(f"{RING_STEM}-{proc.pid}-*"))  # the runtime removes them
    finally:
        for pid in kids:
            os.kill(pid, signal.SIGKILL)


def test_a_new_job_sweeps_the_rings_of_drivers_that_are_gone(tmp_path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = tmp_path / f"{RING_STEM}-{dead.pid}-abc-fgnn-trainer-1-0"
    live = tmp_path / f"{RING_STEM}-{os.getpid()}-abc-fgnn-trainer-1-0"
    other = tmp_path / "fgnn-ring-0123456789ab-fgnn-trainer-1-0"  # an older fgnn's name
    for p in (stale, live, other):
        p.touch()
    assert sweep_stale_rings(str(tmp_path)) == [str(stale)]
    assert not stale.exists() and live.exists() and other.exists()


# ---------------------------------------------------------------------- end to end
@pytest.mark.slow
@pytest.mark.timeout(420)
@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="rings live in /dev/shm")
def test_kill_9_of_a_collective_job_leaves_no_ray_process_and_no_ring(tmp_path):
    pytest.importorskip("ray")
    cmd = [sys.executable, str(REPO / "launch.py"), "--dataset",
           "rmat:scale=9,edge_factor=8,feat_dim=16,num_classes=4,train_frac=0.5,seed=0",
           "--model", "sage", "--hidden", "16", "--fanouts", "4,4", "--batch-size", "16",
           "--epochs", "500", "--devices", "3", "--exchange", "collective", "--no-progress",
           "--stall-timeout", "60", "--checkpoint-dir", str(tmp_path)]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(REPO)})
    rings = f"{RING_STEM}-{proc.pid}-*"
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and len(list(Path("/dev/shm").glob(rings))) < 2:
            time.sleep(0.5)  # the Trainers' rings: the collective is under way
        assert list(Path("/dev/shm").glob(rings)), "the collective made no ring in 240 s"
        time.sleep(2)  # every member's ring
        tree = {pid: _start(pid) for pid in descendants(proc.pid)}
        proc.kill()
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (_left(tree) or list(Path("/dev/shm").glob(rings))):
        time.sleep(0.5)
    left = _left(tree)
    assert left == [], [open(f"/proc/{p}/cmdline").read()[:80] for p in left]
    assert not list(Path("/dev/shm").glob(rings))


def _start(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _left(tree: dict[int, str | None]) -> list[int]:
    return [pid for pid, start in tree.items() if start and not _gone(pid)
            and _start(pid) == start]
