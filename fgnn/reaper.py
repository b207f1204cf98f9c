"""Nothing of a job outlives its driver: a watcher process that ends the local Ray node's
processes and removes the job's shared-memory files when the driver dies without shutting down.

A driver killed with ``SIGKILL`` runs no ``finally`` and no ``atexit``: Ray's raylet and GCS
end with it (Ray starts them with ``PR_SET_PDEATHSIG``), but the raylet's agents
(``DashboardAgent``, ``RuntimeEnvAgent``) were seen alive 75 s later, and the collective
exchange's gradient rings stayed in ``/dev/shm`` (:mod:`fgnn.exchange.gradring`).

:func:`watch_driver`, called once a job has started a local Ray node, starts one watcher
(``subprocess.Popen`` of this module, in a session of its own so a Ctrl-C of the terminal does
not reach it). It is told the node's processes (the GCS, the raylet, the dashboard and their
descendants then, the agents among them; pid and start time, so a reused pid is never hit) and
the pattern of the job's ring files, then blocks reading a pipe whose only writer is the
driver. :meth:`Reaper.stop` (after ``ray.shutdown``) writes ``stop`` and the watcher exits doing
nothing; if the pipe closes without it, the driver died: the watcher kills (``SIGKILL``) what is
left of those processes, their descendants and the processes whose ``RAY_RAYLET_PID`` names one
of them (the raylet's workers, re-parented once it is gone), removes the ring files and the
Trainers' shared cache buffers (``fgnn-peer-<pid>-*``) of the processes it killed or that are
gone, and exits. Ring files
carry the driver's pid in their name (:func:`ring_prefix`), and a job's start removes those of
drivers that are gone (:func:`sweep_stale_rings`) in case a watcher was killed too. Linux only
(``/proc``); elsewhere :func:`watch_driver` returns None.
"""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import uuid
from typing import Optional

__all__ = ["Reaper", "end_processes", "ray_descendants", "ring_prefix", "sweep_peer_segments",
           "sweep_stale_rings", "watch_driver"]

#: Ring files of a job: ``fgnn-ring-<driver pid>-<random>-<member>-<incarnation>``.
RING_STEM = "fgnn-ring"


def ring_prefix(pid: Optional[int] = None) -> str:
    """A new job's ring-file prefix, naming its driver's pid (default: this process)."""
    return f"{RING_STEM}-{os.getpid() if pid is None else int(pid)}-{uuid.uuid4().hex[:12]}"


def _start_time(pid: int) -> Optional[str]:
    """Start time of live (not zombie) process ``pid`` from ``/proc``; None if there is none."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else fields[19]


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process (empty without ``/proc``)."""
    out = {}
    for path in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(path) as f:
                out[int(path.split("/")[2])] = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return out


def _descendants(roots: set[int]) -> set[int]:
    """Every process below ``roots`` in the process tree."""
    kids: dict[int, list[int]] = {}
    for pid, ppid in _parents().items():
        kids.setdefault(ppid, []).append(pid)
    out: set[int] = set()
    todo = list(roots)
    while todo:
        for child in kids.get(todo.pop(), []):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


def sweep_stale_rings(ring_dir: str) -> list[str]:
    """Remove the ring files in ``ring_dir`` whose driver (the pid in the name) is gone;
    returns their paths."""
    removed = []
    for path in glob.glob(os.path.join(ring_dir, f"{RING_STEM}-*")):
        owner = os.path.basename(path)[len(RING_STEM) + 1:].split("-", 1)[0]
        if owner.isdigit() and _start_time(int(owner)) is None:
            try:
                os.unlink(path)
                removed.append(path)
            except OSError:
                pass
    return removed


class Reaper:
    """The driver's handle on its watcher process.

    Attributes:
        process: the watcher (``subprocess.Popen``).
    """

    def __init__(self, process: subprocess.Popen) -> None:
        self.process = process

    def stop(self) -> None:
        """The driver is shutting down normally: the watcher exits without acting."""
        try:
            self.process.stdin.write(b"stop\n")
            self.process.stdin.close()
            self.process.wait(timeout=10)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            self.process.kill()


