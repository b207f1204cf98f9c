"""How much host memory a job may still allocate, for size checks made before anything is built.

The limit is the tightest of what the machine reports:

* ``MemAvailable`` in ``/proc/meminfo`` (free memory plus reclaimable cache);
* the memory limit minus the usage of the process's own cgroup and of every cgroup above it (the
  path ``/proc/self/cgroup`` names: cgroup v2 ``memory.max`` / ``memory.current``, or v1
  ``memory.limit_in_bytes`` / ``memory.usage_in_bytes``; file pages, active or inactive,
  count as free: the kernel reclaims them): a job started inside a 2 GiB group sees 2 GiB, not the host's memory;
* ``RLIMIT_AS`` (``ulimit -v``) minus the address space this process already maps.

Where none can be read (not Linux), :func:`host_memory_limit` returns ``None`` and no size check
refuses anything.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from fgnn.procmem import proc_field

__all__ = ["MemoryLimit", "UNLIMITED", "host_memory_limit", "format_bytes", "check_fits",
           "own_groups", "read_int"]

UNLIMITED = 1 << 60                                              # cgroup v1 "no limit" is ~2**63


@dataclass(frozen=True)
class MemoryLimit:
    """Bytes a process may still allocate, and where that number comes from.

    Attributes:
        bytes: allocatable bytes.
        source: human-readable origin, e.g. ``"MemAvailable in /proc/meminfo"``.
        total: the whole limit this comes from (a cgroup's limit before its usage), when known.
    """

    bytes: int
    source: str
    total: Optional[int] = None


def format_bytes(n: float) -> str:
    """``1536 -> '1.5 KiB'``: binary units, one decimal."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def read_int(path: Path) -> Optional[int]:
    """The integer a cgroup file holds; None when unreadable or not a number (``max``)."""
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None                # "max" -> None (no limit)


def _meminfo(path: Path) -> Optional[MemoryLimit]:
    kib = proc_field(path, "MemAvailable:")
    return None if kib is None else MemoryLimit(kib * 1024, f"MemAvailable in {path}")


def own_groups(proc_cgroup: Path, root: Path) -> list[tuple[Path, str]]:
    """The memory cgroup directories of this process, its own first and then each parent up
    to the mount, with their version (``"v1"``/``"v2"``), from ``/proc/self/cgroup``."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        lines = []
    found: list[tuple[Path, str]] = []
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if "memory" in controllers.split(","):
            found += _chain(root / "memory", path, "v1")
        elif controllers == "" and (root / "cgroup.controllers").exists():
            found += _chain(root, path, "v2")
    if not found:                                   # not readable: the mount's top level
        found = [(root, "v2"), (root / "memory", "v1")]
    return found


def _chain(mount: Path, path: str, version: str) -> list[tuple[Path, str]]:
    parts = [p for p in path.strip().split("/") if p and p != ".."]
    return [(mount.joinpath(*parts[:k]), version) for k in range(len(parts), -1, -1)]


def _cgroup_level(sub: Path, version: str) -> Optional[MemoryLimit]:
    limit_f, usage_f, file_keys = (("memory.max", "memory.current",
                                    ("inactive_file", "active_file"))
                                   if version == "v2" else
                                   ("memory.limit_in_bytes", "memory.usage_in_bytes",
                                    ("total_inactive_file", "total_active_file")))
    limit = read_int(sub / limit_f)
    if limit is None or limit >= UNLIMITED:
        return None
    usage = read_int(sub / usage_f) or 0
    # file pages (page cache, mapped files) are reclaimable: what a mapped topology holds is
    # counted by the memory plan, not as already in use
    usage -= min(usage, sum(proc_field(sub / "memory.stat", k) or 0 for k in file_keys))
    return MemoryLimit(max(0, limit - usage),
                       f"cgroup memory limit {format_bytes(limit)} ({sub / limit_f}) minus "
                       f"{format_bytes(usage)} in use", limit)


def _cgroup(root: Path, proc_cgroup: Path) -> Optional[MemoryLimit]:
    """The tightest limit of this process's memory cgroup and its ancestors."""
    found = [m for sub, v in own_groups(proc_cgroup, root)
             if (m := _cgroup_level(sub, v)) is not None]
    return min(found, key=lambda m: m.bytes) if found else None


def _rlimit_as(status: Path) -> Optional[MemoryLimit]:
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    mapped = (proc_field(status, "VmSize:") or 0) * 1024
    return MemoryLimit(max(0, soft - mapped),
                       f"RLIMIT_AS {format_bytes(soft)} (ulimit -v) minus {format_bytes(mapped)} "
                       f"already mapped")


def host_memory_limit(*, meminfo: str = "/proc/meminfo", cgroup_root: str = "/sys/fs/cgroup",
                      status: str = "/proc/self/status",
                      proc_cgroup: str = "/proc/self/cgroup") -> Optional[MemoryLimit]:
    """The tightest of MemAvailable, the cgroup limits and ``RLIMIT_AS`` (see the module doc).

    Args:
        meminfo, cgroup_root, status, proc_cgroup: where to read them (tests point these at
            fake files).

    Returns:
        The smallest limit found, or ``None`` when none can be read.
    """
    found = [m for m in (_meminfo(Path(meminfo)), _cgroup(Path(cgroup_root), Path(proc_cgroup)),
                         _rlimit_as(Path(status))) if m is not None]
    return min(found, key=lambda m: m.bytes) if found else None


def check_fits(need: int, what: str, limit: Optional[MemoryLimit] = None, why: str = "") -> None:
    """Refuse ``need`` bytes when they exceed the host memory limit.

    Args:
        need: estimated bytes.
        what: what needs them, the start of the error message (``"dataset spec 'rmat:...'"``).
        limit: the limit to compare with; default :func:`host_memory_limit`.
        why: text after the message (``"; lower its size field scale=31"``).

    Raises:
        ValueError: ``"<what> needs about X GiB of host memory, more than the Y GiB this machine
            can give (<source>)<why>"``.
    """
    limit = limit if limit is not None else host_memory_limit()
    if limit is not None and need > limit.bytes:
        raise ValueError(f"{what} needs about {format_bytes(need)} of host memory, more than the "
                         f"{format_bytes(limit.bytes)} this machine can give "
                         f"({limit.source}){why}")
