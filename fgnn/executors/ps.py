"""Gradient exchange among Trainers: a parameter server with bounded staleness (FGNN §5.2).

FGNN "updates gradients asynchronously with bounded staleness" so that a Trainer's pipeline never
waits for its peers. Here one Ray actor holds the model and the optimizer; a Trainer pushes the
gradient of a mini-batch and receives the current weights in the same call, so a gradient is at
most ``N_t - 1`` updates stale (every other Trainer applies at most one update while it computes).

Why a parameter server rather than ``torch.distributed`` all-reduce: standby Trainers join and
leave in the middle of an epoch (§5.3) and a Trainer can die; a collective group would have to be
rebuilt each time, while a server needs no membership at all. The server is also the ledger of
exactly-once training: it applies the gradient of a task id at most once per epoch and rejects a
re-delivered duplicate, and its state is what a resumable checkpoint saves.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any, Optional

import torch
from torch import nn

__all__ = ["ParameterServer", "flatten", "unflatten_into"]


def flatten(tensors: list[torch.Tensor]) -> torch.Tensor:
    """Concatenate ``tensors`` into one flat float32 vector (one object-store payload)."""
    if not tensors:
        return torch.zeros(0)
    return torch.cat([t.detach().reshape(-1).float() for t in tensors])


def unflatten_into(flat: torch.Tensor, tensors: list[torch.Tensor]) -> None:
    """Copy the flat vector ``flat`` back into ``tensors`` in place (shapes from ``tensors``)."""
    need = sum(t.numel() for t in tensors)
    if flat.numel() != need:
        raise ValueError(f"flat has {flat.numel()} values, the tensors need {need}")
    offset = 0
    with torch.no_grad():
        for t in tensors:
            n = t.numel()
            t.copy_(flat[offset:offset + n].view_as(t))
            offset += n


class ParameterServer:
    """Holds the model and optimizer; applies each task's gradient once per epoch.

    Args:
        model: the model (its parameters are copied).
        lr: Adam learning rate.
        weight_decay: Adam weight decay.
        optimizer_state: optional optimizer ``state_dict`` to resume from.
    """

    def __init__(self, model: nn.Module, lr: float, weight_decay: float = 0.0,
                 optimizer_state: Optional[dict] = None) -> None:
        torch.set_num_threads(1)
        self.model = model.cpu()
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.Adam(self.params, lr=lr, weight_decay=weight_decay)
        if optimizer_state is not None:
            self.optimizer.load_state_dict(optimizer_state)
        self.version = 0
        self.epoch = -1
        self.discard = False
        self._new_ledger()

    def begin_epoch(self, epoch: int, discard: bool = False) -> None:
        """Start a ledger for ``epoch``; with ``discard`` (the profiling epoch) gradients are
        counted but not applied."""
        self.epoch, self.discard = int(epoch), bool(discard)
        self._new_ledger()

    def _new_ledger(self) -> None:
        # Every step() call is counted where it happens, apart from the admission decision, so
        # a duplicate that gets through (or is turned away) shows in the counts: attempts =
        # applied + rejected per task, and applied > 1 means a gradient was applied twice.
        self._attempts: Counter[int] = Counter()
        self._applied: Counter[int] = Counter()
        self._rejected: Counter[int] = Counter()
        self._by: dict[int, str] = {}
        self._busy_s = 0.0

    def _admit(self, epoch: int, task_id: int) -> bool:
        """Whether a gradient of ``task_id`` may be applied: it belongs to this epoch and no
        gradient of that task was applied in it yet (the exactly-once rule)."""
        return epoch == self.epoch and self._applied[task_id] == 0

    def weights(self) -> tuple[int, torch.Tensor]:
        """``(version, flat weights)``."""
        return self.version, flatten(self.params)

    def step(self, epoch: int, task_id: int, grad: torch.Tensor, consumer: str = ""
             ) -> tuple[bool, int, torch.Tensor]:
        """Apply the gradient of ``task_id`` unless that task was already applied this epoch.

        Args:
            epoch: epoch of the task (a gradient of another epoch is rejected).
            task_id: the mini-batch task.
            grad: flat gradient, as :func:`flatten` of the parameters' ``.grad``.
            consumer: the Trainer's name, for the ledger.

        Returns:
            ``(applied, version, flat weights)``: the caller continues from these weights.
        """
        t0 = time.perf_counter()
        self._attempts[task_id] += 1
        applied = self._admit(epoch, task_id)
        if applied:
            self._applied[task_id] += 1
            self._by.setdefault(task_id, consumer)
            if not self.discard:
                offset = 0
                for p in self.params:
                    n = p.numel()
                    p.grad = grad[offset:offset + n].view_as(p).to(p.dtype).clone()
                    offset += n
                self.optimizer.step()
                self.optimizer.zero_grad(set_to_none=True)
                self.version += 1
        else:
            self._rejected[task_id] += 1
        out = flatten(self.params)
        self._busy_s += time.perf_counter() - t0
        return applied, self.version, out

    def ledger(self) -> dict[str, Any]:
        """This epoch's exactly-once ledger, task id -> count: ``attempts`` (every gradient
        pushed for the task), ``applied`` (gradients applied: 1 when exactly-once holds),
        ``rejected`` (duplicates and stale epochs turned away); ``by`` (task id -> the trainer
        whose gradient was applied first) and ``busy_s``."""
        return {"epoch": self.epoch, "attempts": dict(self._attempts),
                "applied": dict(self._applied), "rejected": dict(self._rejected),
                "by": dict(self._by), "busy_s": self._busy_s}

    def state(self) -> dict[str, Any]:
        """Model and optimizer state dicts (CPU), for checkpoints and the final model."""
        return {"model": {k: v.detach().clone() for k, v in self.model.state_dict().items()},
                "optimizer": self.optimizer.state_dict(), "version": self.version}