def watch_driver(roots: set[int], ring_dir: str = "/dev/shm") -> Optional[Reaper]:
    """Start the watcher of this driver (see the module docstring).

    Args:
        roots: the local Ray node's processes (GCS, raylet, dashboard...); their descendants
            now (the raylet's agents) are watched too.
        ring_dir: where the job's ring files are (named by :func:`ring_prefix`).

    Returns:
        The :class:`Reaper`, or None without ``/proc``.
    """
    if not os.path.isdir("/proc"):
        return None
    pids = {pid: t for pid in roots | _descendants(roots) if (t := _start_time(pid))}
    rings = os.path.join(ring_dir, f"{RING_STEM}-{os.getpid()}-*")
    spec = {"pids": pids, "rings": rings}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = f"import sys; sys.path.insert(0, {root!r}); from fgnn.reaper import main; main()"
    try:
        proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True, close_fds=True)
        proc.stdin.write(json.dumps(spec).encode() + b"\n")
        proc.stdin.flush()
    except OSError:  # no process to spare: the job runs unwatched, as before
        return None
    return Reaper(proc)


def _started_by(raylets: set[int]) -> set[int]:
    """Processes a raylet of ``raylets`` started, found by the ``RAY_RAYLET_PID`` Ray puts in
    their environment: its workers and agents, even once the raylet is gone and they are
    re-parented."""
    marks = {f"RAY_RAYLET_PID={pid}".encode() for pid in raylets}
    out = set()
    for path in glob.glob("/proc/[0-9]*/environ"):
        try:
            with open(path, "rb") as f:
                env = set(f.read().split(b"\0"))
        except OSError:
            continue
        if env & marks:
            out.add(int(path.split("/")[2]))
    return out


def _kill_all(pids: set[int]) -> None:
    """``SIGKILL`` each of ``pids`` but this process (one already gone is skipped)."""
    for pid in pids - {os.getpid()}:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def ray_descendants(pid: Optional[int] = None) -> set[int]:
    """The processes below ``pid`` (default: this process) whose command line names Ray: the
    GCS, raylet, dashboard, agents, workers and Ray's own reaper of a node it started."""
    out = set()
    for child in _descendants({os.getpid() if pid is None else int(pid)}):
        try:
            with open(f"/proc/{child}/cmdline", "rb") as f:
                if b"ray" in f.read():
                    out.add(child)
        except OSError:
            continue
    return out


def end_processes(pids: set[int], rounds: int = 2) -> set[int]:
    """Kill (``SIGKILL``) ``pids``, their descendants and what a raylet among them started (its
    agents and workers, marked ``RAY_RAYLET_PID``), ``rounds`` times over (a raylet may start an
    agent while the first round runs); returns every process killed. For a node whose start was
    interrupted: no part of it then waits for the raylet's death to be noticed (the agents did,
    about 61 s)."""
    killed: set[int] = set()
    for _ in range(max(1, rounds)):
        live = {pid for pid in pids | killed if _start_time(pid) is not None}
        targets = live | _descendants(live) | _started_by(pids | killed)
        _kill_all(targets)
        killed |= targets
    return killed


def reap(spec: dict) -> None:
    """The driver died: kill what is left of its node's processes (those it was told of,
    their descendants, what its raylet started), remove its ring files."""
    known = {int(pid): start for pid, start in spec.get("pids", {}).items()}
    alive = {pid for pid, start in known.items() if _start_time(pid) == start}
    killed = alive | _descendants(alive) | _started_by(set(known))
    _kill_all(killed)
    for path in glob.glob(spec["rings"]) if spec.get("rings") else ():
        try:
            os.unlink(path)
        except OSError:
            pass
    sweep_peer_segments(killed, spec.get("shm_dir") or "/dev/shm")


#: Name stem of the Trainers' shared cache buffers (:data:`fgnn.cache.peer_share.SEGMENT_STEM`,
#: not imported: the watcher runs without torch).
PEER_STEM = "fgnn-peer"


def sweep_peer_segments(killed: set[int], shm_dir: str = "/dev/shm") -> list[str]:
    """Remove the Trainers' shared cache buffers (``fgnn-peer-<owner pid>-*``) whose owner is
    among ``killed`` or gone; returns their paths. A killed owner runs no ``atexit``, and
    without this its segments (up to a cache each) stayed until the next job swept them."""
    gone = []
    for path in glob.glob(os.path.join(shm_dir, f"{PEER_STEM}-*")):
        owner = os.path.basename(path)[len(PEER_STEM) + 1:].split("-", 1)[0]
        if not owner.isdigit():
            continue
        if int(owner) in killed or _start_time(int(owner)) is None:
            try:
                os.unlink(path)
                gone.append(path)
            except OSError:
                pass
    return gone


def main() -> None:
    """The watcher: read the spec line, wait for ``stop`` or the pipe's end (the driver
    died), then :func:`reap`."""
    spec = json.loads(sys.stdin.buffer.readline() or b"{}")
    rest = sys.stdin.buffer.read()  # blocks until the driver writes stop or is gone
    if rest.strip() != b"stop":
        reap(spec)
