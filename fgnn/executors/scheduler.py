"""Flexible scheduling (FGNN §5.3): the allocation formula, the switching profit, task hand-out.

Three pieces, all plain Python so the controller logic is testable without Ray:

* :func:`allocate` -- the static split of N_g devices into N_s Samplers and N_t Trainers from the
  per-mini-batch times of a profiling epoch, ``K = T_t / T_s``, ``N_s = ceil(N_g / (K + 1))``,
  ``N_t = N_g - N_s``.
* :func:`profit` and :class:`StandbyPolicy` -- dynamic executor switching: a standby Trainer on a
  Sampler's device fetches a task only while ``P = M_r * T_t / N_t - T_t' > 0`` (``+inf`` when
  ``N_t = 0``), evaluated by each standby before each fetch.
* :class:`TaskScheduler` -- the global scheduler that hands mini-batch tasks (seed ids) to
  Samplers dynamically (§5.2, "assigns tasks dynamically across them in order to achieve load
  balance without synchronization"), takes failed tasks back and answers when a Sampler has
  finished its share of the epoch (the moment its standby may wake).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Iterable, Optional

import torch

__all__ = ["allocate", "profit", "trainer_seconds", "epoch_batches", "step_tasks", "StandbyPolicy", "TaskScheduler"]

#: Relative tolerance of the ceiling in :func:`allocate`: measured times are floats, and a ratio
#: that is an integer up to rounding (``0.3 / 0.1``) must not add a Sampler.
_CEIL_RTOL = 1e-9


def allocate(num_devices: int, t_sample: float, t_train: float) -> tuple[int, int, float]:
    """Split devices between Samplers and Trainers (FGNN §5.3).

    ``K = T_t / T_s`` and ``N_s = ceil(N_g / (K + 1))``, ``N_t = N_g - N_s``. The ceiling prefers
    Samplers because a Sampler can switch to a (standby) Trainer quickly, but not vice versa. The
    quotient is computed as ``N_g * T_s / (T_s + T_t)`` (algebraically equal) and ceiled with a
    1e-9 relative tolerance, so float noise in measured times never adds a Sampler.

    Args:
        num_devices: N_g >= 1, the devices (GPUs or Ray logical GPUs) of the job.
        t_sample: T_s > 0, seconds a Sampler spends per mini-batch (S + M + C).
        t_train: T_t >= 0, seconds a Trainer spends per mini-batch (Extract + Train).

    Returns:
        ``(N_s, N_t, K)``; ``N_t`` is 0 when ``N_g == 1`` (the single-device case of §7.9).

    Raises:
        ValueError: on ``num_devices < 1``, a non-positive ``t_sample``, a negative ``t_train`` or a
            non-finite time.
    """
    if isinstance(num_devices, bool) or int(num_devices) != num_devices or num_devices < 1:
        raise ValueError(f"num_devices must be an integer >= 1, got {num_devices!r}")
    if not math.isfinite(t_sample) or t_sample <= 0:
        raise ValueError(f"t_sample must be a finite time > 0, got {t_sample!r}")
    if not math.isfinite(t_train) or t_train < 0:
        raise ValueError(f"t_train must be a finite time >= 0, got {t_train!r}")
    n_g = int(num_devices)
    k = t_train / t_sample
    share = n_g * t_sample / (t_sample + t_train)  # = N_g / (K + 1)
    n_s = math.ceil(share - _CEIL_RTOL * max(1.0, share))
    n_s = min(max(n_s, 1), n_g)
    return n_s, n_g - n_s, k


def trainer_seconds(extract_s: float, train_s: float, batches: int) -> float:
    """T_t of FGNN §5.3, the one definition both :func:`allocate` and :func:`profit` take: a
    Trainer's seconds per mini-batch, Extract + Train, from ``batches`` mini-batches' sums
    (0 batches: 0)."""
    return (float(extract_s) + float(train_s)) / max(1, int(batches))


def profit(remaining: int, t_train: float, num_trainers: int, t_standby: float) -> float:
    """The profit of waking a standby Trainer for one more task (FGNN §5.3).

    ``P = M_r * T_t / N_t - T_t'`` if ``N_t > 0``, else ``+inf``: whether the standby finishes one
    task before the ``N_t`` normal Trainers finish the ``M_r`` tasks left in the global queue.

    Args:
        remaining: M_r >= 0, tasks waiting in the global queue.
        t_train: T_t >= 0, a normal Trainer's seconds per mini-batch.
        num_trainers: N_t >= 0, normal Trainers working.
        t_standby: T_t' >= 0, the standby Trainer's seconds per mini-batch (smaller cache).

    Returns:
        P in seconds; ``math.inf`` when ``num_trainers == 0``.

    Raises:
        ValueError: on a negative argument or a non-finite time.
    """
    if int(remaining) != remaining or remaining < 0:
        raise ValueError(f"remaining must be an integer >= 0, got {remaining!r}")
    if int(num_trainers) != num_trainers or num_trainers < 0:
        raise ValueError(f"num_trainers must be an integer >= 0, got {num_trainers!r}")
    for name, value in (("t_train", t_train), ("t_standby", t_standby)):
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"{name} must be a finite time >= 0, got {value!r}")
    if num_trainers == 0:
        return math.inf
    return remaining * t_train / num_trainers - t_standby


@dataclass
class StandbyPolicy:
    """What a standby Trainer needs to evaluate :func:`profit` before each fetch.

    Attributes:
        t_train: T_t of the normal Trainers (seconds per mini-batch, measured by the runtime).
        num_trainers: N_t, normal Trainers alive.
        t_standby: the initial estimate of T_t'; replaced by the standby's own running mean once
            it has trained a mini-batch.
    """

    t_train: float
    num_trainers: int
    t_standby: float

    def __post_init__(self) -> None:
        profit(0, self.t_train, self.num_trainers, self.t_standby)  # validates the fields

    def should_fetch(self, remaining: int, measured_t_standby: Optional[float] = None) -> bool:
        """``P > 0`` for ``M_r = remaining``, with T_t' the measured value when known."""
        t_s = self.t_standby if measured_t_standby is None else measured_t_standby
        return profit(remaining, self.t_train, self.num_trainers, t_s) > 0


