"""The third hostile trial (issue 40), shared-memory segments on the exits that run no teardown:
after a ``kill -9`` of the raylet the Trainers' ``/dev/shm/fgnn-peer-<pid>-*`` segments (up to
a cache each) stayed until another fgnn job swept them. The CLI ends the process from the
raylet watcher's thread (``os._exit``: no runtime teardown, no ``atexit``), so the job now
removes the segments it knows before that line; and the watcher of a driver killed with
``SIGKILL`` (:mod:`fgnn.reaper`) removes those of the processes it kills, as it did the rings.

The paths with a teardown (a normal end, a failure, SIGINT/SIGTERM: ``Runtime.run``'s
``finally`` calls ``_teardown``, which releases them) are covered by
tests/test_cache_peer_share.py and tests/adversarial/test_third_trial_raystart_signal.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from fgnn import raylet_watch as rw
from fgnn import reaper
from fgnn.cache import peer_share as ps
from fgnn.runtime.cache_plan import CachePlanner
from fgnn.runtime.faults import RuntimeFailure
from fgnn.job import Job

pytestmark = pytest.mark.skipif(ps.shm_dir() is None, reason="no writable /dev/shm here")

WAIT_S = 20.0


def _sleeper(code: str = "import time; time.sleep(60)") -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code])


def test_a_raylet_death_removes_the_trainers_segments_before_the_line(monkeypatch):
    import torch

    buf = ps.shared_empty((64, 8), torch.float32)
    handle = ps.export_buffer(buf)
    path = Path(ps.shm_dir()) / handle.name
    assert path.exists()
    caches = SimpleNamespace(peer_exports={3: {"handle": handle}})
    caches.release_peers = lambda: CachePlanner.release_peers(caches)
    runtime = SimpleNamespace(caches=caches, watchdog=SimpleNamespace(
        failure=lambda text: RuntimeFailure(text, None)))
    raylet = _sleeper()
    monkeypatch.setattr(rw, "local_raylet_pid", lambda: raylet.pid)
    job = Job(progress=False)
    seen: list[bool] = []
    done = threading.Event()
    # the CLI's on_node_death prints the line and ends the process: the segment is gone by then
    job.on_node_death = lambda failure: (seen.append(path.exists()), done.set())
    watch = job._watch_raylet(runtime)
    try:
        raylet.send_signal(signal.SIGKILL)
        assert done.wait(WAIT_S), "the raylet's death was not seen"
    finally:
        raylet.kill()
        raylet.wait()
        watch.stop()
        ps.release(buf)
    assert seen == [False], "the segment was still there when the job said its line"


def test_the_reaper_removes_the_segments_of_the_processes_it_kills(tmp_path):
    # a "Trainer" of the dead driver's node with a segment in its name, one of a live process
    # that is none of the job's, and one of a process long gone
    trainer = _sleeper()
    try:
        mine = tmp_path / f"{reaper.PEER_STEM}-{trainer.pid}-abc"
        other = tmp_path / f"{reaper.PEER_STEM}-{os.getpid()}-def"
        stale = tmp_path / f"{reaper.PEER_STEM}-999999999-0"
        for f in (mine, other, stale):
            f.write_bytes(b"x" * 4096)
        start = rw._start_time(trainer.pid)
        reaper.reap({"pids": {str(trainer.pid): start}, "rings": "",
                     "shm_dir": str(tmp_path)})
        assert trainer.wait(WAIT_S) == -signal.SIGKILL
    finally:
        trainer.kill()
        trainer.wait()
    assert not mine.exists() and not stale.exists()
    assert other.exists()  # a live process's buffer is none of the reaper's business


def test_the_peer_stem_is_the_segments_own():
    assert reaper.PEER_STEM == ps.SEGMENT_STEM
