"""The global queue, the parameter server and the Sampler executor, in-process (no Ray)."""

from __future__ import annotations

import asyncio

import pytest
import torch

from fgnn.exchange.ps import ParameterServer, flatten, unflatten_into
from fgnn.executors.queue import GlobalQueue, QueueItem
from fgnn.executors.sampler import SamplerExecutor
from fgnn.executors.transport import pack_sample, unpack_sample
from fgnn.executors.task_record import TaskRecord
from fgnn.sampling.khop import KHop

from tests.conftest import random_graph


def run(coro):
    return asyncio.run(coro)


# ---------------------------------------------------------------------------- queue
def test_queue_fifo_lease_ack_and_epoch_end():
    async def body():
        q = GlobalQueue(maxsize=4)
        await q.begin_epoch(0, 3)
        g = await q.register("t0")
        for t in range(3):
            assert (await q.put(QueueItem(0, t)))[0]
        assert q.qsize() == 3
        st, item, _ = await q.get("t0", g)
        assert st == "item" and item.task_id == 0
        assert q.poll()["leased"] == {"t0": [0]}
        assert await q.ack("t0", 0, TaskRecord(loss=1.0))
        assert not await q.ack("t0", 0, TaskRecord(loss=9.0))  # counted once
        for t in (1, 2):
            st, item, _ = await q.get("t0", g)
            await q.ack("t0", item.task_id, TaskRecord(loss=0.5))
        st, item, _ = await q.get("t0", g)           # every task acknowledged
        assert (st, item) == ("done", None)
        p = q.poll()
        assert p["done"] == 3 and [r.task_id for r in p["records"]] == [0, 1, 2]
        assert [(r.consumer, r.loss) for r in p["records"]] == [("t0", 1.0), ("t0", 0.5),
                                                                ("t0", 0.5)]
        assert q.poll(since=2)["records"][0].task_id == 2
    run(body())


def test_queue_drops_a_reissued_task_that_is_queued_leased_or_done():
    # A Sampler that dies with its last put unconfirmed gets that task re-issued; if the first
    # put did arrive, the second must not make the task train twice.
    async def body():
        q = GlobalQueue(maxsize=8)
        await q.begin_epoch(0, 3)
        g = await q.register("t0")
        for t in range(3):
            assert (await q.put(QueueItem(0, t)))[0]
        assert not (await q.put(QueueItem(0, 2)))[0]  # still queued
        _, item, _ = await q.get("t0", g)
        assert not (await q.put(QueueItem(0, item.task_id)))[0]  # leased
        await q.ack("t0", item.task_id)
        assert not (await q.put(QueueItem(0, item.task_id)))[0]  # done
        assert q.qsize() == 2
    run(body())


def test_queue_back_pressure_blocks_put_until_get():
    async def body():
        q = GlobalQueue(maxsize=1)
        await q.begin_epoch(0, 2)
        g = await q.register("t")
        await q.put(QueueItem(0, 0))
        blocked = asyncio.ensure_future(q.put(QueueItem(0, 1)))
        await asyncio.sleep(0.05)
        assert not blocked.done() and q.qsize() == 1
        await q.get("t", g)
        ok, waited = await asyncio.wait_for(blocked, 1.0)
        assert ok and waited > 0.0 and q.qsize() == 1
    run(body())


def test_queue_retire_returns_leases_and_stale_gets_take_nothing():
    async def body():
        q = GlobalQueue(maxsize=8)
        await q.begin_epoch(0, 3)
        g = await q.register("dead")
        for t in range(3):
            await q.put(QueueItem(0, t))
        await q.get("dead", g)
        await q.get("dead", g)
        assert await q.retire("dead") == [0, 1]      # back at the front, in order
        assert (await q.get("dead", g))[0] == "done"  # a stale incarnation takes nothing
        g2 = await q.register("alive")
        got = [(await q.get("alive", g2))[1].task_id for _ in range(3)]
        assert got == [0, 1, 2]
    run(body())


def test_queue_duplicates_of_done_tasks_are_skipped_and_lost_reported():
    async def body():
        q = GlobalQueue(maxsize=8)
        await q.begin_epoch(1, 2)
        g = await q.register("t")
        await q.put(QueueItem(1, 0))
        await q.put(QueueItem(1, 0))                 # re-sampled after a fault
        await q.put(QueueItem(1, 1))
        assert not (await q.put(QueueItem(0, 5)))[0]  # another epoch: dropped
        _, it, _ = await q.get("t", g)
        await q.ack("t", it.task_id)
        _, it, _ = await q.get("t", g)
        assert it.task_id == 1                        # the duplicate of 0 is skipped
        await q.fail("t", 1)
        assert q.poll()["lost"] == [1] and q.poll()["lost"] == []
        st, _, _ = await q.get("t", g, timeout=0.05)
        assert st == "timeout"
        await q.abort("test")
        assert (await q.get("t", g))[0] == "done"
    run(body())


def test_queue_raw_tasks_and_bad_args():
    async def body():
        q = GlobalQueue(2)
        await q.begin_epoch(0, 5, maxsize=5)
        assert await q.put_tasks(0, [0, 1, 2, 3, 4]) == 5
        assert q.qsize() == 5
        with pytest.raises(ValueError, match="total"):
            await q.begin_epoch(0, -1)
    run(body())
    with pytest.raises(ValueError, match="maxsize"):
        GlobalQueue(0)


# ---------------------------------------------------------------------------- ps
def _lin() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Linear(3, 2)


