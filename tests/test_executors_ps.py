"""The parameter server's rule (fgnn/exchange/ps.py), exactly, without Ray.

* a step averages the R task gradients of one mini-batch, weighted by seeds, and equals the
  single-process Adam step on the whole mini-batch;
* a Trainer computes only on a claimed slot, so every gradient of a step comes from the previous
  step's weights, whatever the number and interleaving of Trainers;
* duplicates, released slots, the last partial step and the profiling epoch.
"""

from __future__ import annotations

import asyncio
import random

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fgnn.exchange.ps import Claim, ParameterServer, flatten, unflatten_into
from fgnn.executors.scheduler import epoch_batches

IN, C = 5, 3


def _model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(IN, 4), nn.ReLU(), nn.Linear(4, C))


def _data(n: int, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, IN, generator=g), torch.randint(0, C, (n,), generator=g)


def _grad(model: nn.Module, weights: torch.Tensor, x: torch.Tensor, y: torch.Tensor
          ) -> torch.Tensor:
    """Mean cross-entropy gradient over ``x`` at ``weights`` (what a Trainer pushes)."""
    params = list(model.parameters())
    unflatten_into(weights, params)
    for p in params:
        p.grad = None
    F.cross_entropy(model(x), y).backward()
    return flatten([p.grad for p in params])


def _single_step(x: torch.Tensor, y: torch.Tensor, lr: float) -> torch.Tensor:
    model = _model()
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    F.cross_entropy(model(x), y).backward()
    opt.step()
    return flatten(list(model.parameters()))


def test_a_step_of_r_tasks_is_the_single_process_step_on_their_seeds():
    x, y = _data(10)
    parts = torch.tensor_split(torch.arange(10), 4)          # 3, 3, 2, 2 seeds: uneven
    ps = ParameterServer(_model(), lr=0.05)
    ps.begin_epoch(0, tasks=4, group=4)
    worker = _model()
    v0, w0 = ps.weights()
    grads = []
    for t, idx in enumerate(parts):
        claim = ps.try_claim("t", base_version=None)
        assert claim.version == v0 and torch.equal(claim.weights, w0)
        grads.append(_grad(worker, claim.weights, x[idx], y[idx]))
        reply = ps.step(0, t, grads[-1], "t", seeds=idx.numel())
        assert reply.applied
        assert reply.version == (v0 + 1 if t == 3 else v0)  # one step, after the 4th gradient
    want = _single_step(x, y, lr=0.05)
    assert torch.allclose(ps.weights()[1], want, atol=1e-6)
    # the data tell the seed-weighted mean from the plain mean of the task means
    ps2 = ParameterServer(_model(), lr=0.05)
    ps2.begin_epoch(0, tasks=1, group=1)
    ps2.try_claim("t")
    ps2.step(0, 0, torch.stack(grads).mean(0), "t")
    assert not torch.allclose(ps2.weights()[1], want, atol=1e-6)


def _train_epochs(num_trainers: int, group: int, order_seed: int, epochs: int = 2,
                  check_fresh: bool = True) -> torch.Tensor:
    """One server, ``num_trainers`` simulated Trainers claiming and pushing in a random
    interleaving; returns the final weights."""
    x, y = _data(40)
    ps = ParameterServer(_model(), lr=0.05)
    workers = [_model() for _ in range(num_trainers)]
    held = [ps.weights() for _ in range(num_trainers)]
    rng = random.Random(order_seed)
    for epoch in range(epochs):
        tasks = epoch_batches(torch.arange(40), 8, seed=3, epoch=epoch, parts=group)
        ps.begin_epoch(epoch, tasks=len(tasks), group=group)
        todo = list(range(len(tasks)))
        busy: dict[int, tuple[int, torch.Tensor]] = {}  # trainer -> (task, gradient)
        while todo or busy:
            k = rng.randrange(num_trainers)
            if k in busy:                               # deliver
                t, g = busy.pop(k)
                ps.step(epoch, t, g, f"t{k}", seeds=tasks[t].numel())
            elif todo:                                  # claim, then compute at once
                claim = ps.try_claim(f"t{k}", held[k][0])
                if claim is None:
                    continue                            # all slots taken: wait for the step
                if claim.weights is not None:
                    held[k] = (claim.version, claim.weights)
                if check_fresh:                         # computed from the current weights
                    assert held[k][0] == ps.version
                t = todo.pop(0)
                busy[k] = (t, _grad(workers[k], held[k][1], x[tasks[t]], y[tasks[t]]))
    assert ps.version == epochs * 5                     # 40 seeds / batch 8, per epoch
    return ps.weights()[1]


@pytest.mark.parametrize("num_trainers", [2, 3, 8])
def test_the_weights_do_not_depend_on_the_number_or_order_of_trainers(num_trainers):
    one = _train_epochs(1, group=4, order_seed=0)
    for order in range(3):
        many = _train_epochs(num_trainers, group=4, order_seed=order)
        assert torch.allclose(many, one, atol=1e-6)


