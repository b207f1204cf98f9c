"""The exactly-once ledger of an epoch's tasks, kept by both gradient exchanges.

A gradient exchange (the parameter server, :mod:`fgnn.exchange.ps`, or the collective's
coordinator, :mod:`fgnn.exchange.step_ledger`) owns one :class:`TaskLedger` and asks it three
things: whether a caller is a dead incarnation of its consumer (:meth:`TaskLedger.stale`), whether
a task's gradient may count (:meth:`TaskLedger.admit`: the exactly-once rule), and how many slots
the open step has (:meth:`TaskLedger.slots`). It tells the ledger every gradient pushed
(:meth:`~TaskLedger.attempt`), applied (:meth:`~TaskLedger.apply`), turned away
(:meth:`~TaskLedger.reject`) and, with the collective, applied but lost with its member before
the step was reduced (:meth:`~TaskLedger.revoke`). The counts are kept apart from the decision,
so a broken rule shows in them: ``applied > 1`` for a task means its gradient counted twice.
:meth:`~TaskLedger.report` is the ``ledger()`` both exchanges answer (the report's ledger is
folded from it by :func:`fgnn.runtime.ledger.epoch_ledger`).

Pure Python, no torch: the ledger sits inside whichever actor owns it.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Optional

__all__ = ["TaskLedger"]


class TaskLedger:
    """One epoch's exactly-once ledger: the epoch's plan, the counts per task, the enrolment.

    The counts (``attempts``, ``applied``, ``rejected``, ``by``, :attr:`accepted`, :attr:`steps`,
    :attr:`busy_s`) start again with each :meth:`reset`; the enrolment (the incarnation of each
    consumer whose calls count) is kept across epochs.

    Attributes:
        epoch: the epoch whose gradients may count (-1 before the first :meth:`reset`).
        tasks: the epoch's number of tasks, or None (unknown: every step has ``group`` slots).
        group: R, the task gradients averaged into one step.
        accepted: tasks whose gradient counts this epoch (applied and not revoked).
        steps: steps the owner took this epoch (the owner counts them).
        busy_s: seconds the owner spent on deliveries this epoch (the owner adds them).
    """

    def __init__(self) -> None:
        self._live: dict[str, int] = {}
        self.reset(-1)

    def reset(self, epoch: int, tasks: Optional[int] = None, group: int = 1) -> None:
        """Start the ledger of ``epoch``: every count back to zero; the enrolment stays.

        Args:
            epoch: the epoch whose gradients count from now on.
            tasks: the epoch's number of tasks; None: unknown.
            group: R, the task gradients averaged into one step.

        Raises:
            ValueError: for ``group < 1`` or ``tasks < 0`` (nothing is reset then).
        """
        if group < 1:
            raise ValueError(f"group must be >= 1, got {group!r}")
        if tasks is not None and tasks < 0:
            raise ValueError(f"tasks must be >= 0, got {tasks!r}")
        self.epoch, self.group = int(epoch), int(group)
        self.tasks = None if tasks is None else int(tasks)
        self._attempts: Counter[int] = Counter()
        self._applied: Counter[int] = Counter()
        self._rejected: Counter[int] = Counter()
        self._by: dict[int, str] = {}
        self.accepted = 0
        self.steps = 0
        self.busy_s = 0.0

    # ------------------------------------------------------------------ enrolment
    def enroll(self, consumer: str, incarnation: int) -> None:
        """``consumer``'s calls count only from ``incarnation`` on: one still in flight from an
        earlier (dead) incarnation is :meth:`stale`."""
        self._live[consumer] = int(incarnation)

    def retire(self, consumer: str) -> None:
        """``consumer`` died or stopped: every incarnation of it is stale until it enrolls
        again."""
        self._live.pop(consumer, None)

    def enrolled(self, consumer: str) -> bool:
        """Whether some incarnation of ``consumer`` is enrolled."""
        return consumer in self._live

    def incarnation(self, consumer: str) -> Optional[int]:
        """The enrolled incarnation of ``consumer``, or None."""
        return self._live.get(consumer)

    def stale(self, consumer: str, incarnation: Optional[int]) -> bool:
        """Whether a call of ``consumer``'s ``incarnation`` must not count: it is not the
        enrolled one (None is not checked)."""
        return incarnation is not None and self._live.get(consumer) != incarnation

    # ------------------------------------------------------------------ the rule and the counts
    def admit(self, epoch: int, task_id: int) -> bool:
        """The exactly-once rule: a gradient of ``task_id`` may count when it belongs to this
        epoch and no gradient of that task counts yet. Decides only; counts nothing."""
        return epoch == self.epoch and self._applied[task_id] == 0

    def attempt(self, task_id: int) -> None:
        """Count a gradient pushed for ``task_id``, admitted or not."""
        self._attempts[task_id] += 1

    def apply(self, task_id: int, consumer: str) -> None:
        """Count ``task_id``'s gradient from ``consumer`` as applied (the first consumer whose
        gradient counted is the task's ``by``)."""
        self._applied[task_id] += 1
        self._by.setdefault(task_id, consumer)
        self.accepted += 1

    def reject(self, task_id: int) -> None:
        """Count a gradient of ``task_id`` turned away (a duplicate, another epoch, a stale
        incarnation)."""
        self._rejected[task_id] += 1

    def revoke(self, task_id: int) -> None:
        """Undo one :meth:`apply` of ``task_id``: its gradient was lost before its step was
        reduced, so the task must count again."""
        self._applied[task_id] -= 1
        self._by.pop(task_id, None)
        self.accepted -= 1

    # ------------------------------------------------------------------ slots and the end
    def slots(self, in_step: int) -> int:
        """Slots of the open step, ``min(group, tasks not yet accepted)`` counted from the
        step's start: ``in_step`` of the accepted tasks were accepted into the open step."""
        if self.tasks is None:
            return self.group
        return max(0, min(self.group, self.tasks - self.accepted + in_step))

    def complete(self) -> bool:
        """Whether the epoch's task count is known and every task is accepted."""
        return self.tasks is not None and self.accepted >= self.tasks

    def report(self) -> dict[str, Any]:
        """The exactly-once part of an exchange's ``ledger()``, task id -> count: ``epoch``;
        ``attempts`` (every gradient pushed for the task), ``applied`` (gradients counted: 1
        when exactly-once holds; tasks whose count went back to 0 are left out), ``rejected``
        (gradients turned away); ``by`` (task id -> the consumer whose gradient counted first);
        ``steps`` and ``busy_s``."""
        return {"epoch": self.epoch, "attempts": dict(self._attempts),
                "applied": {t: n for t, n in self._applied.items() if n},
                "rejected": dict(self._rejected), "by": dict(self._by), "steps": self.steps,
                "busy_s": self.busy_s}
