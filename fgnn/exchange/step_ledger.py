"""The collective exchange's coordinator: slots, the exactly-once ledger, membership and the
event log every member replays (:class:`StepLedger`; the members' side and the design are in
:mod:`fgnn.exchange.collective`).

No tensor passes through it: it hands out the R slots of the open step to the members'
requests, turns a duplicate task away, closes a step once every slot delivered, and appends
``form``, ``reduce``, ``grant`` and ``end`` events (:class:`Event`) that the members read from the
rendezvous store it serves.
"""

from __future__ import annotations

import dataclasses
import pickle
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

from fgnn.exchange.store import StoreAddress
from fgnn.exchange.store import serve_store as serve
from fgnn.exchange.exactly_once import TaskLedger

__all__ = ["GROUP_TIMEOUT_S", "Event", "StepLedger"]

#: Seconds a collective call waits for its peers before it fails (a peer died or hangs).
GROUP_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Event:
    """One entry of the ledger's event log, replayed in order by every member it names.

    Attributes:
        kind: ``"form"``, ``"reduce"``, ``"grant"`` or ``"end"``.
        generation: the group generation the event runs in (its store prefix).
        members: the group's members in rank order (rank 0 first).
        step: the step to reduce (``reduce``); for ``form``, the version every member must
            reach after the state broadcast: steps from rank 0's version up to it are reduced
            again with the survivors' retained gradients; for ``grant``, the step its slots
            are in.
        grants: slots granted to the members' requests (:meth:`StepLedger.request`), one
            ``(member, incarnation, ready_at)`` each: in the ``reduce`` of step ``s`` slots of
            step ``s + 1``, in a ``grant`` slots of ``step``. ``ready_at``: the wall time the
            last gradient of the step the request waited for was ready (None: no wait), see
            :func:`~fgnn.exchange.ps.step_wait`.
        tasks: ``reduce``: the step's accepted deliveries, ``(member, task id, row)`` each (a
            member counts exactly these of its gradients, without waiting for the replies;
            ``row``: the row of the member's :class:`~fgnn.exchange.gradring.GradientRing`
            holding the gradient, or None).
        rings: ``form``: the members' gradient ring files in rank order when every member has
            one on one host (the group then sums from shared memory), else empty (gloo).
        at: the wall time the ledger appended it.
    """

    kind: str
    generation: int
    members: tuple[str, ...]
    step: int = 0
    grants: tuple[tuple[str, int, Optional[float]], ...] = ()
    tasks: tuple[tuple[str, int, Optional[int]], ...] = ()
    rings: tuple[str, ...] = ()
    at: float = 0.0


