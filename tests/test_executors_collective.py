"""The collective exchange (fgnn/exchange/collective.py) without Ray: members are threads of
this process, each with its own model copy, grouped by gloo over a shared ``HashStore``.

* a step over R tasks spread among the members is the single-process Adam step on their seeds,
  and every member ends with the same weights;
* a duplicate task is never applied (and the check fails with the ledger's rule off);
* a member that dies is dropped and the group rebuilt, before or inside a reduction;
* a standby that starts training mid-epoch, and a fresh member that joins mid-epoch, take the
  group's state and keep the single-process steps;
* a member that dies while idle (no call of it fails, so nobody releases it) is found by the
  ledger's liveness probe, in-process and on Ray (a standby killed with and without a restart).

Most cases run on both transports of a CPU group: ``gloo`` (each member's own gradients, summed
over the group) and ``shm`` (every member adds the listed rows of the members' gradient rings
in shared memory, :mod:`fgnn.exchange.gradring`).
"""

from __future__ import annotations

import glob
import shutil
import threading
import time
from collections import deque
from typing import Optional

import pytest
import torch
import torch.nn.functional as F
from torch import nn

dist = pytest.importorskip("torch.distributed")

from fgnn.exchange.gradring import GradientRing, default_ring_dir, ring_rows  # noqa: E402
from fgnn.exchange.collective import (ExchangeMember, group_broadcast,  # noqa: E402
                                      group_sum, new_group)
from fgnn.exchange.step_ledger import StepLedger  # noqa: E402
from fgnn.exchange.ps import flatten  # noqa: E402
from fgnn.executors.scheduler import epoch_batches  # noqa: E402

pytestmark = pytest.mark.timeout(60)

IN, C, LR = 5, 3, 0.05


def _model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(IN, 4), nn.ReLU(), nn.Linear(4, C))


def _data(n: int, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, IN, generator=g), torch.randint(0, C, (n,), generator=g)


def _single(x: torch.Tensor, y: torch.Tensor, batches: list[torch.Tensor]) -> torch.Tensor:
    """The single-process loop: one Adam step per mini-batch."""
    model = _model()
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    for b in batches:
        opt.zero_grad()
        F.cross_entropy(model(x[b]), y[b]).backward()
        opt.step()
    return flatten(list(model.parameters()))


