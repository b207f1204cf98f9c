"""Gradient exchange over a collective: weights and optimizer state stay on every Trainer's device.

The step rule is the parameter server's (:mod:`fgnn.exchange.ps`): a step averages the gradients
of R tasks (one mini-batch), weighted by their seed counts, and every gradient of a step is
computed from the previous step's weights. What moves differs: only gradients, once per step, in
one sum of ``[sum of seed-weighted gradients, seed count]`` over the Trainers of the current
group. On CUDA: an NCCL all-reduce when every member has a GPU of its own, else gloo through host
memory (NCCL refuses two ranks on one GPU: :mod:`fgnn.exchange.groups`). CPU members on one host sum from shared memory: a Trainer
writes each task's gradient into its :class:`~fgnn.exchange.gradring.GradientRing` before it
delivers the task, the step's ``reduce`` event lists the accepted deliveries with their rows,
and every member adds those rows in the listed order (the same bits everywhere, and no member
waits for another one). Otherwise (members on several hosts, or without room for a ring):
gloo, a direct exchange between every pair of members summed in rank order (:func:`group_sum`).
Each member then takes the same Adam step on its own device, so every member holds the same
weights and no weights are ever sent back.

Two pieces:

* :class:`~fgnn.exchange.step_ledger.StepLedger` (:mod:`fgnn.exchange.step_ledger`) -- the
  coordinator (a small threaded actor; it holds no tensors in the step path). It hands out the R
  slots of the open step to the members' requests
  (:meth:`~fgnn.exchange.step_ledger.StepLedger.request`), keeps the exactly-once ledger
  (:meth:`~fgnn.exchange.step_ledger.StepLedger.deliver` turns a duplicate task away), closes a
  step once every slot delivered, and keeps an *event log* every member replays in order:
  ``form`` (a new group generation: rank 0, the member with the newest state, broadcasts weights
  and optimizer state), ``reduce`` (all-reduce step ``s`` and apply it; it also lists the step's
  accepted deliveries and grants the queued requests their slots of step ``s + 1``), ``grant``
  (slots granted between closes) and ``end`` (the epoch is over). No reply of the ledger is on a
  step's path: a member learns its slots and its gradients' verdicts from the events it reads
  anyway. Membership changes only at step boundaries: joins (a restarted Trainer) wait for a
  boundary; a death is applied before the next reduce; a death during a reduce re-forms the
  group once every survivor has reported how far it got, and the steps no survivor completed are
  reduced again without the dead member's gradients, whose tasks go back to "not applied" (their
  leases return through the queue and another Trainer trains them). A death nobody reports (a
  standby killed while idle: no call of the runtime's fails) shows as a failed collective: the
  member tells the ledger (:meth:`~fgnn.exchange.step_ledger.StepLedger.failed`), which probes
  its members' liveness and releases the dead one; a restarted Trainer announces its new
  incarnation (:meth:`~fgnn.exchange.step_ledger.StepLedger.hello`), which releases the one it
  replaces. From shared memory no sum fails (a dead member's listed rows are still in its file):
  a dead member shows as one that never applies a step, so a writer waiting for it to free a
  ring row tells the ledger, and the ledger probes its members once every task of the epoch is
  in and a member lags.
* :class:`ExchangeMember` -- one Trainer's side: its device weights and optimizer, the
  seed-weighted gradient sum of each step it took part in, and a reducer thread that replays the
  ledger's events. A member with no task in a step contributes zeros and a zero count.

Every member of the epoch's group (standby Trainers included, from the epoch's start) takes part
in every reduction, so a standby that switches to training mid-epoch already holds the current
weights: it only starts requesting slots.

Why ``torch.distributed`` rather than Ray's collective API: its process groups can be built per
generation from a store prefix without global state (``ProcessGroupGloo(store, rank, size)``), so
a group is rebuilt after a death without tearing the process down, and the unit tests run whole
groups as threads of one process.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch
from torch import nn

from fgnn.exchange.gradring import DEFAULT_ROWS, GradientRing, host_key, ring_bytes
from fgnn.exchange.groups import (abort_group, group_broadcast, group_sum, group_sum_count,
                                    is_nccl, new_group)
from fgnn.exchange.ps import flatten
from fgnn.exchange.step_ledger import GROUP_TIMEOUT_S, Event

__all__ = ["ExchangeMember", "ExchangeSpec", "group_broadcast", "group_sum", "new_group"]

@dataclass(frozen=True)
class ExchangeSpec:
    """What a Trainer needs to join the collective exchange (shipped in its constructor
    arguments, so a restarted Trainer has it again).

    Attributes:
        ledger: handle of the :class:`~fgnn.exchange.step_ledger.StepLedger` actor.
        lr: Adam learning rate.
        weight_decay: Adam weight decay.
        optimizer_state: optional optimizer ``state_dict`` to resume from.
        ring_dir: where CPU members create their gradient rings (``/dev/shm``); None: no
            shared-memory transport (the members sum over gloo).
        ring_prefix: the job's prefix of ring file names (the runtime removes
            ``ring_dir/ring_prefix-*`` at the job's end).
        ring_rows: rows of each ring (:func:`~fgnn.exchange.gradring.ring_rows`).
    """

    ledger: Any
    lr: float
    weight_decay: float = 0.0
    optimizer_state: Optional[dict] = None
    ring_dir: Optional[str] = None
    ring_prefix: str = "fgnn-ring"
    ring_rows: int = DEFAULT_ROWS


@dataclass
class _Gradient:
    """One task's gradient kept for its step's sum: ``flat`` (the mean over ``seeds`` seeds)
    or ``row`` of the member's ring (``[seeds * gradient, seeds]``), the ledger's ``answer``
    to its delivery, the ``ack`` for ``on_applied`` and the ``task`` id."""

    answer: Any
    flat: Optional[torch.Tensor]
    seeds: float
    ack: Any
    task: Optional[int]
    row: Optional[int]


def _rows_sum(rows: list[torch.Tensor], width: int) -> torch.Tensor:
    """The sum of ring rows, added in the given order (the same bits on every member)."""
    buf = torch.zeros(width)
    for r in rows:
        buf.add_(r)
    return buf


def _add_gradient(buf: torch.Tensor, entry: _Gradient, ring: Optional[GradientRing]) -> None:
    """Add a kept gradient to ``buf`` as ``[seeds * gradient, seeds]``."""
    if entry.row is not None and ring is not None:
        buf.add_(ring.rows[entry.row].to(buf.device))
    else:
        buf[:-1].add_(entry.flat, alpha=entry.seeds)
        buf[-1] += entry.seeds


def _fused_ok(params: list[nn.Parameter]) -> Optional[bool]:
    """True when torch's fused Adam takes these parameters (floating point, on a CPU or
    CUDA device), else None (torch's default implementation)."""
    ok = bool(params) and all(p.is_floating_point() and p.device.type in ("cpu", "cuda")
                              for p in params)
    return True if ok else None


def _init_adam(optimizer: torch.optim.Adam, params: list[nn.Parameter]) -> None:
    """Give every parameter Adam's zero state (what its first step would create), so members
    broadcast optimizer states of one fixed layout from the start."""
    fused = bool(optimizer.defaults.get("fused"))
    for p in params:
        if not optimizer.state[p]:  # fused Adam keeps its step count on the device
            optimizer.state[p] = {"step": torch.tensor(0.0, device=p.device if fused else None),
                                  "exp_avg": torch.zeros_like(
                                      p, memory_format=torch.preserve_format),
                                  "exp_avg_sq": torch.zeros_like(
                                      p, memory_format=torch.preserve_format)}


class ExchangeMember:
    """One Trainer's side of the collective exchange: weights and Adam state on its device.

    The training thread, per task: :meth:`claim` a slot (the step ``s`` to compute; the request
    may have been sent ahead with :meth:`ask`, the grant comes in the ledger's events), wait
    for the weights of ``s`` (:meth:`wait_version`), compute the gradient, :meth:`pending` then
    the ledger's ``deliver`` then :meth:`settle` (the gradient counts only when the ledger
    accepted it; the reducer reads the verdict in the step's ``reduce`` event, so no thread
    waits for the delivery's reply). The reducer thread (:meth:`begin`) replays the ledger's
    events: it builds each
    generation's process group, receives rank 0's state when it lags, all-reduces every step's
    ``[seed-weighted gradient sum, seed count]`` and applies the mean with Adam; then
    ``on_applied(step, acks)`` hands back what :meth:`settle` registered for that step.

    Args:
        name: the Trainer's name (its identity in the ledger).
        model: the model on ``device`` (this member steps its trainable parameters).
        lr: Adam learning rate.
        weight_decay: Adam weight decay.
        optimizer_state: optional optimizer ``state_dict`` to resume from.
        call: ``call(method, *args)`` runs a :class:`~fgnn.exchange.step_ledger.StepLedger`
            method (a Ray call, or a direct one in-process).
        post: ``post(method, *args)``: the same without waiting for the reply (a Ray call
            submitted); None: ``call``.
        store: the ``torch.distributed`` store the groups rendezvous through.
        on_applied: ``on_applied(step, [(ack, accepted), ...])`` after each applied step (runs
            on the reducer thread); None: nothing.
        resolve: turns the ``answer`` given to :meth:`settle` into the ledger's verdict
            (``ray.get`` of the delivery's reply on Ray); used only for a gradient whose step's
            ``reduce`` event this member did not read (a step reduced again after a death).
        events: ``events(index, version)``: the ledger's event at ``index`` (None after a short
            wait), having reported ``version``; None: ``call("next_event", ...)``.
        timeout_s: seconds a collective waits for its peers before it counts as failed.
        ring_dir: where a CPU member creates its gradient ring (one file per incarnation,
            ``ring_dir/ring_prefix-<name>-<incarnation>``); None: no ring (gloo sums).
        ring_prefix: the job's prefix of ring file names.
        ring_rows: rows of the ring.
    """

    def __init__(self, name: str, model: nn.Module, lr: float, weight_decay: float = 0.0,
                 optimizer_state: Optional[dict] = None, *, call: Callable[..., Any],
                 store: Any, post: Optional[Callable[..., Any]] = None,
                 on_applied: Optional[Callable[[int, list], None]] = None,
                 resolve: Callable[[Any], bool] = bool,
                 events: Optional[Callable[[int, int], Optional[Event]]] = None,
                 timeout_s: float = GROUP_TIMEOUT_S, ring_dir: Optional[str] = None,
                 ring_prefix: str = "fgnn-ring", ring_rows: int = DEFAULT_ROWS) -> None:
        self.name, self.model = name, model
        self.params = [p for p in model.parameters() if p.requires_grad]
        self._width = sum(p.numel() for p in self.params) + 1  # [gradient, seeds]
        self.device = self.params[0].device if self.params else torch.device("cpu")
        # fused: one kernel for every parameter instead of one a parameter
        self.optimizer = torch.optim.Adam(self.params, lr=lr, weight_decay=weight_decay,
                                          fused=_fused_ok(self.params))
        if optimizer_state is not None:
            self.optimizer.load_state_dict(optimizer_state)
        _init_adam(self.optimizer, self.params)
        self.version = 0
        self._call, self._store, self._on_applied = call, store, on_applied
        self._post = post or call
        self._cv = threading.Condition()
        self._entries: dict[int, list[_Gradient]] = {}
        self.incarnation: Optional[int] = None
        self.epoch: Optional[int] = None
        # slots granted to this member's requests, (step, ready_at), oldest first; requests
        # sent and not granted yet; per step, the task ids of its accepted deliveries (its
        # ``reduce`` event) that are still to be matched with the gradients kept for it
        self._grants: deque[tuple[int, Optional[float], float, float]] = deque()
        self._asked = 0
        self._verdicts: dict[int, Counter[int]] = {}
        # per step, its ``reduce`` event's deliveries (member, task, ring row), until reduced
        self._listed: dict[int, tuple[tuple[str, int, Optional[int]], ...]] = {}
        self._ring_dir, self._ring_prefix, self._ring_rows = ring_dir, ring_prefix, ring_rows
        self._ring: Optional[GradientRing] = None
        # the current group's rings by member (empty: the group sums over gloo)
        self._peers: dict[str, GradientRing] = {}
        self._opened: dict[str, GradientRing] = {}
        self._resolve = resolve
        self._events = events or (lambda i, v: call("next_event", name, i, v, 1.0))
        self._inflight: Counter[int] = Counter()
        self._pg: Any = None
        #: builds each generation's group (:func:`~fgnn.exchange.groups.new_group`)
        self.new_group: Callable[..., Any] = new_group
        self._thread: Optional[threading.Thread] = None
        self._stop = threading.Event()
        self.ready = threading.Event()
        self.timeout_s = float(timeout_s)
        self.reduce_s = 0.0
        self.reductions = 0
        # per reduced step, perf_counter times: event read, the group sum's start and end, Adam's
        # end (the exchange's parts as a training thread waiting for that step sees them)
        self.timeline: dict[int, tuple[float, float, float, float]] = {}
        self._event_at = 0.0
        self._generation = -1  # of the group this member is in

    # ------------------------------------------------------------------ lifecycle
    def begin(self, incarnation: int, handle: Any = None, epoch: Optional[int] = None) -> None:
        """Join the ledger's current epoch (``epoch``: its number, which requests name; None:
        whichever is current) and start the reducer thread (a no-op while one runs)."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self.ready.clear()
        with self._cv:
            self.incarnation, self.epoch = incarnation, epoch
            self._grants.clear()
            self._asked = 0
            self._verdicts.clear()
            self._listed.clear()
        ring = self._make_ring(incarnation)
        start = self._call("join", self.name, incarnation, self.version, handle,
                           None if ring is None else (host_key(), ring.path))
        self._thread = threading.Thread(target=self._replay, args=(start,), daemon=True,
                                        name=f"{self.name}-reducer")
        self._thread.start()

    def _make_ring(self, incarnation: int) -> Optional[GradientRing]:
        """This incarnation's gradient ring (made once), when this member is on a CPU and has a
        ring directory with room for it; None otherwise (its group sums over gloo)."""
        if self._ring is not None or self._ring_dir is None or self.device.type != "cpu":
            return self._ring
        path = os.path.join(self._ring_dir, f"{self._ring_prefix}-{self.name}-{incarnation}")
        size = ring_bytes(self._ring_rows, self._width)
        try:  # room for every member's ring several times over, or none at all
            if shutil.disk_usage(self._ring_dir).free < 16 * size:
                raise OSError(f"too little free space in {self._ring_dir}")
            self._ring = GradientRing.create(path, self._ring_rows, self._width, self.version)
        except OSError as err:
            logging.getLogger(__name__).warning(
                "%s: no shared-memory gradient ring (%s): the group sums over gloo", self.name,
                err)
        return self._ring

    def finish(self, timeout_s: Optional[float] = None) -> bool:
        """Wait for the reducer thread to reach the epoch's end; True when it did."""
        if self._thread is not None:
            self._thread.join(timeout_s)
            return not self._thread.is_alive()
        return True

    def stop(self) -> None:
        """Stop the reducer thread at its next event (it leaves the group without a word)."""
        self._stop.set()
        with self._cv:
            self._cv.notify_all()

    @property
    def active(self) -> bool:
        """The reducer thread runs (it ends with the epoch)."""
        return self._thread is not None and self._thread.is_alive()

    # ------------------------------------------------------------------ the training thread
    def ask(self) -> None:
        """Request a slot for a task this member holds
        (:meth:`~fgnn.exchange.step_ledger.StepLedger.request`; the reply
        is not waited for: the grant comes in an event). One request per task."""
        with self._cv:
            self._asked += 1
        self._post("request", self.name, self.incarnation, self.epoch)

    def claim(self, incarnation: Optional[int] = None, timeout_s: float = 1.0,
              ask: bool = True) -> Optional[tuple[int, Optional[float], float, float]]:
        """A slot for the oldest task this member holds, once this member holds the weights of
        its step: ``(step, ready_at, granted_at, read_at)``, where ``ready_at`` is the wall time
        the last gradient of the step the request waited for was ready (None: it did not wait for a close;
        :func:`~fgnn.exchange.ps.step_wait`), ``granted_at`` the wall time the ledger
        published the grant and ``read_at`` the time this member's reducer read it. With
        ``ask``, asks for one first when no request is outstanding (a caller that requests
        ahead, :meth:`ask`, counts its requests per task itself and passes False: "none
        outstanding" cannot tell a request made for this task from one for the next). None
        when none was granted within
        ``timeout_s`` (the request stays queued: call again), or before this member has joined
        a group. ``incarnation``: unused (the member's own, given to :meth:`begin`)."""
        if not self.ready.is_set():
            self.ready.wait(timeout_s)
            return None
        with self._cv:
            ask = ask and not self._grants and self._asked == 0
        if ask:
            self.ask()
        with self._cv:
            self._cv.wait_for(self._slot_ready, timeout_s)
            return self._grants.popleft() if self._slot_ready() and self._grants else None

    def _slot_ready(self) -> bool:
        """A grant is there and this member holds its step's weights (a grant that came with
        a step's close waits for that step's sum and Adam step: the training thread wakes once,
        not once for the grant and again for the weights); or the member stops."""
        return self._stop.is_set() or bool(self._grants and self.version >= self._grants[0][0])

    def wait_version(self, step: int, stop: Optional[threading.Event] = None) -> bool:
        """Wait until this member holds the weights of ``step``; False when it cannot (the
        reducer ended, or ``stop`` was set)."""
        with self._cv:
            while self.version < step:
                if self._stop.is_set() or (stop is not None and stop.is_set()) \
                        or self._thread is None or not self._thread.is_alive():
                    return False
                self._cv.wait(0.5)
            return self.version == step

    def stage(self, step: int, tensors: list[torch.Tensor], seeds: int,
              stop: Optional[threading.Event] = None
              ) -> tuple[Optional[int], Optional[torch.Tensor], float]:
        """A task's gradient (``tensors``, the mean over ``seeds`` seeds) of ``step`` made
        ready for the step's sum, before its delivery: written to the next row of this
        member's ring as ``[seeds * gradient, seeds]`` (shared memory), else flattened.

        A row is reused only once every member of the group has applied the step it held
        (a member lagging that far makes the writer wait); after a second of waiting the
        ledger is told (:meth:`~fgnn.exchange.step_ledger.StepLedger.failed`: it probes the
        members and releases a dead one), and after ``timeout_s`` (or ``stop``) the gradient
        is kept in memory instead (its step then sums over gloo). So is one whose row holds
        a gradient of this very step (this member holds more of the step's slots than its
        ring has rows: waiting would never end).

        Returns:
            ``(row or None, flat gradient or None, seconds waited for a row)``.
        """
        ring = self._ring
        if ring is None:
            return None, flatten(tensors), 0.0
        row, before = ring.next_row(step)
        if before is not None and before >= step:  # more slots of this step than rows
            ring.unclaim(row, before)
            return None, flatten(tensors), 0.0
        t0 = time.perf_counter()
        told = False
        while not GradientRing.reusable(before, self._readers()):
            waited = time.perf_counter() - t0
            if waited > self.timeout_s or self._stop.is_set() or (stop is not None
                                                                   and stop.is_set()):
                ring.unclaim(row, before)  # the row still holds its old step
                return None, flatten(tensors), waited
            if waited > 1.0 and not told:
                told = True
                self._post("failed", self.name, self._generation)
            time.sleep(0.0005)
        waited = time.perf_counter() - t0
        out = ring.rows[row]
        torch.cat([t.detach().reshape(-1).float() for t in tensors], out=out[:-1])
        out[:-1].mul_(float(seeds))
        out[-1] = float(seeds)
        return row, None, waited

    @property
    def transport(self) -> str:
        """How the current group sums: ``"shm"`` (the members' gradient rings), ``"nccl"``
        (CUDA members on distinct GPUs) or ``"gloo"``."""
        if self._peers:
            return "shm"
        return "nccl" if is_nccl(self._pg) else "gloo"

    def _readers(self) -> list[GradientRing]:
        """The rings whose owners read this member's rows: the group's, this member's own
        (``_peers`` is replaced whole at a ``form``, never changed: no lock)."""
        return list(self._peers.values()) + [self._ring]

    def pending(self, step: int) -> None:
        """A gradient of ``step`` is about to be delivered: its reduction waits for
        :meth:`settle`."""
        with self._cv:
            self._inflight[step] += 1

    def settle(self, step: int, grad: Optional[torch.Tensor], seeds: int, answer: Any,
               ack: Any = None, task: Optional[int] = None, row: Optional[int] = None) -> None:
        """Keep ``grad`` (the mean over ``seeds`` seeds; or ``row``, the ring row
        :meth:`stage` wrote it to) of task ``task`` for ``step`` with the
        ledger's ``answer`` to its delivery (True/False, or a token ``resolve`` turns into it:
        the training thread need not wait for the reply) and ``ack`` for ``on_applied``;
        release the :meth:`pending` mark. Only accepted gradients enter the step's sum: those
        the step's ``reduce`` event lists (by ``task``), else those ``answer`` accepts."""
        if grad is None and row is None:
            raise ValueError("settle needs the gradient or its ring row")
        with self._cv:
            self._entries.setdefault(step, []).append(
                _Gradient(answer, grad, float(seeds), ack, task, row))
            self._inflight[step] -= 1
            self._cv.notify_all()

    # ------------------------------------------------------------------ the reducer thread
    def _replay(self, index: int) -> None:
        """Replay the ledger's events from ``index`` until the epoch's end (or a group that no
        longer holds this member)."""
        joined = False
        try:
            while not self._stop.is_set():
                ev = self._events(index, self.version)
                if ev is None or self._stop.is_set():
                    continue
                index += 1
                self._event_at = time.perf_counter()
                self._note_event(ev)
                if ev.kind == "end" or (joined and self.name not in ev.members):
                    return
                if self.name not in ev.members or ev.kind == "grant":
                    continue  # before this member's first group, or only slots
                try:
                    if ev.kind == "form":
                        self._form(ev)
                        joined = True
                        self.ready.set()
                    elif self._pg is not None:
                        self._reduce_step(ev.step)
                    continue
                except RuntimeError:  # a peer died or timed out: the ledger probes the
                    abort_group(self._pg)  # members; this member reports and waits for a form
                    self._pg = None
                # the group is dropped here (the traceback held it): its connections close,
                # so peers still waiting on this member fail too, then the ledger is told
                self._call("failed", self.name, ev.generation)
        finally:
            self._pg = None
            self.ready.set()
            with self._cv:
                self._cv.notify_all()

    def _note_event(self, ev: Event) -> None:
        """Take this member's slots from ``ev``'s grants (a ``reduce`` grants slots of the step
        after the one it reduces) and, from a ``reduce``, its accepted deliveries of the step;
        wake the training thread when a slot came."""
        step = ev.step + 1 if ev.kind == "reduce" else ev.step
        now = time.time()
        mine = [(step, ready, ev.at, now) for name, inc, ready in ev.grants
                if name == self.name and inc == self.incarnation]
        with self._cv:
            if ev.kind == "reduce":
                self._verdicts[ev.step] = Counter(t for name, t, _ in ev.tasks
                                                  if name == self.name)
                self._listed[ev.step] = ev.tasks
            if mine:
                self._grants.extend(mine)
                self._asked = max(0, self._asked - len(mine))
                if step <= self.version:  # a grant with a close wakes the training thread
                    self._cv.notify_all()  # once, when the step is applied (:meth:`claim`)

    def _form(self, ev: Event) -> None:
        """Join generation ``ev.generation``: build its group, take rank 0's state when this
        member lags, then reduce again the steps up to ``ev.step`` it has not applied."""
        rank = ev.members.index(self.name)
        self._pg = self.new_group(self._store, ev.generation, rank, len(ev.members),
                                  self.device, self.timeout_s)
        peers = self._open_rings(ev)
        with self._cv:
            self._peers, self._generation = peers, ev.generation
        state = group_broadcast(self._pg, self._flat_state(), self.timeout_s)
        theirs = int(state[0].item())
        if theirs > self.version:
            self._adopt(state)
        self._settle_adopted()
        for step in range(self.version, ev.step):
            self._reduce_step(step)

    def _open_rings(self, ev: Event) -> dict[str, GradientRing]:
        """The rings of ``ev``'s members by name (opened once each), or ``{}`` when the group
        sums over gloo (``ev.rings`` empty, or this member has no ring).

        Raises:
            RuntimeError: a ring the ledger listed cannot be opened (as a failed collective:
                the ledger is told).
        """
        if not ev.rings or self._ring is None:
            return {}
        peers = {}
        for name, path in zip(ev.members, ev.rings):
            if path == self._ring.path:
                peers[name] = self._ring
                continue
            if path not in self._opened:
                try:
                    self._opened[path] = GradientRing.open(path)
                except (OSError, ValueError) as err:
                    raise RuntimeError(f"{self.name}: cannot open {name}'s gradient ring: "
                                       f"{err}") from err
            peers[name] = self._opened[path]
        return peers

    def _settle_adopted(self) -> None:
        """Steps below the adopted version that this member had not applied itself: rank 0
        applied them with this member's share (its sum completed, so every member's row
        reached it), so their tasks are acknowledged here as applied. Dropping them silently
        left those tasks leased and never acknowledged: a standby killed inside a step's sum,
        whose row reached one survivor and not the others, stalled the epoch with the step's
        other tasks (37 of 40) done."""
        with self._cv:
            self._cv.wait_for(lambda: self._stop.is_set() or all(
                n <= 0 for s, n in self._inflight.items() if s < self.version))
            steps = sorted(s for s in self._entries if s < self.version)
            adopted = [(s, self._entries.pop(s)) for s in steps]
            for s in [s for s in self._inflight if s < self.version]:
                del self._inflight[s]
            self._cv.notify_all()
        for step, entries in adopted:
            verdicts = [(e.ack, bool(self._resolve(e.answer))) for e in entries]
            if self._on_applied is not None and verdicts:
                self._on_applied(step, verdicts)

    def _reduce_step(self, step: int) -> None:
        """Sum ``[seed-weighted gradient sum, seeds]`` of ``step`` over the group and take its
        Adam step.

        From shared memory when the group has rings and every gradient the step's ``reduce``
        event lists is in one (each member adds the listed rows in the listed order: the same
        bits everywhere, no wait for another member); else over gloo (:func:`group_sum` of
        each member's own accepted gradients).

        Raises:
            RuntimeError: the collective failed (a peer died: the ledger re-forms the group).
        """
        with self._cv:
            self._cv.wait_for(lambda: self._inflight[step] <= 0 or self._stop.is_set())
            entries = list(self._entries.get(step, []))
            counted = self._verdicts.pop(step, None)
            listed = self._listed.pop(step, None)
            peers = self._peers
        verdicts = [(e.ack, self._counts(e, counted)) for e in entries]
        t0 = time.perf_counter()
        if listed is not None and peers and all(r is not None and m in peers
                                                for m, _, r in listed):
            buf = _rows_sum([peers[m].rows[r] for m, _, r in listed], self._width)
            count = float(buf[-1])  # host memory
        else:
            buf = torch.zeros(self._width, device=self.device)
            for e, (_, ok) in zip(entries, verdicts):
                if ok:
                    _add_gradient(buf, e, self._ring)
            # the count is read without waiting behind this device's training kernels
            buf, count = group_sum_count(self._pg, buf, self.timeout_s)
        t_sum = time.perf_counter()
        if count > 0:
            mean = buf[:-1] / buf[-1]
            offset = 0
            for p in self.params:
                p.grad = mean[offset:offset + p.numel()].view_as(p).to(p.dtype)
                offset += p.numel()
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        t1 = time.perf_counter()
        self._applied_step(step, (self._event_at, t0, t_sum, t1))
        self.reduce_s += t1 - t0
        self.reductions += 1
        if self._on_applied is not None:
            self._on_applied(step, verdicts)

    def _counts(self, entry: _Gradient, counted: Optional[Counter]) -> bool:
        """The verdict on a kept gradient: listed in its step's ``reduce`` event (by task,
        ``counted``), else the ledger's answer to its delivery."""
        if counted is not None and entry.task is not None:
            ok = counted[entry.task] > 0
            counted[entry.task] -= 1
            return ok
        return bool(self._resolve(entry.answer))

    def _applied_step(self, step: int, marks: tuple[float, float, float, float]) -> None:
        """``step`` is applied: the version moves on (published in this member's ring, where
        writers read it) and the waiting training thread wakes."""
        with self._cv:
            self.version = step + 1
            self._entries.pop(step, None)
            self._inflight.pop(step, None)
            self.timeline[step] = marks
            self.timeline.pop(step - 8, None)
            self._cv.notify_all()
        if self._ring is not None:
            self._ring.applied = self.version

    # ------------------------------------------------------------------ state
    def _flat_state(self) -> torch.Tensor:
        """``[version, weights, exp_avg, exp_avg_sq, Adam steps]`` as one flat vector."""
        st = [self.optimizer.state[p] for p in self.params]
        parts = [torch.tensor([float(self.version)], device=self.device)]
        parts += [p.detach().reshape(-1).float() for p in self.params]
        parts += [s["exp_avg"].reshape(-1).float() for s in st]
        parts += [s["exp_avg_sq"].reshape(-1).float() for s in st]
        parts.append(torch.stack([s["step"].float().to(self.device) for s in st])
                     if st else torch.zeros(0, device=self.device))
        return torch.cat(parts)

    def _adopt(self, flat: torch.Tensor) -> None:
        """Take weights, Adam state and version from a :meth:`_flat_state` vector."""
        st = [self.optimizer.state[p] for p in self.params]
        offset = 1
        with torch.no_grad():
            for group in ([p for p in self.params], [s["exp_avg"] for s in st],
                          [s["exp_avg_sq"] for s in st]):
                for t in group:
                    t.copy_(flat[offset:offset + t.numel()].view_as(t))
                    offset += t.numel()
            for i, s in enumerate(st):
                s["step"].copy_(flat[offset + i])
        with self._cv:
            self.version = int(flat[0].item())
            self._cv.notify_all()
        if self._ring is not None:
            self._ring.applied = self.version

    def state(self) -> dict[str, Any]:
        """``{"version", "flat", "model", "optimizer"}`` on the CPU: flat weights, model and
        optimizer state dicts (checkpoints, the final model)."""
        opt = self.optimizer.state_dict()
        opt["state"] = {k: {n: v.detach().cpu().clone() for n, v in s.items()}
                        for k, s in opt["state"].items()}
        return {"version": self.version, "flat": flatten(self.params).cpu(),
                "model": {k: v.detach().cpu().clone() for k, v in
                          self.model.state_dict().items()}, "optimizer": opt}
