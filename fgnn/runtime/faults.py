"""Failures of the runtime (internal): the error that stops a job, Ray's death errors, the
restart limits, and the :class:`Watchdog` that puts a deadline on every wait of the driver.

Every failure line ends with where to resume from: the :class:`Watchdog` asks the job's
:class:`~fgnn.runtime.resume.Checkpointer` for its failure checkpoint (the last completed
epoch) and appends the resume hint.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Protocol

__all__ = ["RuntimeFailure", "Watchdog", "pass_name"]

#: Seconds a restarting executor may take before the job continues without it.
_RESTART_TIMEOUT_S = 120.0
#: Most seconds the driver waits for the queue to take an abort (it may be the hung part).
_ABORT_TIMEOUT_S = 10.0


class RuntimeFailure(RuntimeError):
    """The job cannot continue (no Trainer or no Sampler left); a checkpoint was written.

    Attributes:
        checkpoint: path of the resumable checkpoint.
    """

    def __init__(self, message: str, checkpoint: Optional[Path] = None) -> None:
        super().__init__(message)
        self.checkpoint = checkpoint


def _death_errors() -> tuple[type, ...]:
    """Ray's errors for a process or object that is gone (not an exception inside fgnn code,
    which arrives as ``RayTaskError`` and keeps its traceback)."""
    import ray.exceptions as rx

    return (rx.RayActorError, rx.LocalRayletDiedError, rx.NodeDiedError, rx.WorkerCrashedError,
            rx.ObjectLostError, rx.RaySystemError, rx.RpcError)


def pass_name(epoch: int) -> str:
    """``epoch N`` (1-based, as on the console) for a training epoch, ``evaluation pass`` for
    the passes (whose ids are negative)."""
    return f"epoch {epoch + 1}" if epoch >= 0 else "evaluation pass"


class _FailureCheckpoint(Protocol):
    def failure(self, text: str) -> RuntimeFailure: ...


class Watchdog:
    """The driver's deadline on what it waits for, and the job's stop.

    Args:
        limit_s: ``runtime.stall_timeout_s``: the longest the driver waits for an answer.
        checkpoints: builds the one-line failure with the last good checkpoint
            (:meth:`~fgnn.runtime.resume.Checkpointer.failure`).
    """

    def __init__(self, limit_s: float, checkpoints: _FailureCheckpoint) -> None:
        self.limit_s = float(limit_s)
        self.checkpoints = checkpoints

    def failure(self, text: str) -> RuntimeFailure:
        """``text`` ending with the resume hint of the failure checkpoint (written now)."""
        return self.checkpoints.failure(text)

    def get(self, refs: Any, what: str, epoch: Optional[int] = None) -> Any:
        """``get`` of a call the driver waits on (the queue, the parameter server, an
        executor's cache fill or settings) with ``runtime.stall_timeout_s`` as its deadline: the
        driver never blocks without one. Past it ``what`` is hung and the job stops with the
        last good checkpoint."""
        import ray

        from fgnn.executors import host

        try:
            return host.get(refs, timeout=self.limit_s)
        except ray.exceptions.GetTimeoutError:
            pass
        where = "" if epoch is None else f"{pass_name(epoch)}: "
        raise self.failure(
            f"{where}{what} did not answer for {self.limit_s:.0f}s: it is hung, and the job "
            f"stopped (runtime.stall_timeout_s, --stall-timeout, sets the limit)")

    def abort(self, queue: Any, reason: str) -> None:
        """Tell the queue the epoch is over (blocked executors return); best effort, with a
        deadline: the queue may be the part that died or hangs."""
        import ray

        from fgnn.executors import host

        try:
            host.get(queue.abort.remote(reason), timeout=min(_ABORT_TIMEOUT_S, self.limit_s))
        except (ray.exceptions.RayError, ray.exceptions.GetTimeoutError):
            pass
