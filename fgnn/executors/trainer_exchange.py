"""A Trainer's hook into the collective gradient exchange (``runtime.exchange="collective"``).

:class:`TrainerExchange` owns the Trainer's :class:`~fgnn.exchange.collective.ExchangeMember`
(its weights and Adam state stay on the Trainer's device), connects it to the job's
:class:`~fgnn.exchange.step_ledger.StepLedger` actor and its rendezvous store, and runs one
training step the collective way: take a slot (requested when the prefetch brought the task,
while the previous one computed; the ledger grants it in an event the member's reducer reads
from the store, most often the closing step's ``reduce``, so no Ray reply is waited for), wait
for the step's weights, forward/backward, deliver the task id to the ledger (the gradient stays
on the device until the step's all-reduce; its verdict comes in the step's ``reduce`` event).
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
from dataclasses import replace
from typing import Any, Callable, Optional

import torch
from torch import nn

from fgnn.exchange.store import connect_store
from fgnn.exchange.collective import ExchangeMember, ExchangeSpec
from fgnn.exchange.step_ledger import GROUP_TIMEOUT_S, Event
from fgnn.exchange.ps import step_wait
from fgnn.executors.task_record import TaskRecord

__all__ = ["TrainerExchange"]

#: The Trainer process's GIL switch interval under the collective exchange (seconds).
SWITCH_INTERVAL_S = 0.0005


class TrainerExchange:
    """The collective exchange of one Trainer actor.

    Args:
        spec: the job's :class:`~fgnn.exchange.collective.ExchangeSpec`.
        name: the Trainer's name.
        model: the Trainer's model on its device (the member steps its parameters in place).
        ack: ``ack(task_id, record)``: acknowledge a task whose step was applied.
        crash_after_apply: fault injection: exit right after the first applied step holding a
            gradient of this Trainer, before its acknowledgement (a restarted incarnation trains
            normally).
    """

    def __init__(self, spec: ExchangeSpec, name: str, model: nn.Module,
                 ack: Callable[[int, TaskRecord], Any], crash_after_apply: bool = False) -> None:
        import ray

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
        # the store's address and key secret come through Ray (authenticated), never the wire
        store = connect_store(ray.get(self.ledger.store_address.remote()), GROUP_TIMEOUT_S)
        self.member = ExchangeMember(
            name, model, spec.lr, spec.weight_decay, spec.optimizer_state,
            call=lambda method, *a: ray.get(getattr(self.ledger, method).remote(*a)),
            post=lambda method, *a: getattr(self.ledger, method).remote(*a),
            store=store, on_applied=self._applied,
            resolve=lambda reply: reply is not None and bool(ray.get(reply)), events=self._event,
            ring_dir=spec.ring_dir, ring_prefix=spec.ring_prefix, ring_rows=spec.ring_rows)
        self._store = store
        # Ray calls whose reply nobody waits for (deliveries, acknowledgements, progress
        # reports) leave the training and reducer threads' paths: one sender thread submits
        # them in order (a submission costs milliseconds on a loaded machine)
        self._outbox: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._send_loop, daemon=True, name=f"{name}-sender").start()
        self._after_grant = False  # the event read last was a ``grant``
        # tasks of this epoch a slot was requested for ("asked") or taken for ("taken"): one
        # request per task, whether the prefetch callback or the training thread comes first
        self._asks: dict[int, str] = {}
        self._asks_lock = threading.Lock()

    def begin(self, epoch: int) -> None:
        """Join the ledger's ``epoch`` (the runtime called ``begin_epoch`` on it); a no-op
        while this epoch's reducer runs."""
        import ray

        if self.member.active and self._epoch == epoch:
            return
        self.member.finish(GROUP_TIMEOUT_S)  # the last epoch's reducer reaches its end
        self._epoch, self._after_grant = epoch, False
        with self._asks_lock:
            self._asks.clear()
        handle = ray.get_runtime_context().current_actor
        self.member.begin(self.incarnation, handle, epoch)

    def _event(self, index: int, version: int) -> Optional[Event]:
        """The ledger's event ``index`` read from the store (a socket wait, no Ray call on the
        step's critical path); the progress report goes to the ledger without waiting.

        The wait is long (``GROUP_TIMEOUT_S``): every step, death and epoch end appends an
        event, and c10d logs a warning for every timed-out wait (it printed one every 5 s)."""
        if not self._after_grant:  # reports after a grant change nothing in the ledger
            self._outbox.put(lambda: self.ledger.report.remote(self.name, index, version))
        t0 = time.monotonic()
        try:  # a get waits for the key (the store's timeout): one round trip, not two
            ev = pickle.loads(self._store.get(f"fgnn-ev{index}"))
            self._after_grant = ev.kind == "grant"
            return ev
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
        """Deliver a task to the ledger (on the sender thread) and settle its gradient (its
        verdict comes in the step's ``reduce`` event; the reply serves a step reduced again
        after a death); a submission that fails settles it as not accepted (the reducer never
        waits on it), and the task, never acknowledged, goes back to the queue."""
        reply = None
        try:
            reply = self.ledger.deliver.remote(*args)
        finally:
            self.member.settle(step, grad, seeds, reply, ack, task=args[1], row=args[-1])

    def _applied(self, step: int, acks: list) -> None:
        """The reducer applied ``step``: acknowledge its tasks of this Trainer."""
        import ray

        if any(ok for _, ok in acks) and self._crash and not ray.get_runtime_context().was_current_actor_reconstructed:
            os._exit(1)  # fault injection: the gradient is applied, the ack never sent
        for (task_id, rec), ok in acks:  # on the sender thread: off the next task's path
            self._outbox.put(lambda t=task_id, r=replace(rec, applied=ok, deferred=False):
                             self._ack(t, r))

    def train(self, epoch: int, task_id: int, seeds: int, rec: TaskRecord,
              backward: Callable[[], torch.Tensor], stop: threading.Event,
              delay_s: float = 0.0, has_next: bool = False) -> Optional[TaskRecord]:
        """One task: claim, wait for the step's weights, ``backward()`` (returns the loss),
        deliver. Returns the task's record with ``deferred`` (acknowledged once its step is
        applied) or None when stopped before a slot.

        ``has_next``: unused (the next task's slot is requested when its fetch completes,
        see :meth:`prefetched`)."""
        t0 = time.perf_counter()
        got = self._claim(task_id, stop)
        if got is None:
            return None
        step, waited, read, parts = got
        t1 = time.perf_counter()
        if not self.member.wait_version(step, stop):
            return None
        t2 = time.perf_counter()
        tv = min(max(read, t0 + waited), t1)  # the wait for the weights began at the grant
        loss = backward()
        row, grad, ring_s = self.member.stage(
            step, [p.grad if p.grad is not None else torch.zeros_like(p)
                   for p in self.member.params], seeds, stop)
        if delay_s > 0:
            time.sleep(delay_s)
        t3 = time.perf_counter()
        # sync_s: the exchange as the training thread sees it: the wait for the slot's grant
        # less its wait for other Trainers' work (ps.step_wait), the wait for the previous
        # step's sum and Adam step, handing the delivery to the sender thread; step_wait_s:
        # waiting for other Trainers' work. By part: the claim until the grant was read (its
        # pieces in ``parts``), then the wait for the weights (``_parts``, from ``tv``); a wait
        # for a free row of the gradient ring (a member lagging steps behind) is exchange too
        self.member.pending(step)
        args = (epoch, task_id, self.name, seeds, self.incarnation, time.time(), row)
        t4 = time.perf_counter()
        rec = replace(rec, loss=float(loss.detach()), train_s=t4 - t0 - waited,
                      sync_s=(t1 - t0 - waited) + (t2 - t1) + (t4 - t3) + ring_s,
                      step_wait_s=waited, deferred=True,
                      exchange_parts={"x_claim_s": tv - t0 - waited, "x_deliver_s": t4 - t3,
                                      "x_ring_s": ring_s, **parts,
                                      **self._parts(step, tv, t2)})
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
        """The Trainer's prefetch of its next task completed (a done ``Future``): request its
        slot now, while the current task computes (:meth:`ExchangeMember.ask`; the grant comes
        in an event, most often the closing step's ``reduce``)."""
        if fetch.cancelled() or fetch.exception() is not None or fetch.result() is None:
            return
        self._ask(fetch.result().task_id, ahead=True)

    def _ask(self, task_id: int, ahead: bool) -> None:
        """Request a slot for ``task_id`` unless one was requested for it already: ahead (the
        prefetch callback) only for a task not seen yet and once the member is in a group; the
        training thread for a task with no request outstanding (a task leased again after it
        was taken counts anew). The callback may run after the training thread took the task
        up (a future's waiters wake before its callbacks run), so neither may ask twice."""
        with self._asks_lock:
            state = self._asks.get(task_id)
            if ahead and (state is not None or not self.member.ready.is_set()):
                return
            if not ahead and state == "asked":
                return
            self._asks[task_id] = "asked"
            self.member.ask()

    def _claim(self, task_id: int, stop: threading.Event
               ) -> Optional[tuple[int, float, float, dict[str, float]]]:
        """A slot for the task about to compute: ``(step, seconds waited for other Trainers'
        work, the moment (``perf_counter``) the grant was read, the exchange part of the wait
        until then by piece)``, or None when stopped first. A grant that came with a step's
        close is returned once that step is applied (:meth:`ExchangeMember.claim`).

        Slots are not tied to tasks: the member's oldest grant serves the oldest task; a
        request is sent here only when none was sent for this task (:meth:`prefetched`
        requests ahead), so the member asks once per task. The wait up
        to the moment the last gradient of the step the grant waited for was ready is a wait
        for other Trainers' work (:func:`~fgnn.exchange.ps.step_wait`); the rest (that
        gradient's delivery, the close, the event's way to this process) is exchange: its
        pieces until the grant was read are ``x_grant_s`` (until the ledger published the
        grant: the last delivery's way and the close, or the request's way) and ``x_gevent_s``
        (the event's way to the reducer)."""
        t0, w0 = time.perf_counter(), time.time()
        while not stop.is_set() and self.member.active:
            if self.member.ready.is_set():
                self._ask(task_id, ahead=False)
            got = self.member.claim(self.incarnation, 1.0, ask=False)
            if got is not None:
                with self._asks_lock:
                    self._asks[task_id] = "taken"
                w1, p1 = time.time(), time.perf_counter()
                waited = step_wait(got[1], w0, p1 - t0)
                cuts = [min(max(m, w0 + waited), w1) for m in (got[2], got[3])]
                return got[0], waited, p1 - (w1 - cuts[1]), {
                    "x_grant_s": cuts[0] - w0 - waited, "x_gevent_s": cuts[1] - cuts[0]}
            self._probe_ledger()  # a second without a grant: is the ledger there?
        return None

    def _probe_ledger(self) -> None:
        """No grant for a second: ask the ledger for anything. Nothing else on a task's path
        waits for its replies (the grants come through the store, which dies with it), so
        without this a dead ledger left every Trainer waiting until the stall guard; now
        Ray's death error of the ledger ends this ``run_epoch``, and the runtime names the
        service that died.

        Raises:
            ray.exceptions.RayActorError: the ledger actor is gone.
        """
        import ray

        try:
            ray.get(self.ledger.store_address.remote(), timeout=10.0)
        except ray.exceptions.GetTimeoutError:
            pass  # busy or hung: the stall guard decides

    def state(self) -> dict[str, Any]:
        """The member's state (after its reducer reached the epoch's end)."""
        self.member.finish(GROUP_TIMEOUT_S)
        return self.member.state()
