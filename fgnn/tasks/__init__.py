"""What a job learns, chosen once (:func:`build_task`): node classification, link prediction or
recommendation, each on homogeneous and typed graphs (:mod:`fgnn.tasks.base` has the protocol).

A user adds a task with :func:`register_task` (a factory ``(config, dataset, model) -> Task``)
and runs it with ``JobConfig(task=NAME)``, as they add a sampler or a model.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from torch import nn

from fgnn.config import JobConfig, register_task_name
from fgnn.data.dataset_hetero import HeteroDataset
from fgnn.models.step import forward_backward
from fgnn.tasks.base import SamplingSpec, StepRule, Task, TaskSampling
from fgnn.tasks.checks import TypedJobError, check_job
from fgnn.tasks.link import LinkTask
from fgnn.tasks.link_typed import TypedLinkTask
from fgnn.tasks.node import NODE_STEP, NodeSampling, NodeStep, NodeTask
from fgnn.tasks.recsys import RecsysTask

__all__ = ["Task", "TaskSampling", "StepRule", "SamplingSpec", "TASKS", "register_task",
           "build_task", "check_job", "TypedJobError", "forward_backward", "NodeTask",
           "NodeSampling", "NodeStep", "NODE_STEP"]

TaskFactory = Callable[[JobConfig, Any, Optional[nn.Module]], Task]


def _link(config: JobConfig, dataset: Any, model: Optional[nn.Module]) -> LinkTask:
    """A link job's task: one relation's edges on a typed graph, else the graph's edges.

    Raises:
        ValueError: a custom model without ``pair_logits`` (:class:`~fgnn.tasks.link.LinkModel`).
    """
    if model is not None and not callable(getattr(model, "pair_logits", None)):
        raise ValueError(f"task='link' needs a model with pair_logits(h, pairs) (e.g. "
                         f"fgnn.tasks.link.LinkModel), got {type(model).__name__}")
    if isinstance(dataset, HeteroDataset):
        return TypedLinkTask.build(config, dataset)
    return LinkTask.build(config, dataset)


#: The one table: task name -> factory ``(config, dataset, model) -> Task``.
TASKS: dict[str, TaskFactory] = {
    "node": NodeTask.build,
    "link": _link,
    "recsys": lambda config, dataset, model: RecsysTask.build(config, dataset),
}


def register_task(name: str, factory: TaskFactory) -> None:
    """Make ``JobConfig(task=name)`` run the task ``factory(config, dataset, model)`` builds.

    Raises:
        ValueError: for an empty name or one already taken.
    """
    if not isinstance(name, str) or not name or name in TASKS:
        raise ValueError(f"task name must be a new non-empty string, got {name!r} (taken: "
                         f"{', '.join(TASKS)})")
    TASKS[name] = factory
    register_task_name(name)


def build_task(config: JobConfig, dataset: Any, model: Optional[nn.Module] = None) -> Task:
    """The job's task (``config.task``) over ``dataset``.

    Raises:
        ValueError: for a task nobody registered, or what the task's build refuses.
    """
    factory = TASKS.get(config.task)
    if factory is None:
        raise ValueError(f"JobConfig.task: {config.task!r} is not a registered task (one of "
                         f"{', '.join(TASKS)})")
    return factory(config, dataset, model)
