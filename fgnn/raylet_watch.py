"""Watching the raylet of a local Ray node that fgnn started: its death is known at once.

When the raylet of the driver's node dies (killed, out of memory), every actor of the job dies
with it. The driver learns of it only through the errors of its pending calls, which arrive many
seconds later (17.9 s measured for a SIGKILLed raylet on the 2-core test machine) and name
whichever actor answered first (``the global queue died``). Meanwhile Ray's core worker in the
driver may end the process itself, before fgnn can say anything: about one run in three here
ended with status 1 and only Ray's raylet report on stderr.

:class:`RayletWatch` closes that gap. The raylet of a node that ``ray.init`` starts is a child
process of the driver, so a daemon thread can wait for its exit on a Linux pidfd
(``waitid(P_PIDFD, ..., WEXITED | WNOWAIT)``): it wakes within milliseconds of the death,
without reaping the process (Ray's own bookkeeping still sees it), and learns the signal or
status. Where pidfds are missing (a kernel before 5.3, not Linux) it polls ``/proc`` every
:data:`POLL_S` seconds; without ``/proc`` it does not watch.

On the death the watch first ends the processes the raylet had started when the watch began
(Ray's ``DashboardAgent`` and ``RuntimeEnvAgent``, which otherwise outlive their raylet by 1–2
minutes; the executors end themselves), then calls the caller's ``on_death`` callback
(:class:`fgnn.job.Job` turns it into its one-line :class:`~fgnn.runtime.RuntimeFailure` with
the last good checkpoint). :meth:`RayletWatch.stop` before ``ray.shutdown()`` keeps a normal
shutdown, which ends the raylet too, from counting as a death.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass
from typing import Callable, Optional

__all__ = ["POLL_S", "RayletDeath", "RayletWatch", "local_gcs_pid", "local_raylet_pid"]

#: Seconds between two looks at ``/proc`` where no pidfd can be opened.
POLL_S = 0.25


@dataclass(frozen=True)
class RayletDeath:
    """How the raylet ended.

    Attributes:
        pid: its process id.
        signal: the signal that ended it (None when it exited, or when unknown).
        status: its exit status (None when a signal ended it, or when unknown).
        what: which process of the node it is (``"the raylet"``, ``"the GCS"``).
    """

    pid: int
    signal: Optional[int] = None
    status: Optional[int] = None
    what: str = "the raylet"

    def describe(self) -> str:
        """``the raylet of this node (pid 123) was killed by SIGKILL`` and the like."""
        who = f"{self.what} of this Ray node (pid {self.pid})"
        if self.signal is not None:
            try:
                name = signal.Signals(self.signal).name
            except ValueError:
                name = f"signal {self.signal}"
            return f"{who} was killed by {name}"
        if self.status is not None:
            return f"{who} exited with status {self.status}"
        return f"{who} ended"


def _local_pid(kind: str) -> Optional[int]:
    """Process id of the ``kind`` process (a ``ray_constants.PROCESS_TYPE_*`` name) of the Ray
    node this process started; None when it joined a cluster or Ray is not started."""
    from fgnn.raystart import local_head_node

    node = local_head_node()
    if node is None:
        return None
    import ray._private.ray_constants as ray_constants

    infos = node.all_processes.get(getattr(ray_constants, kind)) or []
    proc = getattr(infos[0], "process", None) if infos else None
    return None if proc is None else int(proc.pid)


def local_raylet_pid() -> Optional[int]:
    """Process id of the raylet of the Ray node this process started (``ray.init`` of a new
    local node); None when it joined a cluster or Ray is not started."""
    return _local_pid("PROCESS_TYPE_RAYLET")


def local_gcs_pid() -> Optional[int]:
    """Process id of the GCS server of the Ray node this process started (a child of this
    process, like the raylet): after its ``kill -9`` the job ran on, then hung about 60 s and
    ended with Ray's ``Failed to connect to GCS`` and no fgnn line; it is watched as the
    raylet is. None when this process started no node."""
    return _local_pid("PROCESS_TYPE_GCS_SERVER")


class RayletWatch:
    """Calls ``on_death`` once, from a daemon thread, when process ``pid`` (the raylet) ends.

    Args:
        pid: the raylet's process id (a child of this process for the pidfd path).
        on_death: called with a :class:`RayletDeath`; never called after :meth:`stop`.
        what: the process watched, as the death's line names it (``"the GCS"``).

    Attributes:
        mode: ``pidfd``, ``proc`` (polling) or ``off`` (nothing to watch with).
    """

    def __init__(self, pid: int, on_death: Callable[[RayletDeath], None],
                 what: str = "the raylet") -> None:
        self.pid = int(pid)
        self.what = what
        self.on_death = on_death
        self._stopped = threading.Event()
        self._fd: Optional[int] = None
        try:
            self._fd = os.pidfd_open(self.pid)  # type: ignore[attr-defined]
            self.mode = "pidfd"
        except (AttributeError, OSError):
            self.mode = "proc" if os.path.isdir(f"/proc/{self.pid}") else "off"
        self._thread = threading.Thread(target=self._watch, name="fgnn-raylet-watch",
                                        daemon=True)
        #: the raylet's children when the watch started: pid -> start time (``/proc`` stat)
        self.children: dict[int, str] = {}

    def start(self) -> "RayletWatch":
        """Note the raylet's children and start watching (no-op in mode ``off``); returns
        self."""
        if self.mode != "off":
            self.children = _children(self.pid)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching: a death from now on (``ray.shutdown``) is not reported."""
        self._stopped.set()

    def _watch(self) -> None:
        death = self._wait_pidfd() if self.mode == "pidfd" else self._wait_proc()
        if not self._stopped.is_set():
            for pid, start in self.children.items():
                if _start_time(pid) == start:  # still that process, not a reused pid
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
            self.on_death(death)

    def _wait_pidfd(self) -> RayletDeath:
        assert self._fd is not None
        try:
            info = os.waitid(os.P_PIDFD, self._fd,  # type: ignore[attr-defined]
                             os.WEXITED | os.WNOWAIT)
        except (AttributeError, OSError):  # not our child after all, or no P_PIDFD: poll
            return self._wait_proc()
        finally:
            os.close(self._fd)
        if info is None:
            return RayletDeath(self.pid, what=self.what)
        if info.si_code == os.CLD_EXITED:
            return RayletDeath(self.pid, status=info.si_status, what=self.what)
        return RayletDeath(self.pid, signal=info.si_status, what=self.what)

    def _wait_proc(self) -> RayletDeath:
        while not self._stopped.is_set() and _start_time(self.pid) is not None:
            time.sleep(POLL_S)
        return RayletDeath(self.pid, what=self.what)


def _stat(pid: int) -> Optional[list[str]]:
    """The fields of ``/proc/PID/stat`` after the command name (state first), or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _start_time(pid: int) -> Optional[str]:
    """The start time of a live (not zombie) process ``pid``, None when there is none."""
    fields = _stat(pid)
    return None if fields is None or fields[0] in ("Z", "X") else fields[19]


def _children(parent: int) -> dict[int, str]:
    """The live children of ``parent``: pid -> start time (empty without ``/proc``)."""
    out: dict[int, str] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    for entry in entries:
        if entry.isdigit():
            fields = _stat(int(entry))
            if fields is not None and fields[1] == str(parent) and fields[0] not in ("Z", "X"):
                out[int(entry)] = fields[19]
    return out
