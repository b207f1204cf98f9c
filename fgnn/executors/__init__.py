"""The factored runtime on Ray (FGNN §5): Sampler and Trainer executors, the global queue, the
scheduler (allocation and dynamic switching) and the :class:`Runtime` that wires them.

Executors are plain classes; :mod:`fgnn.executors.runtime` is the one place they become Ray
actors, so each is testable in-process.
"""

from fgnn.executors.ps import ParameterServer
from fgnn.executors.queue import GlobalQueue, QueueItem
from fgnn.executors.runtime import CHECKPOINT_NAME, Runtime, RuntimeFailure
from fgnn.executors.sampler import SamplerExecutor
from fgnn.executors.scheduler import (StandbyPolicy, TaskScheduler, allocate, epoch_batches,
                                      profit)
from fgnn.executors.trainer import TrainerExecutor

__all__ = [
    "Runtime",
    "RuntimeFailure",
    "CHECKPOINT_NAME",
    "SamplerExecutor",
    "TrainerExecutor",
    "ParameterServer",
    "GlobalQueue",
    "QueueItem",
    "TaskScheduler",
    "StandbyPolicy",
    "allocate",
    "profit",
    "epoch_batches",
]