def test_an_executor_waits_in_the_store_for_arguments_still_on_their_way():
    """The driver creates an executor's actor without waiting for its arguments to reach the
    store: the executor's ``get_args`` waits for them (and names what never came)."""
    from fgnn.executors._argstore import QueueService

    async def body():
        store = QueueService()
        early = asyncio.ensure_future(store.get_args("fgnn-trainer-1", timeout_s=5.0))
        await asyncio.sleep(0.05)
        assert not early.done()  # the process is up before its arguments
        await store.put_args("fgnn-trainer-1", ["ref"])
        assert await early == ["ref"]
        assert await store.get_args("fgnn-trainer-1", timeout_s=0.0) == ["ref"]  # a restart
        with pytest.raises(KeyError, match="fgnn-sampler-0"):
            await store.get_args("fgnn-sampler-0", timeout_s=0.05)

    run(body())


def test_flatten_roundtrip():
    m = _lin()
    ps = list(m.parameters())
    flat = flatten(ps)
    assert flat.shape == (8,)
    unflatten_into(flat * 0 + 1, ps)
    assert all(bool((p == 1).all()) for p in ps)
    with pytest.raises(ValueError, match="flat"):
        unflatten_into(torch.zeros(3), ps)


def test_parameter_server_applies_each_task_once():
    ps = ParameterServer(_lin(), lr=0.1)
    ps.begin_epoch(0)
    v0, w0 = ps.weights()
    g = torch.ones_like(w0)
    ps.try_claim("t0")
    applied, v1, _ = ps.step(0, 7, g, "t0")
    w1 = ps.weights()[1]
    assert applied and v1 == v0 + 1 and not torch.equal(w0, w1)
    ps.try_claim("t1")
    applied, v2, _ = ps.step(0, 7, g, "t1")          # re-delivered duplicate
    assert not applied and v2 == v1 and torch.equal(w1, ps.weights()[1])
    ps.try_claim("t1")
    assert not ps.step(3, 8, g, "t1")[0]             # stale epoch
    led = ps.ledger()
    assert led["applied"] == {7: 1} and led["rejected"] == {7: 1, 8: 1} and led["by"] == {7: "t0"}
    assert led["attempts"] == {7: 2, 8: 1}            # every push counted, admitted or not
    st = ps.state()
    assert set(st) == {"model", "optimizer", "version"}


def test_parameter_server_counts_applications_apart_from_its_decision():
    # A server whose exactly-once check is broken applies the duplicate, and its own ledger says
    # so (the count is of applications, not capped by the check).
    class Broken(ParameterServer):
        def _admit(self, epoch, task_id):
            return epoch == self.epoch

    ps = Broken(_lin(), lr=0.1)
    ps.begin_epoch(0)
    g = torch.ones_like(ps.weights()[1])
    ps.try_claim("t0")
    assert ps.step(0, 7, g, "t0")[0]
    ps.try_claim("t1")
    assert ps.step(0, 7, g, "t1")[0]
    led = ps.ledger()
    assert led["applied"] == {7: 2} and led["attempts"] == {7: 2} and led["by"] == {7: "t0"}


def test_queue_ledger_counts_every_ack_and_delivery_and_polls_without_waiting():
    async def body():
        q = GlobalQueue(maxsize=4)
        await q.begin_epoch(0, 2)
        g = await q.register("t0")
        assert await q.get("t0", g, timeout=0) == ("timeout", None, 0.0)  # empty: no wait
        await q.put(QueueItem(0, 0))
        st, item, _ = await q.get("t0", g, timeout=0)
        assert st == "item" and item.task_id == 0
        assert await q.ack("t0", 0) and not await q.ack("t0", 0)
        await q.put(QueueItem(0, 1))
        await q.get("t0", g)
        await q.retire("t0")                            # leased task 1 goes back
        g = await q.register("t0")
        await q.get("t0", g)
        assert q.ledger() == {"deliveries": {0: 1, 1: 2}, "acks": {0: 2}}
        await q.begin_epoch(1, 1)
        assert q.ledger() == {"deliveries": {}, "acks": {}}
    run(body())


# ---------------------------------------------------------------------------- sampler
def test_sampler_executor_in_process_is_deterministic_per_task():
    graph = random_graph(60, 400, seed=1)
    train = torch.arange(0, 40)
    bits = torch.zeros(60, dtype=torch.uint8)  # holder bits: device 0 caches 0..9, 1 caches 5..14
    bits[:10] |= 1
    bits[5:15] |= 2
    a = SamplerExecutor(graph, KHop([3, 2]), train, 8, seed=5, cache_map=bits)
    b = SamplerExecutor(graph, KHop([3, 2]), train.numpy(), 8, seed=5, cache_map=bits.numpy())
    sa, s_time, m_time = a.sample(2, 3)
    sb, _, _ = b.sample(2, 3)
    assert sa.task_id == 3 and s_time >= 0 and m_time >= 0
    assert torch.equal(sa.input_nodes, sb.input_nodes)     # same task -> same sample anywhere
    assert torch.equal(sa.seeds, a.seeds_of(2, 3))
    assert torch.equal(sa.cached, bits[sa.input_nodes])     # M: the holder bits of the job
    assert sa.nbytes() > 0
    back = unpack_sample(pack_sample(sa))                   # the object-store form
    assert back.task_id == 3 and torch.equal(back.input_nodes, sa.input_nodes)
    assert all(torch.equal(x.src, y.src) and x.num_dst == y.num_dst
               for x, y in zip(back.blocks, sa.blocks))
    assert unpack_sample(sa) is sa
    assert sa.mark(None).cached.sum() == 0
    with pytest.raises(ValueError, match="task_id"):
        a.sample(2, 99)
    with pytest.raises(ValueError, match="batch_size"):
        SamplerExecutor(graph, KHop([3]), train, 0, seed=0)
    with pytest.raises(ValueError, match="integer holder bits"):
        SamplerExecutor(graph, KHop([3]), train, 8, seed=0, cache_map=bits.bool())
