"""The factored runtime on Ray (FGNN §5): Sampler and Trainer executors, the global queue, the
scheduler (allocation and dynamic switching) and the :class:`Runtime` that wires them.

Executors are plain classes; :mod:`fgnn.executors.runtime` is the one place they become Ray
actors, so each is testable in-process. The names below are imported on first use (PEP 562):
the actors that need no torch (the global queue, the argument store) start without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fgnn._lazy import lazy_exports

#: public name -> the module that defines it
_EXPORTS = {
    "Runtime": "fgnn.executors.runtime", "RuntimeFailure": "fgnn.executors.runtime",
    "CHECKPOINT_NAME": "fgnn.executors.runtime", "RunFinished": "fgnn.executors.runtime",
    "SamplerExecutor": "fgnn.executors.sampler", "TrainerExecutor": "fgnn.executors.trainer",
    "ParameterServer": "fgnn.executors.ps",
    "GlobalQueue": "fgnn.executors.queue", "QueueItem": "fgnn.executors.queue",
    "TaskScheduler": "fgnn.executors.scheduler", "StandbyPolicy": "fgnn.executors.scheduler",
    "allocate": "fgnn.executors.scheduler", "profit": "fgnn.executors.scheduler",
    "epoch_batches": "fgnn.executors.scheduler",
    "FaultSpec": "fgnn.executors.fault_injection",
}

__all__ = [
    "Runtime", "RuntimeFailure", "RunFinished", "CHECKPOINT_NAME",
    "SamplerExecutor", "TrainerExecutor", "ParameterServer", "GlobalQueue", "QueueItem",
    "TaskScheduler", "StandbyPolicy", "allocate", "profit", "epoch_batches", "FaultSpec",
]

if TYPE_CHECKING:
    from fgnn.executors.fault_injection import FaultSpec
    from fgnn.executors.ps import ParameterServer
    from fgnn.executors.queue import GlobalQueue, QueueItem
    from fgnn.executors.runtime import CHECKPOINT_NAME, Runtime, RunFinished, RuntimeFailure
    from fgnn.executors.sampler import SamplerExecutor
    from fgnn.executors.scheduler import (StandbyPolicy, TaskScheduler, allocate,
                                          epoch_batches, profit)
    from fgnn.executors.trainer import TrainerExecutor


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