class _Group:
    """A ledger, a shared store and members run as threads on one epoch's tasks."""

    def __init__(self, n: int, tasks: list[torch.Tensor], group: int,
                 ledger: Optional[StepLedger] = None, timeout_s: float = 30.0,
                 ring_dir: Optional[str | dict] = None, ring_rows: int = 8,
                 events: Optional[dict] = None) -> None:
        self.ledger = ledger or StepLedger()
        self.ring_dir, self.ring_rows, self.events = ring_dir, ring_rows, events or {}
        self.epoch = 0
        self.store = dist.HashStore()
        self.queue = deque(enumerate(tasks))
        self.lock = threading.Lock()
        self.acked: list[int] = []
        self.again: set[int] = set()
        self.timeout_s = timeout_s
        self.members = {f"m{i}": self.member(f"m{i}") for i in range(n)}
        self.ledger.begin_epoch(0, len(tasks), group)

    def member(self, name: str) -> ExchangeMember:
        def applied(step: int, acks: list) -> None:
            with self.lock:
                self.acked += [t for t, ok in acks if ok]
        return ExchangeMember(name, _model(), LR, call=lambda m, *a: getattr(self.ledger, m)(*a),
                              store=self.store, on_applied=applied, timeout_s=self.timeout_s,
                              ring_dir=(self.ring_dir.get(name) if isinstance(self.ring_dir, dict)
                                        else self.ring_dir), ring_rows=self.ring_rows,
                              events=self.events.get(name))

    def train(self, m: ExchangeMember, x: torch.Tensor, y: torch.Tensor, limit: int = 10**9,
              redeliver: bool = False, die_after_deliver: bool = False) -> None:
        """Take tasks until none is left (or ``limit``); ``redeliver``: put each task this
        member trained back in the queue once (as a fault re-delivers a task whose
        acknowledgement was lost); ``die_after_deliver``: stop (as if killed) after delivering
        the first task."""
        done = 0
        while done < limit:
            with self.lock:
                if not self.queue:
                    return
            got = None
            while got is None:
                if not m.active:
                    return  # the epoch is over
                got = m.claim(0, 0.5)
            step = got[0]
            with self.lock:  # tasks in claim order: a step's tasks are one mini-batch
                t, idx = self.queue.popleft()
            assert m.wait_version(step)
            for p in m.params:
                p.grad = None
            F.cross_entropy(m.model(x[idx]), y[idx]).backward()
            row, g, _ = m.stage(step, [p.grad for p in m.params], int(idx.numel()))
            m.pending(step)
            ok = self.ledger.deliver(self.epoch, t, m.name, int(idx.numel()), m.incarnation,
                                     None, row)
            if die_after_deliver:
                m.stop()
                return
            m.settle(step, g, int(idx.numel()), ok, t, task=t, row=row)
            if redeliver and t not in self.again and len(self.queue) > 1:
                self.again.add(t)
                with self.lock:
                    self.queue.appendleft((t, idx))
            done += 1

    def start(self, names: tuple[str, ...], x: torch.Tensor, y: torch.Tensor,
              *limits: int) -> list[threading.Thread]:
        """Train the named members in threads (each up to its entry of ``limits``, if any)."""
        threads = [threading.Thread(target=self.train, args=(self.members[n], x, y, *lim))
                   for n, lim in zip(names, [(k,) for k in limits] or [()] * len(names))]
        for t in threads:
            t.start()
        return threads

    def run(self, x: torch.Tensor, y: torch.Tensor, **plans: dict) -> None:
        for m in self.members.values():
            m.begin(0)
        threads = [threading.Thread(target=self.train, args=(m, x, y), kwargs=plans.get(n, {}))
                   for n, m in self.members.items()]
        for t in threads:
            t.start()
        _joined(threads, 120)

    def finish(self, names: Optional[list[str]] = None) -> list[torch.Tensor]:
        out = []
        for n in names or list(self.members):
            assert self.members[n].finish(30), f"{n}'s reducer did not reach the epoch's end"
            out.append(flatten(self.members[n].params))
        return out


@pytest.fixture(params=["gloo", "shm"])
def rings(request, tmp_path) -> Optional[str]:
    """The group's transport: None (gloo) or the directory of the members' gradient rings
    (shared memory)."""
    return None if request.param == "gloo" else str(tmp_path)


