"""Gradient exchange among Trainers: a parameter server whose steps are those of one process.

The rule (it replaces the plain asynchronous updates of FGNN §5.2, whose stale gradients cost
accuracy as Trainers are added; measured in docs/concepts.md, "Gradient exchange"):

* **A step averages R task gradients.** The runtime cuts every mini-batch of ``B`` seeds into
  ``R`` tasks (:func:`~fgnn.executors.scheduler.epoch_batches` with ``parts=R``). The server sums
  the gradient of each task, weighted by its seed count, and takes one optimizer step with the
  weighted mean once the step's gradients are all in. A task's gradient is the mean over its own
  seeds, so the step is the single-process step on ``B`` seeds: an epoch has the same steps of
  the same size at any number of devices, and the learning rate needs no scaling.
* **Staleness zero.** Before computing a task, a Trainer *claims* one of the
  step's ``min(R, tasks left)`` slots (:meth:`ParameterServer.try_claim`, or :meth:`claim`, which
  waits) and gets the current weights with it. The step is taken only when every claimed slot
  has delivered, so each gradient is computed from the weights of the previous step. A Trainer
  waits only when all slots of the current step are taken, i.e. for the end of a step it has no
  share in; its pipeline (extracting the next task) keeps running meanwhile. A slot whose
  Trainer stops, dies, or delivers a duplicate is given back (:meth:`release`).

Why a parameter server rather than ``torch.distributed`` all-reduce: standby Trainers join and
leave in the middle of an epoch (§5.3) and a Trainer can die; a collective group would have to be
rebuilt each time, while slots are counted per step, not per member. The server is also the
ledger of exactly-once training: it accepts the gradient of a task id at most once per epoch and
rejects a re-delivered duplicate, and its state is what a resumable checkpoint saves (steps never
span epochs, so there is nothing half-summed to save).
"""

from __future__ import annotations

import copy
import time
from collections import Counter
from concurrent.futures import Future
from typing import Any, NamedTuple, Optional

import torch
from torch import nn

from fgnn.exchange.exactly_once import TaskLedger
from fgnn.threads import shared_pool

__all__ = ["ParameterServer", "Claim", "StepReply", "flatten", "step_wait", "unflatten_into"]


def step_wait(ready_at: Optional[float], start: float, seen: float) -> float:
    """The part of a Trainer's wait for a slot that was waiting for other Trainers' work, the
    same rule for the parameter server and the collective exchange (issue 18's "exchange
    share" counts the rest of the wait as exchange).

    A claim that had to wait for a step to close waited for other Trainers' work until that
    step's last gradient was ready (``ready_at``, wall time, from the Trainer that computed it);
    from then on it waits for the exchange itself: moving that gradient, the step (sum and
    Adam), and the slot and weights coming back.

    Args:
        ready_at: the wall time the closing step's last gradient was ready; None when the claim
            did not wait for a step to close.
        start: the wall time (``time.time()``) the caller began to wait for the claim's reply.
        seen: seconds the caller waited for the reply.

    Returns:
        ``ready_at - start`` clamped to ``[0, seen]`` (processes on different hosts may
        disagree on the wall time; the clamp keeps the split within what the caller saw).
    """
    if ready_at is None:
        return 0.0
    return min(max(ready_at - start, 0.0), max(seen, 0.0))


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


class Claim(NamedTuple):
    """A slot in the current step: compute the task's gradient from these weights.

    Attributes:
        version: the weights' version (steps taken); push the gradient with it.
        weights: flat weights, or None when the caller already holds ``version``.
        waited_s: seconds :meth:`ParameterServer.claim` waited for a free slot.
        ready_at: when the claim waited for a step to close, the wall time that step's last
            gradient was ready (:func:`step_wait`); None when it did not.
    """

    version: int
    weights: Optional[torch.Tensor]
    waited_s: float = 0.0
    ready_at: Optional[float] = None


class StepReply(NamedTuple):
    """What :meth:`ParameterServer.step` answers.

    Attributes:
        applied: the gradient was accepted: it is, or will be, part of exactly one step.
        version: the server's version after this push (one more when it completed the step).
        claim: a slot for the caller's next task when it asked for one and one was free.
    """

    applied: bool
    version: int
    claim: Optional[Claim] = None


