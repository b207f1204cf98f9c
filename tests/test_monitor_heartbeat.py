"""The first minute is never silent for long (issue 39): Ray's start prints a line every few
seconds, and the executor processes' start says how many are up."""

from __future__ import annotations

import threading
import time

import fgnn.runtime.workers as workers_mod
from fgnn.executors import host
from fgnn.runtime.workers import WorkerGroup
from fgnn.monitor.heartbeat import heartbeat


def test_a_long_phase_says_it_is_still_running():
    lines: list[str] = []
    with heartbeat(lines.append, "starting Ray", every=0.05):
        time.sleep(0.28)
    assert len(lines) >= 3, lines
    assert all(line.startswith("fgnn: still starting Ray (") and line.endswith("s)")
               for line in lines)
    count = len(lines)
    time.sleep(0.15)
    assert len(lines) == count  # the beat ends with the block
    assert not any(t.name.startswith("fgnn-heartbeat") for t in threading.enumerate())


def test_a_short_phase_prints_nothing_and_errors_pass_through():
    lines: list[str] = []
    with heartbeat(lines.append, "joining", every=5.0):
        pass
    assert lines == []
    try:
        with heartbeat(lines.append, "joining", every=5.0):
            raise KeyError("boom")
    except KeyError:
        pass
    else:
        raise AssertionError("the block's error was swallowed")
    assert lines == []


def test_the_executors_start_says_how_many_are_up(monkeypatch):
    """Three executors up after 1, 1 and 3 waits: a line after each wait, the last 3/3."""
    arrivals = {"a": 1, "b": 1, "c": 3}
    waits = {"n": 0}
    timeouts: list[float] = []

    def fake_wait(refs, num_returns=1, timeout=None):
        waits["n"] += 1
        timeouts.append(timeout)
        ready = [r for r in refs if arrivals[r] <= waits["n"]]
        return ready, [r for r in refs if r not in ready]

    monkeypatch.setattr(host, "wait", fake_wait)
    monkeypatch.setattr(host, "get", lambda refs, timeout=None: [(1.0, f"cpu:{r}")
                                                                 for r in refs])
    monkeypatch.setattr(workers_mod, "READY_PROGRESS_S", 0.01)
    group = object.__new__(WorkerGroup)
    group._started_at = time.time() - 0.5   # build() started the processes half a second ago
    lines: list[str] = []
    group.say = lines.append
    done = group._gather_ready(["a", "b", "c"])
    assert sorted(d for _, d in done) == ["cpu:a", "cpu:b", "cpu:c"]
    assert timeouts[0] == 0.05   # the beat counts from build(): already past 0.01 s
    assert all(float(line.split("(")[1].rstrip("s)")) >= 0.5 for line in lines)
    assert [line.split(" (")[0] for line in lines] == [
        "executors ready: 2/3", "executors ready: 2/3", "executors ready: 3/3"]
    lines.clear()
    assert group._gather_ready(["a"]) == [(1.0, "cpu:a")] and lines == []  # one: no lines