def _joined(threads: list[threading.Thread], timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` for ``threads``; True when every one has finished."""
    deadline = time.monotonic() + timeout_s
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    return not any(t.is_alive() for t in threads)


def _epoch(n_seeds: int = 40, batch: int = 10, parts: int = 4) -> tuple:
    x, y = _data(n_seeds)
    tasks = epoch_batches(torch.arange(n_seeds), batch, 0, 0, parts)
    batches = [torch.cat(tasks[i:i + parts]) for i in range(0, len(tasks), parts)]
    return x, y, tasks, _single(x, y, batches)


def test_collective_steps_are_the_single_process_steps(rings):
    x, y, tasks, want = _epoch(n_seeds=38)  # 4 mini-batches, the last one smaller
    g = _Group(3, tasks, group=4, ring_dir=rings)
    g.run(x, y)
    weights = g.finish()
    for w in weights:
        assert torch.allclose(w, want, atol=1e-6) and torch.equal(w, weights[0])
    led = g.ledger.ledger()
    assert led["steps"] == 4 and led["applied"] == {t: 1 for t in range(len(tasks))}
    assert sorted(g.acked) == list(range(len(tasks)))  # acknowledged once each, after applying
    # the optimizer state matches too: each member's state is what a checkpoint saves
    st = g.members["m0"].state()
    assert st["version"] == 4 and len(st["optimizer"]["state"]) == 4


@pytest.mark.parametrize("rule", ["on", "off"])
def test_a_redelivered_task_is_never_applied(monkeypatch, rule, rings):
    x, y, tasks, want = _epoch(n_seeds=20)
    if rule == "off":  # the exactly-once check disabled: the duplicate must show
        monkeypatch.setattr(StepLedger, "_admit", lambda self, epoch, task: epoch == self.epoch)
    g = _Group(2, tasks, group=4, ring_dir=rings)
    g.run(x, y, m0={"redeliver": True}, m1={"redeliver": True})
    weights = g.finish()
    led = g.ledger.ledger()
    assert any(n == 2 for n in led["attempts"].values()), led  # duplicates were delivered
    ok = (all(n == 1 for n in led["applied"].values())
          and all(torch.allclose(w, want, atol=1e-6) for w in weights))
    assert ok == (rule == "on"), led
    if rule == "on":
        assert set(led["rejected"]) == {t for t, n in led["attempts"].items() if n == 2}


def test_a_member_dying_between_steps_is_dropped_and_the_steps_stay_exact(rings):
    x, y, tasks, want = _epoch(n_seeds=40)
    g = _Group(3, tasks, group=4, ring_dir=rings)
    for m in g.members.values():
        m.begin(0)
    dead = g.members["m2"]
    g.train(dead, x, y, die_after_deliver=True)  # delivers task 0 of step 0, then dies
    g.ledger.release("m2")  # what the runtime does for a dead Trainer
    g.queue.appendleft((0, tasks[0]))  # its lease goes back to the queue
    _joined(g.start(("m0", "m1"), x, y), 120)
    for w in g.finish(["m0", "m1"]):
        assert torch.allclose(w, want, atol=1e-6)
    led = g.ledger.ledger()
    assert led["applied"] == {t: 1 for t in range(len(tasks))}
    assert led["generation"] >= 2  # the group was rebuilt without m2


@pytest.mark.parametrize("n_seeds", [40, 10])  # 10: the epoch's one and last step
def test_a_member_dying_inside_a_reduction_rebuilds_the_group_exactly_once(n_seeds):
    x, y, tasks, _ = _epoch(n_seeds=n_seeds)
    g = _Group(3, tasks, group=4, timeout_s=2.0)
    for m in g.members.values():
        m.begin(0)
    dead = g.members["m2"]
    g.train(dead, x, y, limit=1)  # task 0 of step 0 in its sum
    dead.stop()  # then it dies: the all-reduce of step 0 waits for it, then fails
    _joined(g.start(("m0", "m1"), x, y, 2, 1), 120)
    mine = [t for t, c in g.ledger.ledger()["by"].items() if c == "m2"]
    g.ledger.release("m2")
    for t in mine:  # its leases go back to the queue
        g.queue.appendleft((t, tasks[t]))
    _joined(g.start(("m0", "m1"), x, y), 120)
    w0, w1 = g.finish(["m0", "m1"])
    assert torch.equal(w0, w1)
    led = g.ledger.ledger()
    assert led["applied"] == {t: 1 for t in range(len(tasks))}, led
    assert mine == [0] and led["attempts"][0] == 2  # its gradient was lost, then re-trained
    assert not torch.equal(w0, flatten(list(_model().parameters())))  # it trained


def test_a_standby_training_mid_epoch_and_a_late_joiner_keep_the_steps_exact(rings):
    x, y, tasks, want = _epoch(n_seeds=60)  # 6 steps
    g = _Group(2, tasks, group=4, ring_dir=rings)
    for m in g.members.values():
        m.begin(0)
    # m1 is a standby: a member from the start (it reduces zeros), training from step 2 on
    _joined(g.start(("m0",), x, y, 8), 120)
    late = g.member("late")  # e.g. a restarted Trainer: fresh weights and optimizer
    g.members["late"] = late
    late.begin(1)
    _joined(g.start(("m0", "m1", "late"), x, y), 120)
    for w in g.finish():
        assert torch.allclose(w, want, atol=1e-6)
    assert g.ledger.ledger()["by"] and {"m1", "late"} & set(g.ledger.ledger()["by"].values())


def test_an_idle_member_dying_is_detected_by_the_ledger_and_the_group_rebuilt(rings):
    """A standby that never trains dies while idle: nobody releases it (the runtime sees no
    call of it fail), so the survivors' all-reduce fails (gloo); the ledger must find the dead
    member itself (its liveness probe) and re-form the group, and the epoch's steps stay exact.
    Before the probe the survivors waited for a ``form`` event for ever. From shared memory
    no sum fails: the ledger probes once every task is in and a member has not applied
    every step (without that the epoch never ended)."""
    x, y, tasks, want = _epoch(n_seeds=60)  # 6 steps
    dead: set[str] = set()
    ledger = StepLedger(alive=lambda name: name not in dead)
    g = _Group(3, tasks, group=4, ledger=ledger, timeout_s=2.0, ring_dir=rings)
    for m in g.members.values():
        m.begin(0)
    _joined(g.start(("m0",), x, y, 5), 20)
    dead.add("m2")
    g.members["m2"].stop()  # the idle standby dies; no release() call
    survivors = g.start(("m0", "m1"), x, y)
    assert _joined(survivors, 30), "the survivors hang: the group was not rebuilt"
    for w in g.finish(["m0", "m1"]):
        assert torch.allclose(w, want, atol=1e-6)
    led = g.ledger.ledger()
    assert led["applied"] == {t: 1 for t in range(len(tasks))}
    assert led["generation"] >= 2 and "m2" not in led["by"].values()


@pytest.mark.timeout(240)
@pytest.mark.parametrize("restart", [False, True])
def test_a_standby_killed_while_idle_does_not_stall_the_collective(ray_cluster, restart):
    """The runtime on Ray with ``runtime.exchange="collective"``: the standby is a member of
    the group from the epoch's start but trains only late; killed while idle, no ``run_epoch``
    of it fails. Before the ledger probed its members (and a restarted Trainer said hello) the
    survivors' all-reduce failed and they waited for a group that never re-formed: the epoch
    stalled until the stall timeout. Later (about 1 run in 6) the case without a restart
    stalled with 37 of 40 tasks done: the standby died inside a step's sum, its row reached one
    survivor, which applied the step, and the others took that survivor's state without
    acknowledging their tasks of the step (see
    :func:`test_a_step_taken_over_from_rank_0_acknowledges_the_members_tasks`)."""
    ray = pytest.importorskip("ray")
    from fgnn.config import (CacheConfig, JobConfig, ModelConfig, RuntimeConfig,
                             SamplerConfig, TrainConfig)
    from fgnn.data.synthetic import rmat_dataset
    from fgnn.runtime.driver import Runtime
    from fgnn.executors.scheduler import epoch_batches

    ds = rmat_dataset(scale=9, edge_factor=8, feat_dim=16, num_classes=4, train_frac=0.3125,
                      val_frac=0.1, test_frac=0.1, seed=0)
    cfg = JobConfig(model=ModelConfig("sage", hidden=16, dropout=0.0),
                    sampler=SamplerConfig(fanouts=(4, 4)),
                    cache=CacheConfig(policy="degree", cache_ratio=0.25),
                    train=TrainConfig(epochs=2, batch_size=16, lr=0.01, seed=1),
                    runtime=RuntimeConfig(devices=4, samplers=1, switching=True, queue_size=4,
                                          stall_timeout_s=60.0, exchange="collective"))
    killed, rings = [], []

    def on_batch(epoch, done, total, loss):
        if epoch == 1 and done == 1:  # the Trainers' gradient rings, in shared memory
            rings.extend(glob.glob(f"{rt.services.ring_files}-*"))
        if epoch == 1 and done == 3 and not killed:
            ray.kill(ray.get_actor("fgnn-standby-0"), no_restart=not restart)
            killed.append(done)

    rt = Runtime(cfg, ds, on_batch=on_batch, evaluate=False)
    result = rt.run()
    assert killed
    # one ring per Trainer and standby of the layout (where /dev/shm has room), removed at the
    # job's end
    shm = default_ring_dir()
    assert len(rings) >= 4 or shm is None or shutil.disk_usage(shm).free < 1 << 26
    assert not glob.glob(f"{rt.services.ring_files}-*")
    for d, stats in zip(rt.details, result.epochs):
        total = len(epoch_batches(ds.train_idx, 16, 1, d["epoch"], rt.step_tasks))
        assert d["task_ids"] == list(range(total)) and stats.batches == total
        assert d["applied"] == {t: 1 for t in range(total)}
        assert d["steps"] == len(epoch_batches(ds.train_idx, 16, 1, d["epoch"]))


@pytest.mark.parametrize("dead", [1, 2])
@pytest.mark.parametrize("op", ["sum", "broadcast"])
def test_a_dead_member_leaves_no_survivor_waiting_for_the_timeout(op, dead):
    """A member whose process is gone (its connections closed, here by dropping its group):
    every survivor's :func:`group_sum` fails at once on the dead peer's own connection, with
    no help from the other survivors, and :func:`group_broadcast` completes or fails the same
    way (rank 0's failed sends reach the others when it drops its group, as a member's reducer
    does); none waits for the group's timeout (60 s in a job, as long as the stall guard of
    the Ray case below), during which it could not report to the ledger, which re-forms the
    group only once every survivor has.

    Gloo's own all-gather is a ring: the survivors downstream of the gap are released only
    when an upstream survivor that failed tears its group down; without that (here: the sum
    case keeps every group) they end in gloo's "Timed out" and this test fails (checked
    with the ring all-gather put back, 2026-11-25)."""
    import gc

    store, n = dist.HashStore(), 5
    pgs: list = [None] * n

    def build(rank: int) -> None:
        pgs[rank] = new_group(store, 3, rank, n, torch.device("cpu"), 20.0)

    threads = [threading.Thread(target=build, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    pgs[dead] = None  # the dead member's connections close
    gc.collect()
    out: dict = {}

    def call(rank: int) -> None:
        try:
            (group_sum if op == "sum" else group_broadcast)(pgs[rank], torch.ones(1001))
            out[rank] = "ok"
        except RuntimeError as err:
            out[rank] = str(err)
        if out[rank] != "ok" and op == "broadcast":  # a member drops the group whose call
            pgs[rank] = None                          # failed (its reducer does)
            gc.collect()

    threads = [threading.Thread(target=call, args=(r,)) for r in range(n) if r != dead]
    for t in threads:
        t.start()
    for t in threads:
        t.join(40)
    assert sorted(out) == [r for r in range(n) if r != dead]
    assert not [r for r, msg in out.items() if "timed out" in msg.lower()], out
    if op == "sum":  # no survivor can complete a sum without the dead member
        assert all(msg != "ok" for msg in out.values()), out


def test_a_step_taken_over_from_rank_0_acknowledges_the_members_tasks():
    """A re-formed group where rank 0 applied a step that another member had not (a member
    died inside that step's sum after its row reached rank 0 only): the lagging member takes
    rank 0's state, and the tasks it delivered in that step are acknowledged as applied (rank
    0's sum held its row). They were dropped without an acknowledgement, so they stayed
    leased and the epoch stalled (the Ray case below, 37 of 40 tasks done: three tasks of
    the step whose sum the killed standby cut short); this test fails that way."""
    from fgnn.exchange.step_ledger import Event

    store, got = dist.HashStore(), {"a": [], "b": []}
    members = {n: ExchangeMember(n, _model(), LR, call=lambda *a: None, store=store,
                                 on_applied=lambda step, acks, n=n: got[n].append((step, acks)),
                                 timeout_s=20.0) for n in ("a", "b")}
    members["a"].version = 1  # rank 0 applied step 0
    b = members["b"]  # b delivered task 7 in step 0 (accepted), but its sum of step 0 failed
    b.pending(0)
    b.settle(0, torch.zeros(sum(p.numel() for p in b.params)), 3, True, ack=7)
    ev = Event("form", 5, ("a", "b"), 1)
    threads = [threading.Thread(target=m._form, args=(ev,)) for m in members.values()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert b.version == 1 and torch.equal(flatten(b.params), flatten(members["a"].params))
    assert got["b"] == [(0, [(7, True)])] and got["a"] == []


def test_group_sum_on_gloo_is_the_same_sum_on_every_member():
    """gloo sums by all-gather and a rank-order add: every member gets the same bits, the sum
    of the members' buffers."""
    store, n = dist.HashStore(), 3
    bufs = [torch.randn(1001, generator=torch.Generator().manual_seed(r)) for r in range(n)]
    out: list = [None] * n

    def member(rank: int) -> None:
        pg = new_group(store, 7, rank, n, torch.device("cpu"), 10.0)
        out[rank] = group_sum(pg, bufs[rank].clone())

    threads = [threading.Thread(target=member, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert all(torch.equal(o, out[0]) for o in out)
    assert torch.allclose(out[0], bufs[0] + bufs[1] + bufs[2], atol=1e-6)


def test_a_trainer_requests_one_slot_per_task_when_its_prefetch_callback_runs_late():
    """The Trainer's side (``fgnn/executors/trainer_exchange.py``): a slot is requested ahead by the
    prefetch's done-callback, or by the training thread when the task comes up first. A
    ``Future``'s waiters wake before its callbacks run, so the training thread can take a task
    up (and request its slot) before the callback for that task requests one too. Counting
    "a request outstanding?" cannot tell the two apart: the task got two slots, the surplus
    one was held to the epoch's end, and its last step never closed (the Ray case above
    stalled with 36 of 40 tasks done). One request per task, whichever comes first."""
    import queue as queue_mod
    from concurrent.futures import Future
    from types import SimpleNamespace

    from fgnn.executors.trainer_exchange import TrainerExchange
    from fgnn.executors.task_record import TaskRecord

    class Counting(StepLedger):
        requests = 0

        def request(self, *a):  # noqa: D102 - counts, then the ledger's own
            Counting.requests += 1
            return super().request(*a)

    ledger = Counting()
    ledger.begin_epoch(0, 8, 4)
    member = ExchangeMember("t0", _model(), LR, call=lambda m, *a: getattr(ledger, m)(*a),
                            store=dist.HashStore(), timeout_s=10.0)
    member.begin(0)
    ex = object.__new__(TrainerExchange)  # no Ray: only what a task's path reads
    ex.name, ex.member, ex.incarnation, ex._epoch = "t0", member, 0, 0
    ex._outbox = queue_mod.SimpleQueue()  # deliveries stay queued: not under test
    ex._lock, ex._next, ex._claiming = threading.Lock(), None, False
    ex._asks, ex._asks_lock = {}, threading.Lock()
    ex._probe_ledger = lambda: None  # a claim slower than a second under load probes it
    assert member.ready.wait(10)
    x, y = _data(8)

    def backward() -> torch.Tensor:
        loss = F.cross_entropy(member.model(x), y)
        loss.backward()
        return loss

    fetch: Future = Future()
    fetch.set_result(SimpleNamespace(task_id=5))  # its waiter (the training thread) woke
    rec = ex.train(0, 5, 8, TaskRecord(), backward, threading.Event())
    ex.prefetched(fetch)  # ... and only now the callback for the same task runs
    assert rec is not None and Counting.requests == 1, Counting.requests
    assert rec.deferred and rec.loss is not None and "x_claim_s" in rec.exchange_parts
    member.stop()


def _gated_events(ledger: StepLedger, name: str, gate: threading.Event, delay_s: float = 0.0):
    """A member's event reader that holds every ``reduce`` event until ``gate`` is set (its
    reducer stalls, as on a starved process), each for ``delay_s`` more."""
    def events(index: int, version: int):
        ev = ledger.next_event(name, index, version, 1.0)
        if ev is not None and ev.kind == "reduce":
            gate.wait()
            time.sleep(delay_s)
        return ev
    return events


@pytest.mark.parametrize("transport", ["gloo", "shm"])
def test_a_shared_memory_group_never_waits_for_a_slow_member(transport, tmp_path):
    """From shared memory a step's sum reads the listed rows: no member waits for another
    one's reducer. With a standby whose reducer stalls, the Trainers take every step of the
    epoch (on gloo each sum waits for the stalled member, so they cannot); once it wakes, the
    standby applies the same steps, bit for bit."""
    x, y, tasks, want = _epoch(n_seeds=40)  # 4 steps, 16 tasks
    ledger, gate = StepLedger(), threading.Event()
    g = _Group(3, tasks, group=4, ledger=ledger, ring_rows=16, events={
        "m2": _gated_events(ledger, "m2", gate)},
        ring_dir=None if transport == "gloo" else str(tmp_path))
    for m in g.members.values():
        m.begin(0)
    threads = g.start(("m0", "m1"), x, y)
    deadline = time.monotonic() + 4.0  # the Trainers apply all 4 steps (their threads may
    while time.monotonic() < deadline and not all(  # still wait for a slot nobody needs)
            g.members[n].version == 4 for n in ("m0", "m1")):
        time.sleep(0.01)
    done = all(g.members[n].version == 4 for n in ("m0", "m1"))
    assert g.members["m2"].version == 0 and g.members["m0"].transport == transport
    gate.set()
    assert _joined(threads, 30) and done == (transport == "shm")
    weights = g.finish()
    for w in weights:
        assert torch.allclose(w, want, atol=1e-6) and torch.equal(w, weights[0])


@pytest.mark.parametrize("rule", ["on", "off"])
def test_a_ring_row_is_reused_only_after_every_member_applied_its_step(monkeypatch, tmp_path,
                                                                      rule):
    """Rings of 5 rows (one more than a step's slots), and a standby whose reducer reads each
    step 50 ms late: the Trainers write a row again only once the standby applied the step it
    held, and every member ends with the single-process weights. With the rule off they
    overwrite rows the standby has not read yet, and its weights go wrong."""
    if rule == "off":
        monkeypatch.setattr(GradientRing, "reusable", staticmethod(lambda before, readers: True))
    x, y, tasks, want = _epoch(n_seeds=60)  # 6 steps, 24 tasks: each Trainer writes ~12 rows
    ledger, gate = StepLedger(), threading.Event()
    gate.set()
    g = _Group(3, tasks, group=4, ledger=ledger, ring_rows=5, ring_dir=str(tmp_path),
               events={"m2": _gated_events(ledger, "m2", gate, delay_s=0.05)})
    for m in g.members.values():
        m.begin(0)
    _joined(g.start(("m0", "m1"), x, y), 30)
    weights = g.finish()
    exact = all(torch.allclose(w, want, atol=1e-6) for w in weights)
    assert exact == (rule == "on")


def test_a_member_holding_more_slots_of_a_step_than_ring_rows_does_not_wait_for_itself(
        tmp_path):
    """Rings of 2 rows and steps of 4 slots: one Trainer takes every task, so its third
    gradient of a step would need a row holding a gradient of that same step, which no
    member applies before the step closes, and the step cannot close without it. That
    gradient is kept in memory instead and its step sums over gloo: no wait, exact steps.
    (Waiting for the row held every writer until the group's timeout: the full suite hung
    there, 2026-11-25.) The runtime sizes rings above a step's slots
    (:func:`fgnn.exchange.gradring.ring_rows`)."""
    x, y, tasks, want = _epoch(n_seeds=40)
    g = _Group(2, tasks, group=4, ring_rows=2, ring_dir=str(tmp_path))
    for m in g.members.values():
        m.begin(0)
    assert _joined(g.start(("m0",), x, y), 10), "the writer waits for a row of its own step"
    weights = g.finish()
    for w in weights:
        assert torch.allclose(w, want, atol=1e-6) and torch.equal(w, weights[0])
    assert ring_rows(4) > 4 and ring_rows(1) == 8


def test_a_member_dying_after_its_delivery_still_counts_from_shared_memory(tmp_path):
    """From shared memory a delivered gradient is in the member's ring before the ledger
    accepts it, so a member that dies right after its delivery (before the step closes and
    before the runtime releases it) loses nothing: the step sums its row and its task counts
    once (on gloo the step's sum fails and the task is trained again, see
    :func:`test_a_member_dying_inside_a_reduction_rebuilds_the_group_exactly_once`)."""
    x, y, tasks, want = _epoch(n_seeds=40)
    dead = {"m2"}  # found by the ledger's probe once every task is in
    g = _Group(3, tasks, group=4, ring_dir=str(tmp_path),
               ledger=StepLedger(alive=lambda name: name not in dead))
    for m in g.members.values():
        m.begin(0)
    g.train(g.members["m2"], x, y, die_after_deliver=True)  # task 0 of step 0, then dies
    _joined(g.start(("m0", "m1"), x, y), 30)
    for w in g.finish(["m0", "m1"]):
        assert torch.allclose(w, want, atol=1e-6)
    led = g.ledger.ledger()
    assert led["applied"] == {t: 1 for t in range(len(tasks))} and led["by"][0] == "m2"
    assert led["attempts"][0] == 1 and sorted(g.acked) == list(range(1, len(tasks)))


def test_the_ledger_names_rings_only_for_one_host_with_a_ring_each():
    """A ``form`` lists the members' ring files (rank order) only when every member has one
    and all are on one host; otherwise the group sums over gloo."""
    def form(rings: dict) -> tuple:
        ledger = StepLedger()
        ledger.begin_epoch(0, 4, 2)
        ledger.expect(list(rings))
        for i, (name, ring) in enumerate(rings.items()):
            ledger.join(name, i, 0, None, ring)
        return [e for e in ledger._log if e.kind == "form"][-1].rings

    assert form({"a": ("h1", "/r/a"), "b": ("h1", "/r/b")}) == ("/r/a", "/r/b")
    assert form({"a": ("h1", "/r/a"), "b": ("h2", "/r/b")}) == ()
    assert form({"a": ("h1", "/r/a"), "b": None}) == ()


def test_a_gradient_ring_round_trip(tmp_path):
    """A ring's rows and published steps as another process sees them (the file), its
    reuse rule, and a file that is not a ring refused."""
    path = str(tmp_path / "r")
    ring = GradientRing.create(path, 3, 5, applied=2)
    row, before = ring.next_row(7)
    ring.rows[row] = torch.arange(5.0)
    other = GradientRing.open(path)
    assert other.rows.shape == (3, 5) and other.applied == 2
    assert torch.equal(other.rows[row], torch.arange(5.0))
    ring.applied = 8
    assert other.applied == 8 and before is None
    for _ in range(2):
        ring.next_row(9)
    assert ring.next_row(10) == (0, 7)  # row 0 again: it held step 7
    assert GradientRing.reusable(7, [ring, other]) and not GradientRing.reusable(8, [ring])
    (tmp_path / "junk").write_bytes(b"\0" * 200)
    with pytest.raises(ValueError, match="not a gradient ring"):
        GradientRing.open(str(tmp_path / "junk"))
    with pytest.raises(FileExistsError):
        GradientRing.create(path, 3, 5)


def test_a_member_joining_after_the_epochs_end_waits_for_the_next_epoch(rings):
    """A restarted Trainer that joins once the epoch's ``end`` is in the log: the members'
    reducers stopped at the ``end``, so a group formed then never forms. The ledger formed
    one anyway, and the joiner waited for its peers until the group's timeout (60 s in a
    job), holding up the next epoch (``FGNN_TEST_EXCHANGE=collective pytest
    tests/test_runtime.py -k killed_trainers`` stalled that way, 1 run in 4). The joiner now
    joins the next epoch's group, and that epoch's steps stay the same on every member."""
    x, y, tasks, _ = _epoch(n_seeds=20)
    g = _Group(2, tasks, group=4, ring_dir=rings)
    g.run(x, y)
    g.finish()
    late = g.member("late")
    g.members["late"] = late
    late.begin(7)
    assert [e.kind for e in g.ledger._log][-1] == "end"  # no group after the epoch's end
    g.epoch = 1
    g.ledger.begin_epoch(1, len(tasks), 4)
    assert late.finish(5), "the joiner still waits in a group that cannot form"
    g.queue.extend(enumerate(tasks))
    g.run(x, y)
    weights = g.finish()
    assert all(torch.equal(w, weights[0]) for w in weights)
    assert g.ledger.ledger()["applied"] == {t: 1 for t in range(len(tasks))}


def test_a_member_without_a_ring_makes_its_group_sum_over_gloo_exactly(tmp_path):
    """A member whose ring could not be made (here its directory does not exist; in a job, a
    full ``/dev/shm``) joins without one: the ledger names no rings, the group sums over gloo,
    and the members that wrote their gradients to rows add those rows to their own share:
    the steps stay exact."""
    x, y, tasks, want = _epoch(n_seeds=40)
    g = _Group(2, tasks, group=4, ring_dir={"m0": str(tmp_path), "m1": str(tmp_path / "no")})
    g.run(x, y)
    weights = g.finish()
    assert g.members["m0"]._ring is not None and g.members["m1"]._ring is None
    assert [e.rings for e in g.ledger._log if e.kind == "form"][-1] == ()
    for w in weights:
        assert torch.allclose(w, want, atol=1e-6) and torch.equal(w, weights[0])
