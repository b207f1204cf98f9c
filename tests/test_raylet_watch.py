"""The raylet watcher (issue 19): the death of the watched process is reported once, with how it
ended, in both watching modes, and never after ``stop``; the job turns it into its one-line
failure, and the CLI prints only one line when the watcher and the main thread both fail.

A ``sleep`` child stands in for the raylet (the raylet of a node ``ray.init`` starts is a child
of the driver too); tests/adversarial/test_raylet_death.py kills a real one under a job."""

from __future__ import annotations

import os
import signal
import subprocess
import threading

import pytest

from fgnn import cli
from fgnn import raylet_watch as rw
from fgnn.runtime.faults import RuntimeFailure
from fgnn.job import Job

WAIT_S = 20.0  # liveness bound only: the death is seen within milliseconds


def _child(code: str = "import time; time.sleep(60)") -> subprocess.Popen:
    import sys
    return subprocess.Popen([sys.executable, "-c", code])


def _watch(pid: int) -> tuple[rw.RayletWatch, list, threading.Event]:
    seen: list = []
    done = threading.Event()

    def on_death(death: rw.RayletDeath) -> None:
        seen.append(death)
        done.set()

    return rw.RayletWatch(pid, on_death), seen, done


@pytest.fixture(params=["pidfd", "proc"])
def mode(request, monkeypatch):
    if request.param == "proc":  # a kernel without pidfds: the /proc poll
        def no_pidfd(pid: int) -> int:
            raise OSError(38, "Function not implemented")
        monkeypatch.setattr(os, "pidfd_open", no_pidfd, raising=False)
    elif not hasattr(os, "pidfd_open"):
        pytest.skip("no os.pidfd_open here")
    return request.param


def test_a_killed_process_is_reported_once_with_its_signal(mode):
    proc = _child()
    try:
        watch, seen, done = _watch(proc.pid)
        assert watch.mode == mode
        watch.start()
        assert not done.wait(0.5), "reported a death before any"
        proc.send_signal(signal.SIGKILL)
        assert done.wait(WAIT_S), "the death was not reported"
        watch._thread.join(WAIT_S)
    finally:
        proc.kill()
        proc.wait()
    assert len(seen) == 1 and seen[0].pid == proc.pid
    if mode == "pidfd":  # the pidfd says how it ended; the /proc poll cannot
        assert seen[0].signal == signal.SIGKILL and seen[0].status is None
        assert seen[0].describe() == (f"the raylet of this Ray node (pid {proc.pid}) was killed "
                                      f"by SIGKILL")
    else:
        assert seen[0].describe().endswith("ended")


def test_an_exit_status_is_reported_and_the_process_is_not_reaped():
    if not hasattr(os, "pidfd_open"):
        pytest.skip("no os.pidfd_open here")
    proc = _child("import sys; sys.exit(3)")
    watch, seen, done = _watch(proc.pid)
    watch.start()
    assert done.wait(WAIT_S)
    assert seen[0].status == 3 and seen[0].signal is None
    assert proc.wait(WAIT_S) == 3  # WNOWAIT: its parent (Ray, in a job) still reaps it


def test_no_report_after_stop(mode):
    proc = _child()
    watch, seen, done = _watch(proc.pid)
    watch.start()
    watch.stop()  # as before ray.shutdown, which ends the raylet too
    proc.kill()
    proc.wait()
    watch._thread.join(WAIT_S)
    assert not watch._thread.is_alive()
    assert seen == []


def test_no_raylet_of_ours_without_a_local_node():
    assert rw.local_raylet_pid() is None  # Ray not started by this process


class _FakeWatchdog:
    def __init__(self) -> None:
        self.texts: list[str] = []

    def failure(self, text: str) -> RuntimeFailure:
        self.texts.append(text)
        return RuntimeFailure(f"{text}; resume from the checkpoint ck/runtime.pt", None)


class _FakeRuntime:
    def __init__(self) -> None:
        self.watchdog = _FakeWatchdog()


def _watched_job():
    """A job watching the (patched) raylet and GCS, with the failures it was told of and an
    event set at the first."""
    job, runtime = Job(progress=False), _FakeRuntime()
    told: list[Exception] = []
    done = threading.Event()
    job.on_node_death = lambda failure: (told.append(failure), done.set())
    return job, runtime, told, done, job._watch_raylet(runtime)


