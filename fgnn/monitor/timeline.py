"""Where a run's wall time went, in parts that add up to it: the report's ``timeline``.

A :class:`Timeline` charges the wall clock to one part at a time. A part is entered with
:meth:`Timeline.phase`; a phase inside another pauses the outer one, so no second is counted
twice; time outside every phase is ``other``. :meth:`Timeline.close` adds the parts measured
before the timeline existed (``imports``: from the process start, :func:`process_start`, to the
job's start) and returns the report section, whose parts sum to ``wall_s``.

Part keys, in the order a run meets them (:data:`PART_LABELS`): ``imports`` (the interpreter and
imports, command line only), ``load``, ``setup`` (model, sampler and runtime built),
``ray_start``, ``reorder``, ``startup`` (executors started: processes, imports, graph and
features; in-process actors without Ray), ``ranking`` (the driver's hotness map), ``training``,
``sizing``, ``cache_fill``, ``relayout``, ``validation``, ``final_eval``, ``shutdown``,
``outputs`` (model file, plot, report) and ``other``.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Optional

__all__ = ["Timeline", "PART_LABELS", "process_start"]

#: Part key -> console label (``training`` and ``ranking`` get their details from the report).
PART_LABELS = {
    "imports": "start-up and imports", "load": "load", "setup": "set-up",
    "ray_start": "Ray start", "reorder": "reorder", "startup": "worker start-up",
    "ranking": "cache ranking", "training": "training", "sizing": "cache sizing",
    "cache_fill": "cache fill", "relayout": "re-layout", "validation": "validation",
    "final_eval": "final evaluation", "shutdown": "shutdown", "outputs": "outputs",
    "other": "other",
}


def process_start() -> Optional[float]:
    """The wall-clock time (``time.time()``) this process started, from the kernel's record of
    it (Linux ``/proc/self/stat``, to a clock tick); None where it cannot be read."""
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        ticks = int(fields[19])  # starttime, field 22: clock ticks since boot
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None
    return time.time() - max(0.0, age)


class Timeline:
    """Wall seconds of a run by part, each second charged to one part.

    Args:
        since: the wall-clock time (``time.time()``) the timeline covers from: the process
            start for a command-line run, else ``None`` (from now).
        announce: called with a line when a phase that says what it waits for begins (``starting
            Ray...``); None says nothing.
    """

    def __init__(self, since: Optional[float] = None,
                 announce: Optional[Callable[[str], None]] = None) -> None:
        now_wall, now = time.time(), time.perf_counter()
        self.origin = "process" if since is not None else "run"
        self._t0 = now - max(0.0, now_wall - since) if since is not None else now
        self.announce = announce
        self.parts: dict[str, float] = {}
        if since is not None:
            self.parts["imports"] = now - self._t0
        self._stack: list[str] = []
        self._last = now

    def _charge(self, now: float) -> None:
        if self._stack:
            key = self._stack[-1]
            self.parts[key] = self.parts.get(key, 0.0) + (now - self._last)
        self._last = now

    @contextmanager
    def phase(self, key: str, say: Optional[str] = None) -> Iterator[None]:
        """Charge the wall time of the ``with`` block to ``key`` (an outer phase pauses);
        ``say``: the line announced as it begins."""
        if key not in PART_LABELS or key == "other":
            raise ValueError(f"timeline part must be one of {', '.join(PART_LABELS)} (not "
                             f"other), got {key!r}")
        if say is not None:
            self.say(say)
        self._charge(time.perf_counter())
        self._stack.append(key)
        self.parts.setdefault(key, 0.0)
        try:
            yield
        finally:
            self._charge(time.perf_counter())
            self._stack.pop()

    def say(self, line: str) -> None:
        """Announce ``line`` (what the run waits for now), if the timeline announces."""
        if self.announce is not None:
            self.announce(line)

    def move(self, src: str, dst: str, seconds: float) -> None:
        """Charge ``seconds`` (at most what ``src`` holds) of ``src`` to ``dst`` instead: a
        phase whose inside is measured apart (a cache choice: sizing, then the fill)."""
        seconds = min(max(0.0, float(seconds)), self.parts.get(src, 0.0))
        if seconds > 0:
            self.parts[src] -= seconds
            self.parts[dst] = self.parts.get(dst, 0.0) + seconds

    def wall(self) -> float:
        """Seconds since the timeline's start."""
        return time.perf_counter() - self._t0

    def close(self) -> dict[str, Any]:
        """The report's ``timeline``: ``wall_s``, ``origin`` (``process``: from the process
        start; ``run``: from :meth:`fgnn.Job.run`) and ``parts``, ``[{"key", "seconds"}]`` in
        the order of :data:`PART_LABELS`, ``other`` last; they sum to ``wall_s``."""
        self._charge(time.perf_counter())
        wall = self.wall()
        order = [k for k in PART_LABELS if k in self.parts]
        parts = [{"key": k, "seconds": float(self.parts[k])} for k in order]
        other = wall - sum(p["seconds"] for p in parts)
        parts.append({"key": "other", "seconds": max(0.0, other)})
        return {"wall_s": float(max(wall, wall - other)), "origin": self.origin, "parts": parts}
