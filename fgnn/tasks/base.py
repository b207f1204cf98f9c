"""The task interface: what a job learns, chosen once per job (:func:`fgnn.tasks.build_task`).

Node classification, link prediction and recommendation are implementations of one protocol;
each handles homogeneous and typed graphs inside itself, so the executors call the task and never
test which task or graph kind they run (GraphBolt's one ``MiniBatch`` pipeline, PyG's
``BaseSampler``). A task has three sides, one per place it runs:

* the **driver** (:class:`Task`): which items each split's mini-batches cut (vertices, edges,
  users), the dataset the Samplers sample, the model, and the scores of an evaluation pass;
* the **Samplers** (:class:`TaskSampling`, built in each Sampler from :meth:`Task.sampling`):
  a batch of items -> one :class:`~fgnn.sampling.base.Sample`;
* the **Trainers** (:class:`StepRule`, :attr:`Task.step`): a sample's labels, its loss and an
  evaluation chunk's record; :func:`~fgnn.models.step.forward_backward` is the one training
  step every loop runs.
"""

from __future__ import annotations

from typing import Any, Optional, Protocol, runtime_checkable

import torch
from torch import nn

from fgnn.models.step import forward_backward
from fgnn.sampling.base import Sample
from fgnn.sampling.task_sampling import SamplingSpec, TaskSampling

__all__ = ["Task", "TaskSampling", "StepRule", "SamplingSpec", "forward_backward"]


@runtime_checkable
class StepRule(Protocol):
    """A Trainer's side of a task: labels, loss and an evaluation record of a sample."""

    def labels(self, sample: Sample, labels: torch.Tensor) -> torch.Tensor:
        """What the loss compares against (on the host): vertex labels of the seeds, or the
        labels of the sample's pairs."""

    def loss(self, model: nn.Module, out: Any, sample: Sample,
             labels: torch.Tensor) -> torch.Tensor:
        """The training loss of the model's output ``out`` on ``sample``."""

    def score(self, model: nn.Module, out: Any, sample: Sample,
              labels: torch.Tensor) -> dict[str, Any]:
        """An evaluation chunk's record (``correct``, ``count``, ``loss_sum``; pair scores)."""


@runtime_checkable
class Task(Protocol):
    """The driver's side of a task (one per job; :func:`fgnn.tasks.build_task` picks it).

    Attributes:
        name: ``JobConfig.task``.
        metric: the validation score that picks the weights, as the report, its plot and
            table name it (``accuracy``, ``AUC``, ``recall@10``); optional for a registered
            task (``accuracy`` when absent).
        step: the Trainers' :class:`StepRule`.
        eval_splits: splits an evaluation pass scores at the end of the run.
    """

    name: str
    step: StepRule

    def training_dataset(self, dataset: Any) -> Any:
        """The dataset the Samplers sample and the cache ranks (a link job's training message
        graph)."""

    def items(self, split: str, dataset: Any) -> torch.Tensor:
        """The ids a split's tasks cut (vertices of ``dataset``, training edges, pairs,
        users)."""

    def sampling(self) -> SamplingSpec:
        """What every Sampler needs to build its :class:`TaskSampling`."""

    def build_model(self, config: Any, dataset: Any, num_layers: int) -> nn.Module:
        """The job's model when the user gave none."""

    def validation(self, scored: Any) -> tuple[float, dict[str, float]]:
        """``(score that picks the weights, epoch fields)`` of a validation pass."""

    def final_splits(self, known_val: Optional[float]) -> tuple[str, ...]:
        """The splits the final evaluation scores (``known_val``: the best validation score,
        when the best weights already scored it)."""

    def final_scores(self, scored: Any, known_val: Optional[float]) -> dict[str, float]:
        """The report's ``final`` scores of the final evaluation."""

    def identity(self) -> dict[str, Any]:
        """What a checkpoint records of the task (checked on resume)."""
