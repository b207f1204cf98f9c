"""A Trainer's hook into the collective gradient exchange (``runtime.exchange="collective"``).

:class:`TrainerExchange` owns the Trainer's :class:`~fgnn.executors.collective.ExchangeMember`
(its weights and Adam state stay on the Trainer's device), connects it to the job's
:class:`~fgnn.executors.collective.StepLedger` actor and its rendezvous store, and runs one
training step the collective way: claim a slot (sent when the prefetch brought the task, while
the previous one computed), wait for the step's weights, forward/backward, deliver the task id to
the ledger (the gradient stays on the device until the step's all-reduce).
A task is acknowledged to the queue only once the step holding its gradient is applied, so a
Trainer that dies before that leaves the task leased: it goes back to the queue and its lost
gradient does not count.
"""

from __future__ import annotations

import logging
import os
import pickle
import queue
import sys
import threading
import time
from typing import Any, Callable, Optional

import torch
from torch import nn

from fgnn.executors.collective import GROUP_TIMEOUT_S, Event, ExchangeMember, ExchangeSpec
from fgnn.executors.ps import flatten, step_wait

__all__ = ["TrainerExchange"]

#: The Trainer process's GIL switch interval under the collective exchange (seconds).
SWITCH_INTERVAL_S = 0.0005


