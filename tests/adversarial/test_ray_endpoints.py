"""Every port of a Ray that fgnn starts listens on loopback only (issue 19).

Before, with ``--dashboard-host off`` too, the DashboardAgent's metrics port and the dashboard
head's and autoscaler's metrics ports answered ``/metrics`` (70 ``ray_fgnn_*`` series, session
and worker ids) without authentication on 0.0.0.0, and the GCS, raylet, agents and workers
listened on every interface or the machine's routable address. The test starts Ray the way
``fgnn.Job`` does and reads every listening TCP socket of the processes under the driver from
``/proc`` (Linux only).
"""

from __future__ import annotations

import io
import os
import sys
import time

import pytest

ray = pytest.importorskip("ray")

from fgnn.config import JobConfig, RuntimeConfig  # noqa: E402
from fgnn.job import Job  # noqa: E402

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

#: Seconds to keep collecting sockets: Ray's agents and metrics servers come up after init.
SETTLE_S = 8.0
LOOPBACK_V4 = "127.0.0.1"
#: ::1 and ::ffff:127.0.0.1 as /proc/net/tcp6 writes them
LOOPBACK_V6 = ("00000000000000000000000001000000", "0000000000000000FFFF00000100007F")


def _descendants(root: int) -> set[int]:
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                ppid = int(open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(d))
    out, todo = set(), [root]
    while todo:
        for c in kids.get(todo.pop(), []):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out


def _listening() -> dict[str, tuple[str, int]]:
    """inode -> (address, port) of every listening TCP socket."""
    socks = {}
    for fam in ("tcp", "tcp6"):
        for line in open(f"/proc/net/{fam}").read().splitlines()[1:]:
            f = line.split()
            if f[3] != "0A":  # LISTEN
                continue
            addr, port = f[1].rsplit(":", 1)
            if fam == "tcp":
                addr = ".".join(str(int(addr[i:i + 2], 16)) for i in (6, 4, 2, 0))
            socks[f[9]] = (addr, int(port, 16))
    return socks


def _sockets_of(pids: set[int]) -> set[tuple[str, int, str]]:
    socks, out = _listening(), set()
    for p in pids:
        try:
            name = open(f"/proc/{p}/cmdline", "rb").read().split(b"\0")[0].decode()[-40:]
            fds = os.listdir(f"/proc/{p}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{p}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:[") and link[8:-1] in socks:
                addr, port = socks[link[8:-1]]
                out.add((addr, port, name))
    return out


def _loopback(addr: str) -> bool:
    return addr == LOOPBACK_V4 or addr in LOOPBACK_V6


def test_every_port_of_the_job_listens_on_loopback():
    # the default job: the dashboard on 127.0.0.1. Without it (--dashboard-host off) the same
    # processes run less the dashboard's HTTP server, so this covers that case too.
    if ray.is_initialized():
        ray.shutdown()
    job = Job(JobConfig(runtime=RuntimeConfig(devices=1)), out=io.StringIO())
    assert job._init_ray()
    try:
        @ray.remote(num_cpus=0)
        class Probe:  # a worker process, as the executors are
            def pid(self) -> int:
                return os.getpid()

        probe = Probe.remote()
        ray.get(probe.pid.remote())
        seen: set[tuple[str, int, str]] = set()
        deadline = time.monotonic() + SETTLE_S
        while time.monotonic() < deadline:
            seen |= _sockets_of(_descendants(os.getpid()))
            time.sleep(1.0)
    finally:
        ray.shutdown()
    assert len(seen) >= 4, f"too few Ray sockets found: {sorted(seen)}"
    exposed = sorted(s for s in seen if not _loopback(s[0]))
    print(f"{len(seen)} listening sockets: {sorted(seen)}")
    assert not exposed, f"listening beyond loopback: {exposed}"