class ParameterServer:
    """Holds the model and optimizer; takes a step when all slots of the step have delivered.

    Use: :meth:`begin_epoch` (R and the epoch's task count), then per task :meth:`try_claim` (or
    the waiting :meth:`claim` on a Ray actor), compute the gradient from the claimed weights,
    :meth:`step`.

    Args:
        model: the model (its parameters are copied).
        lr: Adam learning rate.
        weight_decay: Adam weight decay.
        optimizer_state: optional optimizer ``state_dict`` to resume from (the server keeps a
            copy: Adam's ``load_state_dict`` keeps the given tensors and its steps update them
            in place, and an in-process caller still holds them).
    """

    def __init__(self, model: nn.Module, lr: float, weight_decay: float = 0.0,
                 optimizer_state: Optional[dict] = None) -> None:
        torch.set_num_threads(1)
        self.model = model.cpu()
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        # Adam's first construction in a process imports torch._dynamo (about 2 CPU-s), which
        # would keep the server from answering ready until then: a fresh one is built on a
        # thread while the job starts, and the first step (or state) waits for it. A resumed
        # one is built here, so a state that does not fit the model fails the constructor.
        self._optimizer: Future[torch.optim.Adam]
        if optimizer_state is None:
            self._optimizer = shared_pool("optimizer", 1).submit(
                _adam, self.params, lr, weight_decay, None)
        else:
            self._optimizer = Future()
            self._optimizer.set_result(
                _adam(self.params, lr, weight_decay, copy.deepcopy(optimizer_state)))
        self.version = 0
        self._flat = flatten(self.params)
        self._cond: Any = None  # asyncio.Condition of the actor's event loop, made on first use
        self._loop: Any = None
        # the exactly-once ledger and the enrolment (the incarnation of each consumer whose
        # claims and pushes count, kept across epochs). Every step() call is counted where it
        # happens, apart from the admission decision, so a duplicate that gets through (or is
        # turned away) shows in the counts: attempts = applied + rejected per task, and
        # applied > 1 means a gradient was applied twice.
        self._tasks = TaskLedger()
        self._reset_step()

    @property
    def optimizer(self) -> torch.optim.Adam:
        """The server's Adam (waits for its construction on the first call; raises what the
        construction raised, e.g. an optimizer state that does not fit the model)."""
        return self._optimizer.result()

    @property
    def epoch(self) -> int:
        """The epoch whose gradients are accepted (-1 before :meth:`begin_epoch`)."""
        return self._tasks.epoch

    def _reset_step(self) -> None:
        """Clear the open step (its slots, sum and seeds) and the epoch's claim wait."""
        self._holders: Counter[str] = Counter()
        self._sum = torch.zeros_like(self._flat)
        self._seeds = 0.0
        self._claimed = self._received = 0
        self._wait_s = 0.0
        # wall time the current step's last gradient was ready, and that of the last step taken
        self._ready, self._closed_ready = 0.0, 0.0

    # ------------------------------------------------------------------ epoch
    def begin_epoch(self, epoch: int, tasks: Optional[int] = None, group: int = 1) -> None:
        """Start a ledger for ``epoch``; outstanding claims are dropped.

        Args:
            epoch: the epoch whose gradients are accepted from now on.
            tasks: the epoch's number of tasks; a step has ``min(group, tasks left)`` slots, so
                the last step may be smaller. None: every step has ``group`` slots.
            group: R, the task gradients averaged into one step.

        Raises:
            ValueError: for ``group < 1`` or ``tasks < 0``.
        """
        self._tasks.reset(epoch, tasks, group)
        self._reset_step()
        self._notify()

    def weights(self) -> tuple[int, torch.Tensor]:
        """``(version, flat weights)``. The flat weights are never changed once handed out (a
        step makes new ones), so callers may keep them without a copy."""
        return self.version, self._flat

    # ------------------------------------------------------------------ claims
    def slots(self) -> int:
        """Slots of the current step: ``min(R, tasks not yet accepted)``."""
        return self._tasks.slots(self._received)

    def enroll(self, consumer: str, incarnation: int) -> None:
        """``consumer``'s claims and pushes count only from ``incarnation`` on (a Trainer
        enrolls at the start of each epoch with its queue generation): a claim or push still in
        flight from a dead incarnation can no longer take or fill a slot."""
        self._tasks.enroll(consumer, incarnation)

    def _stale(self, consumer: str, incarnation: Optional[int]) -> bool:
        """Whether ``incarnation`` of ``consumer`` is not the enrolled one (the hook a fault
        test switches off)."""
        return self._tasks.stale(consumer, incarnation)

    def try_claim(self, consumer: str, base_version: Optional[int] = None,
                  incarnation: Optional[int] = None) -> Optional[Claim]:
        """Take a slot of the current step for ``consumer``, or None when all are taken (or
        the caller is not ``consumer``'s enrolled incarnation).

        Args:
            consumer: the Trainer's name (its slots are given back by :meth:`release`).
            base_version: the version the caller holds; the weights are sent only if it differs.
            incarnation: the caller's incarnation (see :meth:`enroll`); None is not checked.
        """
        if self._claimed >= self.slots() or self._stale(consumer, incarnation):
            return None
        self._claimed += 1
        self._holders[consumer] += 1
        return Claim(self.version, None if base_version == self.version else self._flat)

    async def claim(self, consumer: str, base_version: Optional[int] = None,
                    timeout_s: float = 1.0, incarnation: Optional[int] = None
                    ) -> Optional[Claim]:
        """:meth:`try_claim`, waiting up to ``timeout_s`` for the current step to end (on the
        Ray actor); None on timeout (the caller re-checks its stop flag and asks again)."""
        import asyncio

        if self._cond is None:
            self._cond = asyncio.Condition()
            self._loop = asyncio.get_running_loop()
        t0 = time.perf_counter()
        ready = None
        async with self._cond:
            got = self.try_claim(consumer, base_version, incarnation)
            if got is None:
                v0 = self.version
                try:
                    await asyncio.wait_for(self._cond.wait_for(
                        lambda: self._claimed < self.slots()), timeout_s)
                except asyncio.TimeoutError:
                    pass
                got = self.try_claim(consumer, base_version, incarnation)
                ready = self._closed_ready if self.version != v0 else time.time()
        waited = time.perf_counter() - t0
        self._wait_s += waited
        return None if got is None else got._replace(waited_s=waited, ready_at=ready)

    def release(self, consumer: str, count: Optional[int] = None) -> int:
        """Give back ``count`` (default: all) of ``consumer``'s unused slots; returns how many.

        The runtime calls it for a Trainer that died or stopped while holding slots; releasing
        all of them also ends the consumer's incarnation (see :meth:`enroll`)."""
        if count is None:
            self._tasks.retire(consumer)
        n = self._holders[consumer] if count is None else min(count, self._holders[consumer])
        self._holders[consumer] -= n
        self._claimed -= n
        self._maybe_step()
        self._notify()
        return n

    def _notify(self) -> None:
        if self._cond is None:
            return

        async def wake() -> None:
            async with self._cond:
                self._cond.notify_all()

        # step() and release() may run on another thread than the actor's event loop
        self._loop.call_soon_threadsafe(lambda: self._loop.create_task(wake()))

    # ------------------------------------------------------------------ gradients
    def step(self, epoch: int, task_id: int, grad: torch.Tensor, consumer: str = "",
             seeds: int = 1, claim_next: Optional[int] = None,
             incarnation: Optional[int] = None, ready_at: Optional[float] = None) -> StepReply:
        """Deliver the gradient of ``task_id`` on a slot ``consumer`` claimed.

        A duplicate (the task was already accepted this epoch) or a gradient of another epoch is
        rejected and its slot given back. The step is taken when every slot of the step has
        delivered.

        Args:
            epoch: epoch of the task.
            task_id: the mini-batch task.
            grad: flat gradient, :func:`flatten` of the parameters' ``.grad``: the mean over the
                task's seeds, computed from the weights of the claim; read during the call,
                not kept.
            consumer: the Trainer's name, holder of the slot.
            seeds: the task's seed count, its weight in the step's mean.
            claim_next: the version the caller holds, to also :meth:`try_claim` a slot for its
                next task in the same call (one round trip less per task). Only a caller that
                already holds its next task may ask: a slot held while waiting for a task could
                block the Trainers holding the last tasks.
            incarnation: the caller's incarnation (see :meth:`enroll`): a push from one that is
                no longer enrolled (its slots were released) is counted and rejected.
            ready_at: the wall time the gradient was ready (default: now), see :func:`step_wait`.

        Raises:
            ValueError: when ``consumer`` holds no slot, or ``grad``/``seeds`` are malformed.
        """
        t0 = time.perf_counter()
        if self._stale(consumer, incarnation):
            self._tasks.attempt(task_id)
            self._tasks.reject(task_id)
            return StepReply(False, self.version, None)
        if self._holders[consumer] < 1:
            raise ValueError(f"{consumer!r} pushed task {task_id} without a claimed slot")
        self._holders[consumer] -= 1
        self._tasks.attempt(task_id)
        self._ready = max(self._ready, time.time() if ready_at is None else ready_at)
        applied = self._admit(epoch, task_id)
        if applied:
            if grad.numel() != self._sum.numel():
                raise ValueError(f"grad has {grad.numel()} values, the model has "
                                 f"{self._sum.numel()}")
            if seeds <= 0:
                raise ValueError(f"seeds must be > 0, got {seeds!r}")
            self._tasks.apply(task_id, consumer)
            self._received += 1
            self._sum.add_(grad.to(self._sum.dtype), alpha=float(seeds))
            self._seeds += float(seeds)
        else:
            self._tasks.reject(task_id)
            self._claimed -= 1
        self._maybe_step()
        nxt = None if claim_next is None else self.try_claim(consumer, claim_next, incarnation)
        self._notify()
        self._tasks.busy_s += time.perf_counter() - t0
        return StepReply(applied, self.version, nxt)

    def _admit(self, epoch: int, task_id: int) -> bool:
        """Whether a gradient of ``task_id`` may be applied: it belongs to this epoch and no
        gradient of that task was applied in it yet (the exactly-once rule of
        :meth:`TaskLedger.admit <fgnn.exchange.exactly_once.TaskLedger.admit>`; the hook a
        fault test breaks)."""
        return self._tasks.admit(epoch, task_id)

    def _maybe_step(self) -> None:
        """Take the step once every claimed slot delivered and no slot is left to claim."""
        if self._received == 0 or self._received < self._claimed:
            return
        if self._received < self.slots():
            return
        mean = self._sum / self._seeds
        offset = 0
        for p in self.params:
            n = p.numel()
            p.grad = mean[offset:offset + n].view_as(p).to(p.dtype).clone()
            offset += n
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.version += 1
        self._flat = flatten(self.params)
        self._tasks.steps += 1
        self._closed_ready, self._ready = self._ready, 0.0
        self._sum.zero_()
        self._seeds = 0.0
        self._claimed = self._received = 0

    # ------------------------------------------------------------------ reports
    def ledger(self) -> dict[str, Any]:
        """This epoch's exactly-once ledger, task id -> count: ``attempts`` (every gradient
        pushed for the task), ``applied`` (gradients applied: 1 when exactly-once holds),
        ``rejected`` (duplicates and stale epochs turned away); ``by`` (task id -> the trainer
        whose gradient was applied first), ``steps`` taken, ``busy_s`` (pushes) and ``claim_s``
        (time inside :meth:`claim`, waits included); see :meth:`TaskLedger.report
        <fgnn.exchange.exactly_once.TaskLedger.report>`."""
        return {**self._tasks.report(), "claim_s": self._wait_s}

    def state(self) -> dict[str, Any]:
        """Model and optimizer state dicts (CPU), for checkpoints and the final model: copies,
        which later steps leave as they are (an optimizer's ``state_dict`` holds the very
        tensors its steps update in place)."""
        return {"model": {k: v.detach().clone() for k, v in self.model.state_dict().items()},
                "optimizer": copy.deepcopy(self.optimizer.state_dict()),
                "version": self.version}


def _adam(params: list[nn.Parameter], lr: float, weight_decay: float,
          state: Optional[dict]) -> torch.optim.Adam:
    """Adam over ``params``, resumed from ``state`` when given (a copy the server owns)."""
    opt = torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    if state is not None:
        opt.load_state_dict(state)
    return opt
