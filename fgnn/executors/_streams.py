"""CUDA streams and events of a Trainer: copies that overlap training, stage times that are true.

A Trainer extracts mini-batch ``i + 1`` in its prefetch thread while it trains mini-batch ``i``
(FGNN §5.2). On a GPU that overlap only happens when the prefetch's host->device copies run on a
stream of their own, from pinned host memory, and the training stream waits for exactly those
copies (an event) instead of for the whole device:

* :class:`CopyStream` -- the prefetch thread enters :meth:`CopyStream.scope` (its copies and
  kernels go to a dedicated stream), copies with :meth:`CopyStream.h2d` (pinned, non-blocking)
  and records an event; the training thread calls :meth:`CopyStream.wait` before it uses the
  batch, which also tells the caching allocator that the batch is now used on the training
  stream (``record_stream``).
* :class:`StageClock` -- a stage's seconds from CUDA events on the stream that ran it (kernel
  time, not launch time), read when the stage's end is known to be reached; ``perf_counter`` on
  the CPU.

On the CPU both are pass-throughs with the same interface, so the Trainer has one code path.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Iterable, Iterator, Optional

import torch

from fgnn import gpu

__all__ = ["CopyStream", "StageClock", "Lap"]


class CopyStream:
    """The dedicated host->device copy stream of one Trainer (a no-op off CUDA).

    Args:
        device: the Trainer's device.
    """

    def __init__(self, device: torch.device | str) -> None:
        self.device = torch.device(device)
        self.cuda = gpu.is_cuda(self.device)
        self.stream = gpu.new_stream(self.device) if self.cuda else None

    @contextlib.contextmanager
    def scope(self) -> Iterator[None]:
        """Run the enclosed copies and kernels on the copy stream."""
        if not self.cuda:
            yield
            return
        with gpu.use_stream(self.stream):
            yield

    def h2d(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` on the device: pinned and non-blocking from the host on CUDA (inside
        :meth:`scope`), a plain move elsewhere; a tensor already there is returned as is."""
        here = gpu.device_of(t)
        if here == self.device:
            return t
        if not self.cuda:
            return t.to(self.device)
        return gpu.to_device(gpu.pin(t) if gpu.is_host(here) else t, self.device)

    def record(self) -> Optional[Any]:
        """An event after everything queued on the copy stream so far (None off CUDA)."""
        if not self.cuda:
            return None
        ev = gpu.event()
        ev.record(self.stream)
        return ev

    def wait(self, event: Optional[Any], tensors: Iterable[torch.Tensor] = ()) -> None:
        """Make the current (training) stream wait for ``event`` and hand ``tensors`` over to
        it, so the allocator does not reuse their memory while training still reads them."""
        if event is None or not self.cuda:
            return
        current = gpu.current_stream(self.device)
        current.wait_event(event)
        for t in tensors:
            if t is not None and gpu.on_cuda(t):
                gpu.record_stream(t, current)


class Lap:
    """One timed stage: :meth:`seconds` resolves it (CUDA: waits for its end event)."""

    def __init__(self, start: Any, end: Any, cuda: bool) -> None:
        self._start, self._end, self._cuda = start, end, cuda

    def seconds(self) -> float:
        """The stage's seconds."""
        if not self._cuda:
            return float(self._end - self._start)
        self._end.synchronize()
        return float(self._start.elapsed_time(self._end)) / 1000.0


class StageClock:
    """Times stages on one device: CUDA events on a stream, ``perf_counter`` on the CPU.

    Usage::

        clock = StageClock(device)
        t = clock.start()          # on the stream that will run the stage
        ...                        # the stage's kernels
        lap = clock.stop(t)        # returns at once
        seconds = lap.seconds()    # once the stage's end is needed
    """

    def __init__(self, device: torch.device | str) -> None:
        self.device = torch.device(device)
        self.cuda = gpu.is_cuda(self.device)

    def _mark(self) -> Any:
        # on this device's current stream, whatever the thread's current device is
        ev = gpu.event(timing=True)
        ev.record(gpu.current_stream(self.device))
        return ev

    def start(self) -> Any:
        """Mark a stage's start on the device's current stream."""
        return time.perf_counter() if not self.cuda else self._mark()

    def stop(self, start: Any) -> Lap:
        """Mark the stage's end on the device's current stream."""
        if not self.cuda:
            return Lap(start, time.perf_counter(), False)
        return Lap(start, self._mark(), True)
