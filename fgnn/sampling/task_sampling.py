"""How a Sampler draws a task's samples (:mod:`fgnn.tasks`): the protocol of a task's Sampler
side and the spec the runtime ships to build it. Here, below the tasks, so that every task
implementation (node, link, recommendation; homogeneous or typed) can name it."""

from __future__ import annotations

from typing import Any, Callable, Optional, Protocol, runtime_checkable

import torch

from fgnn.sampling.base import Sample

__all__ = ["TaskSampling", "SamplingSpec"]


@runtime_checkable
class TaskSampling(Protocol):
    """A Sampler's side of a task: items of a split -> one :class:`Sample`."""

    def train_sample(self, graph: Any, items: torch.Tensor,
                     generator: Optional[torch.Generator] = None) -> Sample:
        """The sample of a training mini-batch's ``items``."""

    def eval_sample(self, graph: Any, split: str, items: torch.Tensor,
                    generator: Optional[torch.Generator] = None) -> Sample:
        """The sample of an evaluation chunk's ``items`` of ``split``."""


class SamplingSpec:
    """How a Sampler builds its :class:`TaskSampling`: ``factory(payload, sampler, device)``,
    the payload (numpy arrays, mapped zero-copy from the object store) apart so the runtime can
    put it in the object store once."""

    def __init__(self, factory: Callable[..., TaskSampling], payload: Any = None) -> None:
        self.factory, self.payload = factory, payload

    def build(self, sampler: Any, device: torch.device) -> TaskSampling:
        """The Sampler's :class:`TaskSampling` over this spec's payload (fetched from the
        object store with the spec)."""
        return self.factory(self.payload, sampler, device)
