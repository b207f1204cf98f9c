"""What one process holds in host memory, read from ``/proc/self``: its peak and current
resident set, and how much of the files it maps (a memory-mapped topology or feature file) is
resident, shared with other processes or private to it.

Every executor reports this at the end of a run, so the report shows the peak of every process
and that the topology is one copy per host: a file's pages that several processes map are
counted once in the page cache (their *proportional* sets, Pss, add up to it), and a private
copy would show as ``private`` bytes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Optional

__all__ = ["process_memory", "mapped_bytes", "proc_field"]

_KEYS = {"Rss:": "rss", "Pss:": "pss", "Private_Clean:": "private", "Private_Dirty:": "private"}


def proc_field(path: Path, key: str) -> Optional[int]:
    """The number after ``key`` on its line of ``path`` (``/proc/*/status``, ``/proc/meminfo``,
    a cgroup's ``memory.stat``), or ``None``."""
    try:
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 2 and parts[0] == key and parts[1].isdigit():
                return int(parts[1])
    except OSError:
        pass
    return None


def mapped_bytes(files: Iterable[str], smaps: str = "/proc/self/smaps"
                 ) -> dict[str, dict[str, int]]:
    """Per file of ``files`` that this process maps: resident bytes of its mappings (``rss``),
    this process's proportional share of them (``pss``) and the bytes private to it
    (``private``: written copy-on-write pages, or pages no other process maps)."""
    wanted = {str(Path(f).resolve()) for f in files}
    out: dict[str, dict[str, int]] = {}
    current: Optional[dict[str, int]] = None
    try:
        lines = Path(smaps).read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        head = line.split(None, 5)
        if len(head) >= 5 and "-" in head[0] and not head[0].endswith(":"):
            path = head[5].strip() if len(head) == 6 else ""
            current = (out.setdefault(path, {"rss": 0, "pss": 0, "private": 0})
                       if path in wanted else None)
            continue
        if current is not None and head and head[0] in _KEYS:
            current[_KEYS[head[0]]] += int(head[1]) * 1024
    return out


def process_memory(files: Iterable[str] = (), role: str = "") -> dict[str, object]:
    """This process's memory: ``pid``, ``role``, ``peak_rss`` (VmHWM), ``rss`` (VmRSS) and
    ``mapped`` (:func:`mapped_bytes` of ``files``)."""
    status = Path("/proc/self/status")
    kib = {k: proc_field(status, f"{k}:") for k in ("VmHWM", "VmRSS")}
    return {"pid": os.getpid(), "role": role,
            "peak_rss": None if kib["VmHWM"] is None else kib["VmHWM"] * 1024,
            "rss": None if kib["VmRSS"] is None else kib["VmRSS"] * 1024,
            "mapped": mapped_bytes(files)}