def step_tasks(mode: str, devices: int) -> int:
    """R, the tasks each mini-batch is cut into (one per device; 1 in ``single`` mode): the
    parameter server averages their gradients into one step (:mod:`fgnn.exchange.ps`)."""
    return 1 if mode == "single" else max(1, int(devices))


def epoch_batches(train_idx: torch.Tensor, batch_size: int, seed: int, epoch: int,
                  parts: int = 1) -> list[torch.Tensor]:
    """The epoch's tasks: a seeded shuffle of ``train_idx`` cut into mini-batches of
    ``batch_size``, each cut again into ``parts`` near-equal tasks (empty ones dropped).

    Task ``i`` of an epoch is ``tasks[i]``; the same ``(seed, epoch, parts)`` always gives the same
    tasks, so a task re-issued after a fault carries the same seeds. The tasks of mini-batch ``k``
    are ``tasks[k * parts:(k + 1) * parts]`` (while ``batch_size >= parts``): the parameter server
    averages ``parts`` task gradients into one step (:mod:`fgnn.exchange.ps`).

    Raises:
        ValueError: on ``batch_size < 1`` or ``parts < 1``.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size!r}")
    if parts < 1:
        raise ValueError(f"parts must be >= 1, got {parts!r}")
    g = torch.Generator().manual_seed(int(seed) * 1_000_003 + int(epoch))
    perm = train_idx[torch.randperm(train_idx.numel(), generator=g)]
    batches = list(torch.split(perm, batch_size))
    if parts == 1:
        return batches
    return [t for b in batches for t in torch.tensor_split(b, parts) if t.numel() > 0]


class TaskScheduler:
    """Hands an epoch's mini-batch tasks to Samplers dynamically (FGNN §5.2).

    A Sampler asks for the next task when it has room (:meth:`next_task`); tasks are served from
    one FIFO, so faster Samplers take more. A task whose Sampler failed goes back to the front
    (:meth:`task_failed`); a task whose sample was lost after it was queued returns the same way.

    Args:
        num_tasks: mini-batch tasks in the epoch, ids ``0 .. num_tasks - 1``.
    """

    def __init__(self, num_tasks: int) -> None:
        if num_tasks < 0:
            raise ValueError(f"num_tasks must be >= 0, got {num_tasks!r}")
        self.num_tasks = int(num_tasks)
        self._pending: deque[int] = deque(range(self.num_tasks))
        self._in_flight: dict[int, int] = {}  # task id -> sampler index
        self._issued = 0

    def next_task(self, sampler: int) -> Optional[int]:
        """The next task for ``sampler``, or ``None`` when none is pending."""
        if not self._pending:
            return None
        task = self._pending.popleft()
        self._in_flight[task] = sampler
        self._issued += 1
        return task

    def task_sampled(self, task: int) -> None:
        """The task's sample reached the global queue."""
        self._in_flight.pop(task, None)

    def task_failed(self, task: int) -> None:
        """Put ``task`` back at the front: its Sampler died or its sample was lost."""
        self._in_flight.pop(task, None)
        if task not in self._pending:
            self._pending.appendleft(task)

    def sampler_failed(self, sampler: int) -> list[int]:
        """Return every in-flight task of ``sampler`` to the front; the ids returned."""
        lost = [t for t, s in self._in_flight.items() if s == sampler]
        for t in sorted(lost, reverse=True):
            self.task_failed(t)
        return sorted(lost)

    def in_flight(self, sampler: Optional[int] = None) -> list[int]:
        """Tasks handed out and not yet sampled (of one sampler, or all)."""
        return sorted(t for t, s in self._in_flight.items() if sampler is None or s == sampler)

    @property
    def pending(self) -> int:
        """Tasks not handed out yet."""
        return len(self._pending)

    @property
    def issued(self) -> int:
        """Hand-outs so far, re-issues included."""
        return self._issued

    def sampler_finished(self, sampler: int) -> bool:
        """True when nothing is pending and ``sampler`` has no task in flight (§5.3: its share of
        the epoch is done, so its standby Trainer may wake)."""
        return not self._pending and not any(s == sampler for s in self._in_flight.values())

    def extend(self, tasks: Iterable[int]) -> None:
        """Re-issue ``tasks`` (lost samples) at the front, keeping their order."""
        for t in sorted(set(tasks), reverse=True):
            self.task_failed(t)
