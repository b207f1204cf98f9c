"""The one training step's compute, shared by every loop: the runtime's Trainers
(:class:`~fgnn.executors.trainer.TrainerExecutor`), the in-process node loop
(:func:`fgnn.training.train_step`), the in-process link loop (:func:`fgnn.link.training.fit_link`)
and the in-process PinSAGE recommender (:func:`fgnn.tasks.recsys_inprocess.train_pinsage`).
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch
from torch import nn

__all__ = ["forward_backward", "LossFn"]

#: ``loss(model, out, sample, labels)``: the task's loss of the model's output (a
#: :class:`~fgnn.tasks.base.StepRule`'s ``loss``).
LossFn = Callable[[nn.Module, Any, Any, torch.Tensor], torch.Tensor]


def forward_backward(model: nn.Module, loss: LossFn, sample: Any, x: Any, labels: Any,
                     check: Optional[Callable[[Any, torch.Tensor], None]] = None,
                     forward: Optional[Callable[[nn.Module, Any, Any], Any]] = None
                     ) -> torch.Tensor:
    """Forward the sample's blocks and features, the task's ``loss``, ``check(out, loss)``
    (e.g. refuse labels outside the classes, or a non-finite loss before any gradient exists),
    backward. The caller zeroes the gradients before and steps (or exchanges them) after.

    Args:
        model: follows the :mod:`fgnn.models` contract (``model(blocks, x)``).
        loss: the task's loss.
        sample: a :class:`~fgnn.sampling.base.Sample` on the model's device.
        x: its input features (a tensor, or one per node type).
        labels: what the loss compares against.
        check: called between the loss and the backward pass.
        forward: ``forward(model, sample, x)`` for a model whose call takes more than
            ``(blocks, x)`` (PinSAGE's node ids); default ``model(sample.blocks, x)``.

    Returns:
        The loss.
    """
    model.train()
    out = model(sample.blocks, x) if forward is None else forward(model, sample, x)
    value = loss(model, out, sample, labels)
    if check is not None:
        check(out, value)
    value.backward()
    return value