def test_without_slot_accounting_stale_gradients_change_the_result(monkeypatch):
    """The slot count is what keeps gradients fresh: a server that grants every claim (plain
    asynchronous updates) lets Trainers compute from old weights, and the result depends on
    them."""
    one = _train_epochs(1, group=4, order_seed=0)

    def grant_all(self, consumer, base_version=None):
        self._holders[consumer] += 1
        return Claim(self.version, self._flat)

    monkeypatch.setattr(ParameterServer, "try_claim", grant_all)
    many = _train_epochs(8, group=4, order_seed=1, check_fresh=False)
    assert not torch.allclose(many, one, atol=1e-3)


def test_claims_wait_for_the_step_and_the_last_step_may_be_partial():
    ps = ParameterServer(_model(), lr=0.1)
    ps.begin_epoch(0, tasks=5, group=2)
    g = torch.ones_like(ps.weights()[1])
    a, b = ps.try_claim("a"), ps.try_claim("b")
    assert a.version == b.version == 0
    assert ps.try_claim("c") is None                    # both slots of step 1 are taken
    assert ps.step(0, 0, g, "a").version == 0
    assert ps.try_claim("c") is None                    # b has not delivered
    assert ps.step(0, 1, g, "b").version == 1           # step 1 taken
    c = ps.try_claim("c", base_version=0)
    assert c.version == 1 and c.weights is not None
    assert ps.try_claim("a", base_version=1).weights is None  # already holds version 1
    ps.step(0, 2, g, "c")
    ps.step(0, 3, g, "a")
    assert ps.version == 2
    ps.try_claim("a")
    assert ps.slots() == 1 and ps.try_claim("b") is None  # 1 task left: a 1-slot step
    assert ps.step(0, 4, g, "a").version == 3
    led = ps.ledger()
    assert led["applied"] == {t: 1 for t in range(5)} and led["steps"] == 3


def test_duplicates_and_released_slots_are_given_back():
    ps = ParameterServer(_model(), lr=0.1)
    ps.begin_epoch(0, tasks=4, group=2)
    g = torch.ones_like(ps.weights()[1])
    ps.try_claim("a"), ps.try_claim("b")
    ps.step(0, 0, g, "a")
    reply = ps.step(0, 0, g, "b")                       # re-delivered duplicate
    assert not reply.applied and reply.version == 0
    assert ps.try_claim("c") is not None                # b's slot is free again
    assert ps.try_claim("d") is None
    assert ps.release("c") == 1                         # c died holding it
    assert ps.release("c") == 0
    assert ps.try_claim("d") is not None
    ps.step(0, 1, g, "d")
    assert ps.version == 1                              # step = the 2 delivered gradients
    ps.try_claim("c")
    assert not ps.step(3, 9, g, "c").applied            # a gradient of another epoch
    assert ps.try_claim("e") is not None                # its slot was given back
    led = ps.ledger()
    assert led["applied"] == {0: 1, 1: 1} and led["rejected"] == {0: 1, 9: 1}
    assert led["by"] == {0: "a", 1: "d"}
    with pytest.raises(ValueError, match="without a claimed slot"):
        ps.step(0, 2, g, "nobody")


def test_claim_waits_on_the_actor_loop_until_the_step_is_taken():
    async def scenario() -> tuple:
        ps = ParameterServer(_model(), lr=0.1)
        ps.begin_epoch(0, tasks=4, group=2)
        g = torch.ones_like(ps.weights()[1])
        assert await ps.claim("a") is not None and await ps.claim("b") is not None
        assert await ps.claim("c", timeout_s=0.05) is None   # times out: slots taken
        waiting = asyncio.ensure_future(ps.claim("c", base_version=0, timeout_s=30))
        await asyncio.sleep(0.01)
        assert not waiting.done()
        ps.step(0, 0, g, "a")
        ps.step(0, 1, g, "b")                                # the step frees both slots
        got = await asyncio.wait_for(waiting, 5)
        return got, ps.version

    got, version = asyncio.run(scenario())
    assert got.version == version == 1 and got.weights is not None and got.waited_s > 0


def test_epoch_tasks_cut_each_mini_batch_into_parts():
    idx = torch.arange(23)
    batches = epoch_batches(idx, 8, seed=1, epoch=2)
    tasks = epoch_batches(idx, 8, seed=1, epoch=2, parts=3)
    assert [t.numel() for t in tasks] == [3, 3, 2, 3, 3, 2, 3, 2, 2]
    for k, b in enumerate(batches):
        assert torch.equal(torch.cat(tasks[3 * k:3 * k + 3]), b)
    assert len(epoch_batches(idx, 2, seed=1, epoch=0, parts=4)) == 23  # empty parts dropped
    with pytest.raises(ValueError, match="parts"):
        epoch_batches(idx, 8, seed=1, epoch=0, parts=0)



def test_a_push_may_claim_the_next_slot_in_the_same_call():
    ps = ParameterServer(_model(), lr=0.1)
    ps.begin_epoch(0, tasks=4, group=2)
    g = torch.ones_like(ps.weights()[1])
    ps.try_claim("a"), ps.try_claim("b")
    reply = ps.step(0, 0, g, "a", claim_next=0)
    assert reply.claim is None                          # both slots of the step are taken
    reply = ps.step(0, 1, g, "b", claim_next=0)         # completes step 1, claims in step 2
    assert reply.version == 1 and reply.claim.version == 1 and reply.claim.weights is not None
    ps.step(0, 2, g, "b")                               # the claimed slot delivers
    assert ps.ledger()["applied"] == {0: 1, 1: 1, 2: 1}