def test_the_job_turns_the_death_into_its_failure_with_the_checkpoint(monkeypatch):
    proc = _child()
    monkeypatch.setattr(rw, "local_raylet_pid", lambda: proc.pid)
    job, runtime, told, done, watch = _watched_job()
    try:
        proc.send_signal(signal.SIGKILL)
        assert done.wait(WAIT_S)
    finally:
        proc.kill()
        proc.wait()
        watch.stop()
    assert told == [job._node_failure]
    assert isinstance(told[0], RuntimeFailure)
    text = str(told[0])
    assert f"the raylet of this Ray node (pid {proc.pid})" in text
    assert "died with it" in text and "ck/runtime.pt" in text


def test_only_one_failure_line_when_the_watcher_has_the_word(monkeypatch, capsys):
    said = threading.Lock()
    said.acquire()  # the watcher printed and is ending the process
    monkeypatch.setattr(cli, "_WATCHER_EXIT_S", 0.1)
    assert cli._fail_line("launch.py", "the global queue died", False, said) == 1
    assert capsys.readouterr().err == ""
    free = threading.Lock()
    assert cli._fail_line("launch.py", "the global queue died", False, free) == 1
    assert capsys.readouterr().err == "launch.py: error: the global queue died\n"


def test_the_watcher_stays_silent_when_the_main_thread_has_the_word(monkeypatch, capsys):
    said = threading.Lock()
    said.acquire()  # the main thread is printing its own line
    exits: list[int] = []
    monkeypatch.setattr(os, "_exit", exits.append)
    cli._exit_at_once("launch.py", "the raylet died", said)
    assert exits == [] and capsys.readouterr().err == ""
    cli._exit_at_once("launch.py", "the raylet died", threading.Lock())
    assert exits == [1] and capsys.readouterr().err == "launch.py: error: the raylet died\n"


def test_the_processes_the_raylet_started_end_with_it(mode, tmp_path):
    # a "raylet" with one child of its own (an agent), which would outlive it
    pidfile = tmp_path / "agent.pid"
    proc = _child("import subprocess, sys, time; "
                  "a = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
                  f"open({str(pidfile)!r}, 'w').write(str(a.pid)); time.sleep(60)")
    try:
        for _ in range(200):
            if pidfile.exists() and pidfile.read_text():
                break
            threading.Event().wait(0.05)
        agent = int(pidfile.read_text())
        watch, seen, done = _watch(proc.pid)
        watch.start()
        assert list(watch.children) == [agent]
        proc.send_signal(signal.SIGKILL)
        assert done.wait(WAIT_S)
    finally:
        proc.kill()
        proc.wait()
    for _ in range(int(WAIT_S / 0.05)):  # SIGKILL sent; the kernel ends it at once
        if rw._start_time(agent) is None:
            break
        threading.Event().wait(0.05)
    assert rw._start_time(agent) is None  # killed (a zombie of init at most)


def test_a_killed_gcs_is_the_jobs_failure_at_once_and_once(monkeypatch):
    """Issue 40: after ``kill -9`` of ``gcs_server`` the job trained on, hung about 60 s and
    ended with Ray's ``Failed to connect to GCS`` and no fgnn line. The GCS (a child of the
    driver, like the raylet) is watched too: its death is the job's one-line failure with the
    checkpoint, once, even when the raylet dies of it after."""
    gcs, raylet = _child(), _child()
    monkeypatch.setattr(rw, "local_gcs_pid", lambda: gcs.pid)
    monkeypatch.setattr(rw, "local_raylet_pid", lambda: raylet.pid)
    job, runtime, told, done, watch = _watched_job()
    try:
        gcs.send_signal(signal.SIGKILL)
        assert done.wait(WAIT_S), "the GCS's death was not reported"
        raylet.send_signal(signal.SIGKILL)
        raylet.wait()
        threading.Event().wait(0.5)  # the raylet's watch wakes and stays silent
    finally:
        for p in (gcs, raylet):
            p.kill()
            p.wait()
        watch.stop()
    assert len(told) == 1
    text = str(told[0])
    assert f"the GCS of this Ray node (pid {gcs.pid}) was killed by SIGKILL" in text
    assert "ck/runtime.pt" in text
