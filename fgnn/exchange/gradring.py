"""A Trainer's gradients in shared memory: the collective exchange's transport among CPU
members on one host (:mod:`fgnn.exchange.collective`).

Each member owns one :class:`GradientRing`, a file (in ``/dev/shm`` by default) of ``rows``
rows of ``width`` float32 values behind a small header. A Trainer writes each task's gradient
into its next row (``[seeds * gradient, seeds]``) *before* it delivers the task to the ledger;
the step's ``reduce`` event lists the accepted deliveries with their rows, so every member sums
the same rows in the same order from the files, bit for bit the same sum, without waiting for
any other member. A member publishes the number of steps it applied in its header
(:attr:`GradientRing.applied`); a writer reuses a row only once every member of the group has
applied the step the row held (:meth:`GradientRing.reusable`).

Why not gloo on one host: its sum is an exchange among every member (each must be scheduled,
and the slowest to wake gates everyone), over TCP with a loop thread per process; on an
oversubscribed CPU that wait is most of the step's exchange. Here a member waits only for its
own reducer thread.
"""

from __future__ import annotations

import mmap
import os
from typing import Optional

import torch

from fgnn.cache.peer_share import host_key

__all__ = ["GradientRing", "default_ring_dir", "host_key", "ring_bytes", "ring_rows"]

#: int64 header fields: magic, rows, width, steps applied by the owner.
_MAGIC, _HEADER = 0x46474E4E52494E47, 64  # "FGNNRING"; header bytes (8 int64)
#: Rows per member at the least.
DEFAULT_ROWS = 8


def ring_rows(step_tasks: int) -> int:
    """Rows of each member's ring for steps of ``step_tasks`` tasks: a member may hold every
    slot of the open step, so a ring of more rows than that never needs a row of the step it
    writes; twice that and two more, so that a writer waits only for a member lagging a full
    step behind."""
    return max(DEFAULT_ROWS, 2 * int(step_tasks) + 2)


def ring_bytes(rows: int, width: int) -> int:
    """File size of a ring of ``rows`` rows of ``width`` float32 values."""
    return _HEADER + 4 * rows * width


def default_ring_dir() -> Optional[str]:
    """``/dev/shm`` when it exists and is writable (Linux), else None (no shared-memory
    transport: the members sum over gloo)."""
    d = "/dev/shm"
    return d if os.path.isdir(d) and os.access(d, os.W_OK) else None


class GradientRing:
    """``rows`` rows of ``width`` float32 values in a shared-memory file.

    Create one with :meth:`create` (the owner writes rows and :attr:`applied`), open another
    member's with :meth:`open` (read-only use).

    Attributes:
        path: the file.
        rows: ``(rows, width)`` float32 view of the data.
    """

    def __init__(self, path: str, mm: mmap.mmap, rows: int, width: int) -> None:
        self.path, self._mm = path, mm
        self._header = torch.frombuffer(mm, dtype=torch.int64, count=_HEADER // 8)
        self.rows = torch.frombuffer(mm, dtype=torch.float32, count=rows * width,
                                     offset=_HEADER).view(rows, width)
        self._steps: list[Optional[int]] = [None] * rows  # the step each row holds (owner)
        self._next = 0

    @classmethod
    def create(cls, path: str, rows: int, width: int, applied: int = 0) -> "GradientRing":
        """A new ring file at ``path`` (its space reserved now, so a full ``/dev/shm`` fails
        here with ``OSError`` rather than with a bus error on a later write)."""
        size = ring_bytes(rows, width)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            if hasattr(os, "posix_fallocate"):
                os.posix_fallocate(fd, 0, size)
            else:
                os.ftruncate(fd, size)
            mm = mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            os.unlink(path)
            raise
        os.close(fd)
        ring = cls(path, mm, rows, width)
        ring._header[:4] = torch.tensor([_MAGIC, rows, width, applied])
        return ring

    @classmethod
    def open(cls, path: str) -> "GradientRing":
        """Another member's ring (its shape read from the header).

        Raises:
            OSError: the file is not there (the member is on another host).
            ValueError: the file is not a gradient ring.
        """
        with open(path, "r+b") as f:
            mm = mmap.mmap(f.fileno(), 0)
        head = torch.frombuffer(mm, dtype=torch.int64, count=4).tolist()
        if head[0] != _MAGIC or len(mm) != ring_bytes(head[1], head[2]):
            mm.close()
            raise ValueError(f"{path}: not a gradient ring")
        return cls(path, mm, head[1], head[2])

    @property
    def applied(self) -> int:
        """Steps the owner has applied (it reads no row of a step below this any more)."""
        return int(self._header[3])

    @applied.setter
    def applied(self, steps: int) -> None:
        self._header[3] = int(steps)

    def next_row(self, step: int) -> tuple[int, Optional[int]]:
        """The owner's next row for a gradient of ``step``: ``(row, the step it held before
        or None)``; the row is the caller's once :meth:`reusable` says so for that step."""
        row = self._next
        self._next = (self._next + 1) % self.rows.shape[0]
        before, self._steps[row] = self._steps[row], int(step)
        return row, before

    def unclaim(self, row: int, before: Optional[int]) -> None:
        """Give back ``row`` (from :meth:`next_row`) unwritten: it holds step ``before``
        still, and it is the next row again."""
        self._steps[row], self._next = before, row

    @staticmethod
    def reusable(before: Optional[int], readers: list["GradientRing"]) -> bool:
        """A row that held a gradient of step ``before`` may be written: every reader (the
        group's members' rings, the owner's included) applied that step."""
        return before is None or all(r.applied > before for r in readers)