class TrainerExchange:
    """The collective exchange of one Trainer actor.

    Args:
        spec: the job's :class:`~fgnn.executors.collective.ExchangeSpec`.
        name: the Trainer's name.
        model: the Trainer's model on its device (the member steps its parameters in place).
        ack: ``ack(task_id, record)``: acknowledge a task whose step was applied.
        crash_after_apply: fault injection: exit right after the first applied step holding a
            gradient of this Trainer, before its acknowledgement (a restarted incarnation trains
            normally).
    """

    def __init__(self, spec: ExchangeSpec, name: str, model: nn.Module,
                 ack: Callable[[int, dict], Any], crash_after_apply: bool = False) -> None:
        import ray
        import torch.distributed as dist

        self.spec, self.name, self.ledger = spec, name, spec.ledger
        # the step's path crosses threads (reducer -> training thread, training -> sender):
        # each handoff waits for the GIL, up to the switch interval (5 ms by default) while
        # another thread of this process runs Python
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        self._ack, self._crash = ack, bool(crash_after_apply)
        self._epoch: Optional[int] = None
        # a restarted actor is a new incarnation: what its dead predecessor claimed is void
        self.incarnation = time.time_ns() % (1 << 62)
        # a restarted process tells the ledger at once: the member it replaces is gone
        self.ledger.hello.remote(name, self.incarnation)
        host, port = ray.get(self.ledger.store_address.remote())
        store = dist.TCPStore(host, port, is_master=False,
                              timeout=_timedelta(GROUP_TIMEOUT_S))
        self.member = ExchangeMember(
            name, model, spec.lr, spec.weight_decay, spec.optimizer_state,
            call=lambda method, *a: ray.get(getattr(self.ledger, method).remote(*a)),
            store=store, on_applied=self._applied,
            resolve=lambda reply: reply is not None and ray.get(reply)[0], events=self._event)
        self._store = store
        # Ray calls whose reply nobody waits for (deliveries, acknowledgements, progress
        # reports) leave the training and reducer threads' paths: one sender thread submits
        # them in order (a submission took 15-20 ms on the path at a load of 50 on 2 cores)
        self._outbox: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._send_loop, daemon=True, name=f"{name}-sender").start()
        self._next: Any = None  # a claim sent while the last task computed, for this one
        self._lock = threading.Lock()
        self._claiming = False  # the training thread waits in a claim of its own

    def begin(self, epoch: int) -> None:
        """Join the ledger's ``epoch`` (the runtime called ``begin_epoch`` on it); a no-op
        while this epoch's reducer runs."""
        import ray

        if self.member.active and self._epoch == epoch:
            return
        self.member.finish(GROUP_TIMEOUT_S)  # the last epoch's reducer reaches its end
        self._epoch, self._next = epoch, None
        handle = ray.get_runtime_context().current_actor
        self.member.begin(self.incarnation, handle)

    def _event(self, index: int, version: int) -> Optional[Event]:
        """The ledger's event ``index`` read from the store (a socket wait, no Ray call on the
        step's critical path); the progress report goes to the ledger without waiting.

        The wait is long (``GROUP_TIMEOUT_S``): every step, death and epoch end appends an
        event, and c10d logs a warning for every timed-out wait (it printed one every 5 s)."""
        self._outbox.put(lambda: self.ledger.report.remote(self.name, index, version))
        t0 = time.monotonic()
        try:  # a get waits for the key (the store's timeout): one round trip, not two
            return pickle.loads(self._store.get(f"fgnn-ev{index}"))
        except RuntimeError:  # not there yet (a timeout), or the store is gone (the ledger
            if time.monotonic() - t0 < 1.0:  # died): no busy loop until the job stops
                time.sleep(1.0)
            return None

    def _send_loop(self) -> None:
        """Submit the Ray calls handed to :attr:`_outbox`, in order, for the process's life."""
        while True:
            job = self._outbox.get()
            try:
                job()
            except Exception:  # noqa: BLE001 - the thread must live on; the call is lost,
                logging.getLogger(__name__).exception("%s: a Ray call failed", self.name)

    def _deliver(self, step: int, grad: torch.Tensor, seeds: int, args: tuple,
                 ack: Any) -> None:
        """Deliver a task to the ledger (on the sender thread) and settle its gradient with the
        reply; a submission that fails settles it as not accepted (the reducer never waits on
        it), and the task, never acknowledged, goes back to the queue."""
        reply = None
        try:
            reply = self.ledger.deliver_and_claim.remote(*args)
        finally:
            self.member.settle(step, grad, seeds, reply, ack)

    def _applied(self, step: int, acks: list) -> None:
        """The reducer applied ``step``: acknowledge its tasks of this Trainer."""
        import ray

        if any(ok for _, ok in acks) and self._crash and not ray.get_runtime_context().was_current_actor_reconstructed:
            os._exit(1)  # fault injection: the gradient is applied, the ack never sent
        for (task_id, rec), ok in acks:  # on the sender thread: off the next task's path
            self._outbox.put(lambda t=task_id, r={**rec, "applied": ok, "deferred": False}:
                             self._ack(t, r))

    def train(self, epoch: int, task_id: int, seeds: int, rec: dict[str, Any],
              backward: Callable[[], torch.Tensor], stop: threading.Event,
              delay_s: float = 0.0, has_next: bool = False) -> Optional[dict[str, Any]]:
        """One task: claim, wait for the step's weights, ``backward()`` (returns the loss),
        deliver. Returns the task's record with ``deferred`` (acknowledged once its step is
        applied) or None when stopped before a slot.

        ``has_next``: unused (the next task's slot is claimed when its fetch completes, see
        :meth:`prefetched`)."""
        t0 = time.perf_counter()
        got = self._claim(stop)
        if got is None:
            return None
        step, waited, old = got
        t1 = time.perf_counter()
        if not self.member.wait_version(step, stop):
            return None
        t2 = time.perf_counter()
        loss = backward()
        grad = flatten([p.grad if p.grad is not None else torch.zeros_like(p)
                        for p in self.member.params])
        if delay_s > 0:
            time.sleep(delay_s)
        t3 = time.perf_counter()
        rec = dict(rec)
        # sync_s: the exchange as the training thread sees it: the claim's reply less its wait
        # for other Trainers' work (ps.step_wait), the wait for the previous step's sum and
        # Adam step, sending the delivery (its reply is read by the reducer); step_wait_s:
        # waiting for other Trainers' work
        self.member.pending(step)
        args = (epoch, task_id, self.name, seeds, self.incarnation, False, time.time())
        t4 = time.perf_counter()
        rec.update(loss=float(loss.detach()), train_s=t4 - t0 - waited,
                   sync_s=(t1 - t0 - waited) + (t2 - t1) + (t4 - t3), step_wait_s=waited,
                   deferred=True, x_claim_s=t1 - t0 - waited, x_deliver_s=t4 - t3,
                   x_oldwait_s=old, **self._parts(step, t1, t2))
        self._outbox.put(lambda: self._deliver(step, grad, seeds, args, (task_id, rec)))
        return rec

    def _parts(self, step: int, t1: float, t2: float) -> dict[str, float]:
        """The training thread's wait for the weights of ``step`` (from ``t1`` to ``t2``), cut
        by the reducer's times for step ``step - 1``: the close event's arrival, the
        preparation of the sum, the sum over the group, Adam, and the thread's wake-up after it."""
        marks = self.member.timeline.get(step - 1)
        if marks is None or t2 <= t1:
            return {"x_version_s": max(t2 - t1, 0.0)}
        cuts = [min(max(m, t1), t2) for m in marks]
        names = ("x_event_s", "x_prep_s", "x_gather_s", "x_adam_s")
        out = {n: b - a for n, a, b in zip(names, [t1] + cuts[:-1], cuts)}
        out.update(x_wake_s=t2 - cuts[-1], x_version_s=t2 - t1)
        return out

    def prefetched(self, fetch: Any) -> None:
        """The Trainer's prefetch of its next task completed (a done ``Future``): claim a slot
        now, while the current task computes, so the claim's round trip is off the next task's
        path (the reply is read when it starts). Not while the training thread waits in a
        claim of its own: it would take this one."""
        if fetch.cancelled() or fetch.exception() is not None or fetch.result() is None:
            return
        with self._lock:
            if self._next is None and not self._claiming and self.member.ready.is_set():
                self._next = self.ledger.claim.remote(self.name, 1.0, self.incarnation)

    def _claim(self, stop: threading.Event) -> Optional[tuple[int, float, float]]:
        """A slot for the task about to compute: ``(step, seconds waited for other Trainers'
        work, the same by the rule before 2026-11-25)``, or None when stopped first.

        Slots are not tied to tasks: the Trainer's first claim that is granted serves its
        oldest task. A claim sent ahead (:meth:`prefetched`) is read first; while it is
        outstanding the thread sends none of its own, so a slot granted to the task behind
        never leaves this one without one (that deadlocked a step: the last slot held for a
        task that could not start before this one). Only the part of an ahead claim's wait
        that this thread saw, up to the moment the closing step's last gradient was ready,
        counts as a wait for other Trainers' work (:func:`~fgnn.executors.ps.step_wait`), and
        so does every attempt that found no free slot within the ledger's wait (the ledger
        waited for one all along)."""
        import ray

        lost = 0.0  # attempts that found no slot
        while not stop.is_set() and self.member.active:
            with self._lock:
                ahead, self._next = self._next, None
                self._claiming = ahead is None
            t0, w0 = time.perf_counter(), time.time()
            try:
                got = (self.member.claim(self.incarnation, 1.0) if ahead is None
                       else ray.get(ahead))
            finally:
                with self._lock:
                    self._claiming = False
            seen = time.perf_counter() - t0
            if got is not None:  # before 2026-11-25 the ledger's whole wait was a step wait
                old = got[1] if ahead is None else min(got[1], seen)
                return got[0], lost + step_wait(got[2], w0, seen), lost + old
            lost += seen
        return None

    def state(self) -> dict[str, Any]:
        """The member's state (after its reducer reached the epoch's end)."""
        self.member.finish(GROUP_TIMEOUT_S)
        return self.member.state()


def _timedelta(seconds: float) -> Any:
    import datetime

    return datetime.timedelta(seconds=seconds)