def test_a_trainer_asks_for_its_next_slot_once_its_prefetch_brought_the_task():
    """The pipelined Trainer asks, at the push, whether it holds its next task: the prefetch
    runs during the forward and backward passes, so the answer is taken then, not when the
    prefetch was just submitted (then it was always no, and every task paid a claim call)."""
    import threading
    import time
    import types

    from fgnn.executors.trainer import TrainerExecutor

    tasks = iter(range(3))
    computing, fetched = threading.Event(), threading.Event()

    def fetch(epoch, generation, plan):
        computing.wait(5)  # the next task arrives while the current one computes
        computing.clear()
        fetched.set()
        task = next(tasks, None)
        return None if task is None else types.SimpleNamespace(task_id=task)

    asked = []

    def step(batch, has_next=lambda: False):
        fetched.clear()
        computing.set()
        fetched.wait(5)  # forward and backward, during which the prefetch returns
        time.sleep(0.05)
        asked.append(has_next())
        return types.SimpleNamespace(stall_s=0.0)

    trainer = types.SimpleNamespace(name="t", device=torch.device("cpu"), exchange=None,
                                    _fetch=fetch, _ack=lambda task, rec: None,
                                    _stop=threading.Event())
    computing.set()  # the first fetch does not wait
    batches, _ = TrainerExecutor._run_pipelined(trainer, step, 0, 0, None)
    assert batches == 3 and asked == [True, True, False]  # the last has no next task


@pytest.mark.parametrize("checked", [True, False])
def test_a_claim_from_a_dead_incarnation_cannot_block_the_step(monkeypatch, checked):
    """A Trainer dies while its claim call waits on the server; the runtime releases its slots;
    the call then completes. That late claim must not take a slot: the step needs every claimed
    slot to deliver, and a dead caller never will (the killed-Trainer runtime test hung on
    this). With the incarnation check switched off the step never comes."""
    ps = ParameterServer(_model(), lr=0.1)
    if not checked:
        monkeypatch.setattr(ParameterServer, "_stale", lambda self, c, i: False)
    ps.begin_epoch(0, tasks=2, group=2)
    g = torch.ones_like(ps.weights()[1])
    ps.enroll("a", 1)
    ps.enroll("b", 1)
    assert ps.try_claim("a", incarnation=1) is not None
    ps.release("a")                                   # a died holding its slot
    late = ps.try_claim("a", incarnation=1)           # its claim call completes afterwards
    ps.enroll("a", 2)                                 # the restarted a
    assert ps.try_claim("a", incarnation=2) is not None
    if checked:
        assert late is None
        assert ps.try_claim("b", incarnation=1) is not None
        ps.step(0, 0, g, "a", incarnation=2)
        ps.step(0, 1, g, "b", incarnation=1)
        assert ps.ledger()["steps"] == 1 and ps.version == 1
        stale = ps.step(0, 1, g, "a", incarnation=1)  # a late push of the dead a
        assert not stale.applied and ps.ledger()["attempts"][1] == 2
    else:
        assert late is not None                       # the dead caller holds a slot...
        assert ps.try_claim("b", incarnation=1) is None   # ...so b gets none
        ps.step(0, 0, g, "a", incarnation=2)
        assert ps.ledger()["steps"] == 0              # and the step waits for a dead caller


def test_the_server_answers_before_its_optimizer_is_built_and_its_first_step_waits(monkeypatch):
    """Adam's first construction imports torch._dynamo (seconds): the server is built without
    waiting for it, and its first step uses it once it exists, the same step as ever."""
    import threading

    from fgnn.exchange import ps as ps_module

    release, started = threading.Event(), threading.Event()
    real = ps_module._adam

    def slow_adam(*args):
        started.set()
        assert release.wait(10), "the test never released the optimizer"
        return real(*args)

    monkeypatch.setattr(ps_module, "_adam", slow_adam)
    x, y = _data(6)
    ps = ParameterServer(_model(), lr=0.05)            # returns while Adam is being built
    assert started.wait(10) and not ps._optimizer.done()
    ps.begin_epoch(0, tasks=1, group=1)
    claim = ps.try_claim("t")
    assert claim.version == 0
    grad = _grad(_model(), claim.weights, x, y)
    threading.Timer(0.2, release.set).start()
    assert ps.step(0, 0, grad, "t", seeds=6).applied  # waits for the optimizer, then steps
    assert torch.allclose(ps.weights()[1], _single_step(x, y, lr=0.05), atol=1e-6)


def test_a_resumed_optimizer_state_that_does_not_fit_fails_the_constructor():
    other = torch.optim.Adam(nn.Linear(2, 2).parameters())
    with pytest.raises(ValueError, match="parameter group"):
        ParameterServer(_model(), lr=0.05, optimizer_state=other.state_dict())
