"""The global queue that links Samplers and Trainers (FGNN §5.2, Fig. 8).

Samplers put each sample into Ray's object store (the host-memory side of the queue) and enqueue
only its ``ObjectRef``; Trainers dequeue refs and pull the samples. The queue is bounded, so a
fast Sampler blocks in :meth:`GlobalQueue.put` (back-pressure) instead of filling host memory.

Why an actor of our own rather than ``ray.util.queue.Queue``: exactly-once accounting needs the
queue to know which consumer holds which task. Every :meth:`~GlobalQueue.get` leases the task to
its consumer; :meth:`~GlobalQueue.ack` completes it; when a Trainer dies the runtime calls
:meth:`~GlobalQueue.retire`, which puts its leased tasks back at the front. The epoch ends when
every task id has been acknowledged once (duplicates from a re-delivery are dropped). The class
is a plain asyncio class, made an actor only in :mod:`fgnn.runtime.driver`, and unit-testable
in-process with ``asyncio.run``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, deque
from dataclasses import dataclass, field, replace
from typing import Any, Optional

from fgnn.executors.task_record import TaskRecord

__all__ = ["QueueItem", "GlobalQueue", "MAX_FETCH_RETRIES"]

log = logging.getLogger(__name__)

#: Times one task's sample may fail to reach a Trainer in an epoch (:meth:`GlobalQueue.fail`)
#: before the epoch is aborted with the reason: a failure that repeats (a CUDA IPC receipt
#: refused on every try) must end the job with its cause, not loop until the stall guard.
MAX_FETCH_RETRIES = 3


@dataclass
class QueueItem:
    """One entry of the global queue.

    Attributes:
        epoch: epoch of the task.
        task_id: mini-batch task id within the epoch.
        ref: ``ObjectRef`` of the :class:`~fgnn.sampling.Sample` in the object store, or ``None``
            for a raw task that the consumer samples itself (time-sharing mode).
        seeds: the raw task's seed ids (time-sharing mode), else ``None``.
        producer: name of the Sampler that produced it.
        nbytes: approximate bytes of the sample (the C step copies them).
        enqueued_at: ``time.time()`` when it entered the queue.
    """

    epoch: int
    task_id: int
    ref: Any = None
    seeds: Any = None
    producer: str = ""
    nbytes: int = 0
    enqueued_at: float = field(default_factory=time.time)


class GlobalQueue:
    """A bounded FIFO of :class:`QueueItem` with per-consumer leases.

    Args:
        maxsize: bound on items waiting (back-pressure); >= 1.
    """

    def __init__(self, maxsize: int = 64) -> None:
        if int(maxsize) != maxsize or maxsize < 1:
            raise ValueError(f"maxsize must be an integer >= 1, got {maxsize!r}")
        self._maxsize = int(maxsize)
        self._items: deque[QueueItem] = deque()
        self._leases: dict[str, dict[int, QueueItem]] = {}
        self._gen: dict[str, int] = {}
        self._done: set[int] = set()
        self._log: list[TaskRecord] = []
        self._acks: Counter[int] = Counter()
        self._deliveries: Counter[int] = Counter()
        self._lost: list[int] = []
        self._fails: Counter[int] = Counter()
        self._retries: list[tuple[int, str, str]] = []
        self._failure: Optional[str] = None
        self._epoch = -1
        self._total = 0
        self._aborted: Optional[str] = None
        self._delivered = 0
        self._cond: Optional[asyncio.Condition] = None

    # ------------------------------------------------------------------ helpers
    def _condition(self) -> asyncio.Condition:
        if self._cond is None:  # created lazily inside the actor's event loop
            self._cond = asyncio.Condition()
        return self._cond

    async def _notify(self) -> None:
        cond = self._condition()
        async with cond:
            cond.notify_all()

    def _holds(self, task_id: int) -> bool:
        """Whether ``task_id`` of this epoch is already queued, leased or acknowledged."""
        return (task_id in self._done or any(i.task_id == task_id for i in self._items)
                or any(task_id in lease for lease in self._leases.values()))

    def _complete(self) -> bool:
        return self._aborted is not None or len(self._done) >= self._total

    # ------------------------------------------------------------------ epoch control
    async def begin_epoch(self, epoch: int, total: int, maxsize: Optional[int] = None) -> None:
        """Start ``epoch`` with ``total`` tasks; clears leftovers, leases and the log.

        Args:
            epoch: epoch number.
            total: tasks of the epoch (ids ``0 .. total - 1``).
            maxsize: new bound, e.g. a whole epoch in single-device mode (§7.9).
        """
        if total < 0:
            raise ValueError(f"total must be >= 0, got {total!r}")
        if maxsize is not None:
            if maxsize < 1:
                raise ValueError(f"maxsize must be >= 1, got {maxsize!r}")
            self._maxsize = int(maxsize)
        self._epoch, self._total = int(epoch), int(total)
        self._items.clear()
        self._leases = {c: {} for c in self._leases}
        self._done, self._log, self._lost = set(), [], []
        self._acks, self._deliveries, self._fails = Counter(), Counter(), Counter()
        self._retries, self._failure = [], None
        self._aborted, self._delivered = None, 0
        await self._notify()

    async def abort(self, reason: str) -> None:
        """End the epoch early: blocked ``put`` and ``get`` calls return at once."""
        self._aborted = str(reason)
        await self._notify()

    async def register(self, consumer: str) -> int:
        """Register (or re-register after a restart) ``consumer``; returns its generation."""
        self._gen[consumer] = self._gen.get(consumer, 0) + 1
        self._leases.setdefault(consumer, {})
        await self._notify()
        return self._gen[consumer]

    async def retire(self, consumer: str) -> list[int]:
        """Forget a dead (or finished) consumer: its leased tasks go back to the front.

        Stale ``get`` calls of the consumer return without taking an item. Returns the task ids
        put back.
        """
        self._gen[consumer] = self._gen.get(consumer, 0) + 1
        leased = self._leases.pop(consumer, {})
        back = [it for t, it in sorted(leased.items()) if t not in self._done]
        for it in reversed(back):
            self._items.appendleft(it)
        await self._notify()
        return [it.task_id for it in back]

    # ------------------------------------------------------------------ producer side
    async def put(self, item: QueueItem) -> tuple[bool, float]:
        """Enqueue ``item``, waiting while the queue is full (back-pressure).

        Returns:
            ``(enqueued, seconds waited for room)``; not enqueued when the epoch was aborted, the
            item belongs to another epoch, or its task is already queued, leased or done (a task
            re-issued because its Sampler died with the first put unconfirmed): it is dropped.
        """
        cond = self._condition()
        t0 = time.perf_counter()
        async with cond:
            await cond.wait_for(lambda: len(self._items) < self._maxsize or self._aborted)
            waited = time.perf_counter() - t0
            if (self._aborted is not None or item.epoch != self._epoch
                    or self._holds(item.task_id)):
                return False, waited
            item.enqueued_at = time.time()
            self._items.append(item)
            cond.notify_all()
        return True, waited

    async def put_tasks(self, epoch: int, task_ids: list[int]) -> int:
        """Enqueue raw tasks (no sample; the consumer samples them itself: time-sharing mode),
        ignoring the bound. Returns how many were enqueued."""
        if self._aborted is not None or epoch != self._epoch:
            return 0
        for t in task_ids:
            self._items.append(QueueItem(epoch, int(t), producer="scheduler"))
        await self._notify()
        return len(task_ids)

    # ------------------------------------------------------------------ consumer side
    async def get(self, consumer: str, generation: int = 0,
                  timeout: Optional[float] = None
                  ) -> tuple[str, Optional[QueueItem], float]:
        """Dequeue the next task for ``consumer`` and lease it.

        Args:
            consumer: the Trainer's name.
            generation: its generation from :meth:`register`.
            timeout: seconds to wait for an item; ``None`` waits for ever, ``<= 0`` only looks
                (a Trainer filling its look-ahead window must not wait on tasks it leases itself).

        Returns:
            ``(status, item, waited)``: status ``"item"``; ``"done"`` (item None) when every task
            of the epoch is acknowledged, the epoch was aborted or the caller's generation is
            stale; ``"timeout"``. ``waited`` is the seconds spent waiting for an item inside the
            queue (starvation), apart from the call's own overhead.
        """
        cond = self._condition()
        t0 = time.perf_counter()

        def ready() -> bool:
            return (bool(self._items) or self._complete()
                    or self._gen.get(consumer, 0) != generation)

        async with cond:
            if timeout is not None and timeout <= 0:
                if not ready():
                    return "timeout", None, 0.0
            else:
                try:
                    await asyncio.wait_for(cond.wait_for(ready), timeout)
                except asyncio.TimeoutError:
                    return "timeout", None, time.perf_counter() - t0
            waited = time.perf_counter() - t0
            while self._items and self._gen.get(consumer, 0) == generation:
                item = self._items.popleft()
                cond.notify_all()  # room for a blocked producer
                if item.task_id in self._done:
                    continue  # a duplicate of a finished task (re-delivery after a fault)
                self._leases.setdefault(consumer, {})[item.task_id] = item
                self._delivered += 1
                self._deliveries[item.task_id] += 1
                return "item", item, waited
            return "done", None, waited

    async def ack(self, consumer: str, task_id: int,
                  record: Optional[TaskRecord] = None) -> bool:
        """Complete ``task_id``: drop the lease, count it once, log ``record`` (the task's
        :class:`~fgnn.executors.task_record.TaskRecord`, stamped with ``task_id`` and
        ``consumer``; an empty one when None).

        Every call is counted (:meth:`ledger`), the first one only is logged.

        Returns:
            True the first time ``task_id`` is acknowledged in this epoch, else False.
        """
        self._acks[task_id] += 1
        self._leases.get(consumer, {}).pop(task_id, None)
        first = task_id not in self._done
        if first:
            self._done.add(task_id)
            self._log.append(replace(record if record is not None else TaskRecord(),
                                     task_id=int(task_id), consumer=consumer))
        await self._notify()
        return first

    async def fail(self, consumer: str, task_id: int, reason: str = "",
                   max_retries: int = MAX_FETCH_RETRIES) -> bool:
        """The consumer could not fetch the sample of ``task_id`` (its owner died, or a tensor
        transport refused it; ``reason`` says which): the task must be sampled again; the
        runtime collects it from :meth:`poll`, with the retry and its reason. The
        ``max_retries``-th failure of one task in an epoch aborts the epoch instead, and
        :meth:`poll` reports one line naming the cause (``failure``).

        Returns:
            True when the task is sampled again, False when this failure aborted the epoch.
        """
        self._leases.get(consumer, {}).pop(task_id, None)
        task_id = int(task_id)
        self._fails[task_id] += 1
        n = self._fails[task_id]
        why = reason or "no reason given"
        log.warning("task %d: %s could not fetch its sample (try %d of %d): %s", task_id,
                    consumer, n, max_retries, why)
        self._retries.append((task_id, consumer, why))
        if n >= max_retries:
            self._failure = (f"task {task_id}'s sample could not be received {n} times "
                             f"(last by {consumer}): {why}")
            await self.abort(self._failure)
            return False
        if task_id not in self._done and task_id not in self._lost:
            self._lost.append(task_id)
        await self._notify()
        return True

    # ------------------------------------------------------------------ observation
    def qsize(self) -> int:
        """M_r: tasks waiting in the queue."""
        return len(self._items)

    def ledger(self) -> dict[str, dict[int, int]]:
        """This epoch's counts per task id: ``deliveries`` (leases handed out by :meth:`get`)
        and ``acks`` (every :meth:`ack` call, duplicates included)."""
        return {"deliveries": dict(self._deliveries), "acks": dict(self._acks)}

    def poll(self, since: int = 0) -> dict[str, Any]:
        """State for the driver: depth, progress, new log records (:class:`TaskRecord`), lost
        tasks (taken), failed fetches since the last poll (``retries``: ``(task, consumer,
        reason)`` each, taken) and the epoch's ``failure`` (a task out of retries, else None).

        Args:
            since: number of log records the caller has already seen.
        """
        lost, self._lost = self._lost, []
        retries, self._retries = self._retries, []
        return {
            "depth": len(self._items),
            "done": len(self._done),
            "total": self._total,
            "records": self._log[since:],
            "lost": lost,
            "leased": {c: sorted(v) for c, v in self._leases.items() if v},
            "delivered": self._delivered,
            "aborted": self._aborted,
            "retries": retries,
            "failure": self._failure,
        }
