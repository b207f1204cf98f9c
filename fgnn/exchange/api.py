"""The gradient exchange as the runtime drives it: one interface for both exchanges.

``runtime.exchange`` picks the actor behind it (``Runtime._start_exchange``, the one place that
picks): ``server``, the :class:`~fgnn.exchange.ps.ParameterServer` (the default: it holds the
model and takes the steps), or ``collective``, the :class:`~fgnn.exchange.step_ledger.StepLedger`
(it coordinates Trainers that all-reduce their gradients and hold the weights). Both keep the
exactly-once ledger with one :class:`~fgnn.exchange.exactly_once.TaskLedger`. The Trainers talk
to each exchange in its own terms (``claim``/``step`` or ``join``/``request``/``deliver``); the
driver only through :class:`GradientExchange`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Protocol, runtime_checkable

if TYPE_CHECKING:
    import torch

__all__ = ["GradientExchange"]


@runtime_checkable
class GradientExchange(Protocol):
    """What the driver asks of a gradient exchange, with the same meaning for both.

    Attributes:
        version: steps taken over the job (the open step's index).
    """

    version: int

    @property
    def epoch(self) -> int:
        """The epoch whose gradients count (-1 before :meth:`begin_epoch`)."""

    def begin_epoch(self, epoch: int, tasks: Optional[int] = None, group: int = 1) -> None:
        """Start ``epoch``: ``tasks`` tasks (None: unknown), ``group`` (R) task gradients
        averaged into each step; the exactly-once ledger starts again.

        Raises:
            ValueError: for ``group < 1`` or ``tasks < 0``.
        """

    def slots(self) -> int:
        """Slots of the open step: ``min(R, tasks not yet accepted)``."""

    def release(self, consumer: str) -> int:
        """``consumer`` died or stopped: its unused slots go back and its incarnation ends;
        returns the slots given back."""

    def ledger(self) -> dict[str, Any]:
        """This epoch's exactly-once ledger (:meth:`TaskLedger.report
        <fgnn.exchange.exactly_once.TaskLedger.report>` and the exchange's own timings)."""

    def weights(self) -> tuple[int, torch.Tensor]:
        """``(version, flat weights)``."""

    def state(self) -> dict[str, Any]:
        """``model`` and ``optimizer`` state dicts (CPU) and ``version``, for checkpoints."""
