"""The workers of the factored runtime (FGNN §5.2): Sampler and Trainer executors, the global
queue that links them, the scheduler's allocation formula and switching profit, and the actors
(Ray or in-process) they run in. The driver that starts them is :mod:`fgnn.runtime`; the gradient
exchange they train through is :mod:`fgnn.exchange`.

The names below are imported on first use (PEP 562): the actors that need no torch (the global
queue, the argument store) start without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fgnn._lazy import lazy_exports

#: public name -> the module that defines it
_EXPORTS = {
    "SamplerExecutor": "fgnn.executors.sampler", "TrainerExecutor": "fgnn.executors.trainer",
    "GlobalQueue": "fgnn.executors.queue", "QueueItem": "fgnn.executors.queue",
    "TaskScheduler": "fgnn.executors.scheduler", "StandbyPolicy": "fgnn.executors.scheduler",
    "allocate": "fgnn.executors.scheduler", "profit": "fgnn.executors.scheduler",
    "epoch_batches": "fgnn.executors.scheduler",
    "FaultSpec": "fgnn.executors.fault_injection",
}

__all__ = [
    "SamplerExecutor", "TrainerExecutor", "GlobalQueue", "QueueItem",
    "TaskScheduler", "StandbyPolicy", "allocate", "profit", "epoch_batches", "FaultSpec",
]

if TYPE_CHECKING:
    from fgnn.executors.fault_injection import FaultSpec
    from fgnn.executors.queue import GlobalQueue, QueueItem
    from fgnn.executors.sampler import SamplerExecutor
    from fgnn.executors.scheduler import (StandbyPolicy, TaskScheduler, allocate,
                                          epoch_batches, profit)
    from fgnn.executors.trainer import TrainerExecutor


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
