"""Kills by the kernel's OOM killer in this process's memory cgroup, read without ``dmesg``.

The kernel counts every process it kills for a memory cgroup's limit: ``oom_kill`` in the
group's ``memory.events`` (cgroup v2) or ``memory.oom_control`` (cgroup v1, kernel 4.13 on).
An executor the OOM killer ends reaches the driver only as Ray's ``A worker died or was killed
... unexpected system error``; :class:`OomWatch` tells that death apart: it notes the counters
of this process's group and the groups above it (those with a limit, where the kernel can
kill; :mod:`fgnn.data.memory` finds them) when it starts, and :meth:`OomWatch.new_kill` says
whether one went up since, with the group's peak usage (``memory.max_usage_in_bytes``, v1;
``memory.peak``, v2) and its limit for the line that names the death.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from fgnn.data.memory import UNLIMITED, own_groups, read_int, format_bytes
from fgnn.procmem import proc_field

__all__ = ["OomKill", "OomWatch", "oom_kills"]

#: (limit, peak, events file) of a group, by cgroup version.
_FILES = {"v1": ("memory.limit_in_bytes", "memory.max_usage_in_bytes", "memory.oom_control"),
          "v2": ("memory.max", "memory.peak", "memory.events")}


@dataclass(frozen=True)
class OomKill:
    """Processes the OOM killer ended in a memory group, and the group's memory.

    Attributes:
        group: the cgroup's directory.
        kills: how many since the watch started.
        peak: the group's peak usage in bytes (None where the kernel does not keep one).
        limit: the group's limit in bytes.
    """

    group: str
    kills: int
    peak: Optional[int]
    limit: int

    def describe(self) -> str:
        """``its memory group /sys/.../a3 peaked at 4.0 GiB of its 4.0 GiB limit``."""
        peak = "" if self.peak is None else f" peaked at {format_bytes(self.peak)} of"
        return f"its memory group {self.group}{peak} its {format_bytes(self.limit)} limit"


def oom_kills(cgroup_root: str = "/sys/fs/cgroup",
              proc_cgroup: str = "/proc/self/cgroup") -> dict[str, int]:
    """The ``oom_kill`` counter of every memory group of this process that has a limit (its
    own and those above it), by the group's directory."""
    out = {}
    for sub, version in own_groups(Path(proc_cgroup), Path(cgroup_root)):
        limit_f, _, events_f = _FILES[version]
        limit = read_int(sub / limit_f)
        count = proc_field(sub / events_f, "oom_kill")
        if limit is not None and limit < UNLIMITED and count is not None:
            out[str(sub)] = count
    return out


class OomWatch:
    """The OOM kills in this process's memory groups since the watch started.

    Args:
        cgroup_root, proc_cgroup: where to read (tests point these at fake files).
    """

    def __init__(self, cgroup_root: str = "/sys/fs/cgroup",
                 proc_cgroup: str = "/proc/self/cgroup") -> None:
        self.cgroup_root, self.proc_cgroup = cgroup_root, proc_cgroup
        self._seen = oom_kills(cgroup_root, proc_cgroup)

    def new_kill(self) -> Optional[OomKill]:
        """A kill since the last call (or the start) in the tightest group that counted one,
        taken (the next call reports only later ones); None when there was none."""
        now = oom_kills(self.cgroup_root, self.proc_cgroup)
        found: Optional[OomKill] = None
        for group, count in now.items():
            more = count - self._seen.get(group, 0)
            if more <= 0:
                continue
            kill = self._kill(Path(group), more)
            if found is None or kill.limit < found.limit:
                found = kill
        if found is not None:  # one death is named per kill: the next failure another
            self._seen[found.group] = self._seen.get(found.group, 0) + 1
            for group, count in now.items():
                if group != found.group:
                    self._seen[group] = count
        return found

    def _kill(self, group: Path, kills: int) -> OomKill:
        version = "v1" if (group / "memory.limit_in_bytes").exists() else "v2"
        limit_f, peak_f, _ = _FILES[version]
        return OomKill(str(group), kills, read_int(group / peak_f),
                       int(read_int(group / limit_f) or 0))