class StepLedger:
    """The coordinator of the collective exchange: slots, exactly-once ledger, membership.

    Thread-safe: on Ray it runs as a threaded actor (``max_concurrency``), in tests it is called
    from threads directly. Methods that wait take a ``timeout_s`` and return None when it ends.

    Args:
        serve_store: start a ``TCPStore`` server the members rendezvous through
            (:meth:`store_address`); False in-process, where the members share a ``HashStore``.
        alive: ``alive(member)``: False once that member's process is gone (the liveness probe
            :meth:`failed` runs); None: the Ray actor of that name still exists (with
            ``serve_store``), else every member counts as alive.
        store_host: the address the store server binds to
            (:func:`~fgnn.exchange.store.serve_store`): ``127.0.0.1`` when every member runs
            on the ledger's node; None: the node's own address. Either way its keys lie under
            a random secret the members get from :meth:`store_address`.
    """

    def __init__(self, serve_store: bool = False,
                 alive: Optional[Callable[[str], bool]] = None,
                 store_host: Optional[str] = None) -> None:
        self._cv = threading.Condition()
        self._alive = alive or (_ray_actor_exists if serve_store else (lambda name: True))
        self._watching: set[int] = set()
        self.version = 0  # steps closed over the job (the open step's index)
        self.generation = 0
        self._tasks = TaskLedger()  # the exactly-once ledger and the members' incarnations
        self._log: list[Event] = []
        self._members: list[str] = []
        self._at: dict[str, tuple[int, int]] = {}  # member -> (events processed, version)
        self._handles: dict[str, Any] = {}
        self._rings: dict[str, Optional[tuple[str, str]]] = {}  # member -> (host, ring file)
        self._snapshot: Optional[dict[str, Any]] = None
        self._store: Any = None
        self._address: Optional[StoreAddress] = None
        if serve_store:
            self._store, self._address = serve(store_host)
        self._reset_step()

    @property
    def epoch(self) -> int:
        """The epoch whose deliveries count (-1 before :meth:`begin_epoch`)."""
        return self._tasks.epoch

    def _reset_step(self) -> None:
        """Clear the open step, the queued requests, the closed steps not yet settled and the
        membership changes (with each epoch)."""
        self._holders: Counter[str] = Counter()
        self._open: dict[int, str] = {}  # task -> consumer, delivered in the open step
        # (consumer, task, ring row) accepted, in order
        self._delivered: list[tuple[str, int, Optional[int]]] = []
        self._waiting: list[tuple[str, Optional[int]]] = []  # requests without a slot yet
        self._closed: dict[int, dict[int, str]] = {}  # step -> its tasks, until settled
        self._joining: list[str] = []
        self._expect: set[str] = set()
        self._dead: set[str] = set()
        self._claimed = self._received = 0
        # wall time the open step's last gradient was ready (its Trainer's clock), and that of
        # the step closed last: a request that waited for a close waited for other Trainers'
        # work only until then (:func:`~fgnn.exchange.ps.step_wait`)
        self._ready, self._closed_ready = 0.0, 0.0
        self._ended = False

    def _append(self, ev: Event) -> None:
        """Add ``ev`` to the log; with a served store also under the key ``fgnn-ev<index>``,
        where members wait for it on a socket instead of a Ray call."""
        ev = dataclasses.replace(ev, at=time.time())
        self._log.append(ev)
        if self._store is not None:
            self._store.set(f"fgnn-ev{len(self._log) - 1}", pickle.dumps(ev))

    def report(self, consumer: str, index: int, version: int) -> None:
        """A member's reducer processed the events before ``index`` and holds ``version``
        steps (what :meth:`next_event` records, for members reading events from the store)."""
        with self._cv:
            self._note(consumer, index, version)

    def store_address(self) -> Optional[StoreAddress]:
        """Where the rendezvous store is and the secret prefix of its keys
        (:func:`~fgnn.exchange.store.connect_store` takes it), or None in-process."""
        return self._address

    # ------------------------------------------------------------------ epoch and members
    def begin_epoch(self, epoch: int, tasks: Optional[int] = None, group: int = 1) -> None:
        """Start ``epoch`` (``tasks`` tasks, R = ``group`` per step); the members of the last
        epoch end (an ``end`` event) and this epoch's members :meth:`join` anew."""
        with self._cv:
            self._tasks.reset(epoch, tasks, group)  # ValueError for group < 1 or tasks < 0
            if self._members:
                self._append(Event("end", self.generation, tuple(self._members)))
            self._members, self._at = [], {}
            self._reset_step()
            self._cv.notify_all()

    def expect(self, consumers: list[str]) -> None:
        """The members this epoch's first group waits for: joins before they are all in form
        no group (one group build per epoch, not one per join); :meth:`release` of one of them
        stops the wait for it."""
        with self._cv:
            self._expect = set(consumers)
            self._reform()
            self._cv.notify_all()

    def join(self, consumer: str, incarnation: int, version: int, handle: Any = None,
             ring: Optional[tuple[str, str]] = None) -> int:
        """Enrol ``consumer`` (holding ``version`` steps) for this epoch; it becomes a member
        at the next step boundary. ``ring``: ``(host key, file)`` of its gradient ring, or
        None. Returns the index of the first event it must replay."""
        with self._cv:
            self._tasks.enroll(consumer, incarnation)
            self._handles[consumer] = handle
            self._rings[consumer] = None if ring is None else (str(ring[0]), str(ring[1]))
            self._dead.discard(consumer)
            start = len(self._log)
            if consumer in self._members:  # a restarted incarnation: a member no more
                self._members.remove(consumer)
                self._dead.add(consumer)
            self._at[consumer] = (start, int(version))
            if consumer not in self._joining:
                self._joining.append(consumer)
            self._reform()
            self._cv.notify_all()
            return start

    def release(self, consumer: str) -> int:
        """``consumer`` died or stopped: its unused slots go back, gradients it delivered in the
        open step count as not applied, and the group is re-formed without it. Returns the
        slots given back."""
        with self._cv:
            self._tasks.retire(consumer)
            self._expect.discard(consumer)
            n = self._holders.pop(consumer, 0)
            self._claimed -= n
            self._waiting = [w for w in self._waiting if w[0] != consumer]
            self._delivered = [d for d in self._delivered if d[0] != consumer]
            for task in [t for t, c in self._open.items() if c == consumer]:
                del self._open[task]
                self._tasks.revoke(task)
                self._received -= 1
                self._claimed -= 1
            if consumer in self._joining:
                self._joining.remove(consumer)
            if consumer in self._members:
                self._dead.add(consumer)
            self._maybe_close()
            self._reform()
            self._publish(time.time())
            self._cv.notify_all()
            return n

    def hello(self, consumer: str, incarnation: int) -> None:
        """A Trainer process started as ``consumer`` with ``incarnation``: when a member of
        that name holds another incarnation, that one died (Ray restarted the actor), so it is
        released (a standby killed while idle has no call of the runtime's to fail)."""
        with self._cv:
            old = self._tasks.incarnation(consumer)
            gone = old is not None and old != int(incarnation)
        if gone:
            self.release(consumer)

    def failed(self, consumer: str, generation: int) -> None:
        """``consumer``'s collective of ``generation`` failed (a peer died or hung): probe
        the members' liveness until one is found gone (it is then released and the group
        re-formed) or the generation changes; at most ``GROUP_TIMEOUT_S``, in a thread of its
        own (one per generation), so this call returns at once."""
        with self._cv:
            if generation == self.generation:
                self._start_watch()

    def _start_watch(self) -> None:
        """Probe the members of the current generation in a thread (one per generation; under
        the lock)."""
        if self.generation in self._watching:
            return
        self._watching.add(self.generation)
        threading.Thread(target=self._watch, args=(self.generation,), daemon=True,
                         name=f"ledger-watch-g{self.generation}").start()

    def _watch(self, generation: int) -> None:
        deadline = time.monotonic() + GROUP_TIMEOUT_S
        while time.monotonic() < deadline:
            with self._cv:
                if self.generation != generation or self._ended:
                    return
                members = list(self._members)
            gone = [m for m in members if not _probe(self._alive, m)]
            for m in gone:
                self.release(m)
            if gone:
                return
            time.sleep(0.25)

    def _reform(self) -> None:
        """Drop dead members and add joiners: a ``form`` event of a new generation, once every
        surviving member reported how far it got (a death may have cut a reduction short).

        It may come in the middle of a step: rank 0 is a member with the newest state, and a
        member already at that version keeps its weights (they are equal), so a training thread
        computing on them is not disturbed.

        Not once the epoch's ``end`` is in the log: its members' reducers stop there, so a
        group formed after it never forms (the joiner waited for its peers until the group's
        timeout, and the next epoch with it); a joiner then waits for the next epoch."""
        if self._ended or (not self._dead and not self._joining):
            return
        if not self._members and self._expect - set(self._joining):
            return  # the epoch's first group: wait for every expected member
        survivors = [m for m in self._members if m not in self._dead]
        reduced = [e.step for e in self._log if e.kind == "reduce"
                   and e.generation == self.generation]
        upto = reduced[-1] + 1 if reduced else self.version
        # past the last event that is not a ``grant`` (a member need not report having read
        # grants: they change no group)
        last = next((i + 1 for i in range(len(self._log) - 1, -1, -1)
                     if self._log[i].kind != "grant"), 0)
        if self._dead and any(self._at[m][0] < last for m in survivors):
            return  # a survivor is still inside a reduction: wait for its report
        done = max([self._at[m][1] for m in survivors], default=upto)
        for step in [s for s in self._closed if s >= done]:  # no survivor applied it
            for task, c in list(self._closed[step].items()):
                if c in self._dead:
                    self._tasks.revoke(task)
                    del self._closed[step][task]
        joined = [m for m in self._joining if m not in self._dead or self._tasks.enrolled(m)]
        def newest(ms: list[str]) -> list[str]:
            return sorted(ms, key=lambda m: -self._at[m][1])
        members = newest(survivors) + newest(joined)
        self._dead, self._joining = set(), []
        self.generation += 1
        self._members = members
        if members:
            self._append(Event("form", self.generation, tuple(members), upto,
                               rings=self._shared_rings(members)))
            self._publish(time.time())  # requests of the joiners
        self._ended_check()

    def _shared_rings(self, members: list[str]) -> tuple[str, ...]:
        """The members' ring files in rank order when every member has one on one host (the
        group sums from shared memory), else ``()`` (gloo)."""
        rings = [self._rings.get(m) for m in members]
        if any(r is None for r in rings) or len({r[0] for r in rings}) != 1:
            return ()
        return tuple(r[1] for r in rings)

    # ------------------------------------------------------------------ slots and gradients
    def slots(self) -> int:
        """Slots of the open step: ``min(R, tasks not yet accepted)``."""
        return self._tasks.slots(self._received)

    def request(self, consumer: str, incarnation: Optional[int] = None,
                epoch: Optional[int] = None) -> None:
        """``consumer`` holds a task and asks for a slot for it: granted at once when the open
        step has one free, else queued (first come, first served) and granted when a slot
        frees up, most often at the step's close. Grants are published in the event log every
        member reads (a ``grant`` event, or the closing step's ``reduce``), so the caller never
        waits for this call's reply. A request of another epoch or of a dead incarnation is
        dropped.

        A Trainer requests for a task it holds, one request per task (at most two at a time:
        the one it computes and the one its prefetch brought), so the waiters at a step's close
        never outnumber the Trainers, and a slot is never held by a Trainer without a task."""
        with self._cv:
            if (epoch is not None and epoch != self.epoch) \
                    or not self._tasks.enrolled(consumer) \
                    or self._tasks.stale(consumer, incarnation):
                return
            self._waiting.append((consumer, incarnation))
            self._publish(None)

    def _grant(self, ready_at: Optional[float]) -> tuple[tuple[str, int, Optional[float]], ...]:
        """Give the open step's free slots to the queued requests of live members, in order
        (under the lock): the grants. Requests of dead incarnations are dropped; those of
        members not yet in a group wait on."""
        grants, keep = [], []
        for consumer, inc in self._waiting:
            if self._tasks.stale(consumer, inc) or not self._tasks.enrolled(consumer):
                continue
            if consumer in self._members and self._claimed < self.slots():
                self._claimed += 1
                self._holders[consumer] += 1
                grants.append((consumer, inc, ready_at))
            else:
                keep.append((consumer, inc))
        self._waiting = keep
        return tuple(grants)

    def _publish(self, ready_at: Optional[float]) -> None:
        """Grant what can be granted now and publish it in a ``grant`` event (under the
        lock)."""
        if not self._waiting:
            return
        grants = self._grant(ready_at)
        if grants:
            self._append(Event("grant", self.generation, tuple(self._members), self.version,
                               grants=grants))

    def deliver(self, epoch: int, task_id: int, consumer: str, seeds: int = 1,
                incarnation: Optional[int] = None, ready_at: Optional[float] = None,
                row: Optional[int] = None) -> bool:
        """``consumer`` added the gradient of ``task_id`` to its sum of the open step: True when
        it counts (exactly once per epoch), False for a duplicate, another epoch or a dead
        incarnation (the caller then drops that gradient). The step closes when every slot
        delivered. ``ready_at``: the wall time the gradient was ready (default: now); ``row``:
        the row of the consumer's gradient ring holding it (written before this call), or
        None.

        Raises:
            ValueError: when ``consumer`` holds no slot, or ``seeds <= 0``.
        """
        t0 = time.perf_counter()
        with self._cv:
            self._tasks.attempt(task_id)
            if self._tasks.stale(consumer, incarnation):
                self._tasks.reject(task_id)
                return False
            if self._holders[consumer] < 1:
                raise ValueError(f"{consumer!r} delivered task {task_id} without a slot")
            if seeds <= 0:
                raise ValueError(f"seeds must be > 0, got {seeds!r}")
            self._holders[consumer] -= 1
            ok = self._admit(epoch, task_id)
            self._ready = max(self._ready, time.time() if ready_at is None else ready_at)
            if ok:
                self._tasks.apply(task_id, consumer)
                self._open[task_id] = consumer
                self._delivered.append((consumer, task_id, None if row is None else int(row)))
                self._received += 1
            else:
                self._tasks.reject(task_id)
                self._claimed -= 1
            self._maybe_close()
            self._reform()
            self._publish(time.time())
            self._cv.notify_all()
            self._tasks.busy_s += time.perf_counter() - t0
            return ok

    def _admit(self, epoch: int, task_id: int) -> bool:
        """The exactly-once rule: a task of this epoch none of whose gradients counted yet
        (:meth:`TaskLedger.admit <fgnn.exchange.exactly_once.TaskLedger.admit>`; the hook a
        fault test breaks)."""
        return self._tasks.admit(epoch, task_id)

    def _maybe_close(self) -> None:
        """Close the open step once every claimed slot delivered and no slot is left: deaths
        re-form the group first, then a ``reduce`` event (with the step's accepted deliveries
        and the next step's slots for the queued requests), then joins at the boundary."""
        if self._received == 0 or self._received < self._claimed \
                or self._received < self.slots():
            return
        if self._dead:
            self._reform()
            if self._dead:
                return  # waits for the survivors' reports (next_event closes it then)
        step, tasks = self.version, tuple(self._delivered)
        self._closed[step] = dict(self._open)
        self.version += 1
        self._tasks.steps += 1
        self._open, self._delivered = {}, []
        self._closed_ready, self._ready = self._ready, 0.0
        self._claimed = self._received = 0
        grants = self._grant(self._closed_ready)
        self._append(Event("reduce", self.generation, tuple(self._members), step,
                           grants=grants, tasks=tasks))
        self._ended_check()

    def _ended_check(self) -> None:
        """Append ``end`` once every task is accepted and every member applied every step (a
        death in the last reduction must still re-form the group and reduce again).

        When every task is in but a member has not applied every step, its members are probed
        (:meth:`failed`): a member that died idle fails nobody's call when the group sums
        from shared memory, and without the probe the epoch never ended."""
        if (self._ended or not self._tasks.complete() or self._received
                or not self._members):
            return
        if self._closed or self._dead:
            self._start_watch()
            return
        self._ended = True
        self._append(Event("end", self.generation, tuple(self._members)))

    # ------------------------------------------------------------------ the event log
    def next_event(self, consumer: str, index: int, version: int,
                   timeout_s: float = 1.0) -> Optional[Event]:
        """The event at ``index`` of the log for ``consumer``'s reducer, which has processed
        the events before it and holds ``version`` steps (its report); None on timeout."""
        with self._cv:
            self._note(consumer, index, version)
            self._cv.wait_for(lambda: len(self._log) > index, timeout_s)
            return self._log[index] if len(self._log) > index else None

    def _note(self, consumer: str, index: int, version: int) -> None:
        """Record a member's progress; settle steps every member applied; re-form after a
        death once the survivors have all reported (under the lock)."""
        self._at[consumer] = (int(index), int(version))
        for s in [s for s in self._closed if s < version]:
            if all(self._at.get(m, (0, 0))[1] > s for m in self._members):
                del self._closed[s]  # every member applied it: settled
        self._ended_check()
        self._cv.notify_all()
        if self._dead:
            self._reform()
            self._maybe_close()
            self._cv.notify_all()

    # ------------------------------------------------------------------ reports
    def ledger(self) -> dict[str, Any]:
        """This epoch's exactly-once ledger, as :meth:`ParameterServer.ledger
        <fgnn.exchange.ps.ParameterServer.ledger>` reports it (``busy_s``: time inside
        :meth:`deliver`)."""
        with self._cv:
            return {**self._tasks.report(), "generation": self.generation}

    def _holder_state(self) -> dict[str, Any]:
        """The state of the newest member that answers (rank 0 first); the last one read when
        none does (every Trainer died)."""
        import ray

        with self._cv:
            names = list(self._members) or sorted(self._at, key=lambda m: -self._at[m][1])
            handles = [self._handles.get(m) for m in names]
        for h in handles:
            if h is None:
                continue
            try:
                self._snapshot = ray.get(h.exchange_state.remote(), timeout=GROUP_TIMEOUT_S)
                return self._snapshot
            except (ray.exceptions.RayError, TimeoutError):
                continue
        if self._snapshot is None:
            raise RuntimeError("no Trainer of the collective exchange holds the weights")
        return self._snapshot

    def weights(self) -> tuple[int, torch.Tensor]:
        """``(version, flat weights)`` of the newest member (read from its actor)."""
        st = self._holder_state()
        return st["version"], st["flat"]

    def state(self) -> dict[str, Any]:
        """Model and optimizer state dicts of the newest member (CPU), for checkpoints."""
        st = self._holder_state()
        return {"model": st["model"], "optimizer": st["optimizer"], "version": st["version"]}


def _ray_actor_exists(name: str) -> bool:
    """The Ray actor ``name`` exists (alive or being restarted); False once it is dead."""
    import ray

    try:
        ray.get_actor(name)
    except ValueError:
        return False
    return True


def _probe(alive: Callable[[str], bool], name: str) -> bool:
    """``alive(name)``; a probe that raises counts as alive (no member is dropped on doubt)."""
    try:
        return bool(alive(name))
    except Exception:  # noqa: BLE001 - a failing probe is no evidence of a death
        return True
