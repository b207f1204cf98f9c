"""Node-level feature partitioning: hotness (Rule 1 + top reader), hash, replicate; tier traffic."""

from __future__ import annotations

import pytest
import torch

from fgnn.cache.node_partition import (NodePartition, hash_partition, hotness_partition,
                                       partition_rows, replicate_partition)
from fgnn.cache.node_traffic import TrafficMeter
from fgnn.cache.partitioned_source import PartitionedSource

# Worked example: 8 rows, 2 nodes. Totals [17, 5, 4, 6, 0, 1, 2, 4].
COUNTS = torch.tensor([[9, 5, 0, 3, 0, 1, 0, 2],
                       [8, 0, 4, 3, 0, 0, 2, 2]], dtype=torch.float32)


def test_hotness_worked_example():
    p = hotness_partition(COUNTS, 2, budget=1)
    # Row 0 is the hottest overall: replicated (Rule 1). The rest go to their top reader; ties
    # (rows 3 and 7 read 3/3 and 2/2, row 4 read by none) rotate from row % 2.
    assert p.replicated.tolist() == [True] + [False] * 7
    assert p.owner[1:].tolist() == [0, 1, 1, 0, 0, 1, 1]
    assert p.owned_rows() == [3, 4]
    assert p.host_rows() == [4, 5]
    assert p.rows_of(0).tolist() == [0, 1, 4, 5]
    assert p.summary()["replicated_rows"] == 1


def test_hotness_cap_sends_overflow_to_next_best_node():
    # Node 0 reads everything: it may own only ceil(4 / 2) = 2 rows, the two with most regret.
    counts = torch.tensor([[4, 3, 2, 1], [0, 0, 0, 0]], dtype=torch.float32)
    p = hotness_partition(counts, 2, budget=0)
    assert p.owner.tolist() == [0, 0, 1, 1]
    assert p.owned_rows() == [2, 2]
    # With slack the cap is ceil(2 * 2) = 4: node 0 keeps all it reads.
    assert hotness_partition(counts, 2, 0, slack=1.0).owner.tolist() == [0, 0, 0, 0]


def test_hotness_regret_decides_who_gets_first_choice():
    # Rows 0-2 prefer node 0, which may own ceil(4 / 2) = 2 rows.
    # Row 2 loses least by moving (6 vs 5): it is the one sent to node 1.
    counts = torch.tensor([[9, 8, 6, 0], [0, 1, 5, 3]], dtype=torch.float32)
    p = hotness_partition(counts, 2, budget=0)
    assert p.owner.tolist() == [0, 0, 1, 1]


def test_hotness_never_replicates_unread_rows_and_clips_budget():
    counts = torch.tensor([[2, 0, 0], [0, 1, 0]], dtype=torch.float32)
    p = hotness_partition(counts, 2, budget=10)
    assert p.replicated.tolist() == [True, True, False]
    assert p.host_rows() == [3, 2]  # row 2 unread: hash owner 2 % 2 = 0


def test_hotness_balances_four_nodes():
    g = torch.Generator().manual_seed(0)
    counts = torch.randint(0, 5, (4, 1001), generator=g).float()
    counts[0] += 10  # node 0 would take everything uncapped
    p = hotness_partition(counts, 4, budget=101)
    assert int(p.replicated.sum()) == 101
    assert max(p.owned_rows()) == 225 and sum(p.owned_rows()) == 900
    # the replicated rows are the 101 largest totals
    tot = counts.sum(0)
    assert float(tot[p.replicated].min()) >= float(tot[~p.replicated].max())


def test_hash_and_replicate():
    h = hash_partition(5, 2)
    assert h.owner.tolist() == [0, 1, 0, 1, 0] and not bool(h.replicated.any())
    assert h.host_rows() == [3, 2]
    r = replicate_partition(5, 3)
    assert r.host_rows() == [5, 5, 5]
    assert partition_rows("hash", 5, 2).owner.tolist() == h.owner.tolist()
    assert partition_rows("hotness", 8, 2, counts=COUNTS, budget=1).owner.tolist() == \
        hotness_partition(COUNTS, 2, 1).owner.tolist()


def test_one_node_hotness_is_everything_local():
    p = hotness_partition(COUNTS[:1], 1, budget=2)
    assert p.host_rows() == [8]


@pytest.mark.parametrize("call, match", [
    (lambda: partition_rows("metis", 4, 2), "strategy"),
    (lambda: partition_rows("hotness", 4, 2), "counts"),
    (lambda: partition_rows("hotness", 4, 2, counts=COUNTS), "num_rows=4"),
    (lambda: hotness_partition(COUNTS, 3, 1), "num_nodes=3"),
    (lambda: hotness_partition(-COUNTS, 2, 1), "non-negative"),
    (lambda: hotness_partition(COUNTS, 2, -1), "budget"),
    (lambda: hotness_partition(COUNTS, 2, 1, slack=-0.1), "slack"),
    (lambda: hash_partition(4, 0), "num_nodes"),
    (lambda: replicate_partition(-1, 2), "num_rows"),
    (lambda: NodePartition(torch.tensor([0, 2]), torch.zeros(2, dtype=torch.bool), 2), "owner"),
    (lambda: hash_partition(4, 2).holds(2), "node"),
])
def test_bad_input_is_named(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_traffic_meter_counts_tiers():
    p = hotness_partition(COUNTS, 2, budget=1)  # node 0 holds 0,1,4,5; node 1 holds 0,2,3,6,7
    cached = torch.zeros(8, dtype=torch.bool)
    cached[0] = True
    meter = TrafficMeter(p, row_bytes=16, device_cached=cached)
    assert meter.record(0, torch.tensor([0, 1, 2, 3, 5])) == {"device": 1, "local": 2,
                                                              "remote": 2}
    meter.record(1, torch.tensor([1, 2, 4]))
    meter.record(0, torch.tensor([7]))
    out = meter.take()
    assert out[0]["rows"] == {"device": 1, "local": 2, "remote": 3}
    assert out[0]["bytes"]["remote"] == 48
    assert out[0]["remote_from"] == [0, 3]
    assert out[1]["rows"] == {"device": 0, "local": 1, "remote": 2}
    assert out[1]["remote_from"] == [2, 0]
    assert meter.take()[0]["rows"]["remote"] == 0  # take() resets


def test_traffic_meter_replicate_has_no_remote_and_rejects_bad_ids():
    meter = TrafficMeter(replicate_partition(4, 2), row_bytes=4)
    assert meter.record(1, torch.tensor([0, 1, 2, 3]))["remote"] == 0
    with pytest.raises(ValueError, match="outside"):
        meter.record(0, torch.tensor([4]))
    with pytest.raises(ValueError, match="node"):
        meter.record(2, torch.tensor([0]))
    with pytest.raises(ValueError, match="device_cached"):
        TrafficMeter(replicate_partition(4, 2), 4, torch.ones(3, dtype=torch.bool))


def _sources(p, feats):
    calls = []

    def fetch(requests):
        calls.append({o: ids.tolist() for o, ids in requests.items()})
        for o, ids in requests.items():
            assert bool(p.holds(o)[ids].all())  # only ever asks an owner for its rows
        return {o: feats[ids] for o, ids in requests.items()}

    return calls, [PartitionedSource(p, m, feats[p.rows_of(m)], fetch)
                   for m in range(p.num_nodes)]


def test_partitioned_source_reads_local_and_remote_rows():
    feats = torch.arange(8 * 3, dtype=torch.float32).reshape(8, 3)
    p = hotness_partition(COUNTS, 2, budget=1)  # node 0 holds 0,1,4,5; node 1 holds 0,2,3,6,7
    calls, (s0, s1) = _sources(p, feats)
    ids = torch.tensor([3, 0, 5, 7, 1, 2])
    assert torch.equal(s0.read(ids), feats[ids])
    assert calls == [{1: [3, 7, 2]}]  # one request for the owner of the remote rows
    st = s0.take_stats()
    assert st["rows"] == {"local": 3, "remote": 3}
    assert st["bytes"]["remote"] == 3 * 12 and st["remote_wait_s"] >= 0
    assert s0.take_stats()["rows"] == {"local": 0, "remote": 0}
    assert torch.equal(s1.read(torch.tensor([0, 6])), feats[[0, 6]]) and len(calls) == 1


def test_partitioned_source_through_the_feature_store():
    from fgnn.cache import FeatureStore, load_cache

    feats = torch.rand(8, 4)
    p = hash_partition(8, 2)
    _, (s0, _) = _sources(p, feats)
    hot = torch.tensor([0, 0, 0, 9, 0, 0, 0, 0], dtype=torch.float32)  # row 3 cached
    store = FeatureStore.single(s0, load_cache(hot, 1 / 8, feats))
    ids = torch.tensor([3, 1, 2, 4])
    assert torch.equal(store.gather(ids), feats[ids])
    assert s0.rows == {"local": 2, "remote": 1}  # row 3 came from the device cache


def test_partitioned_source_rejects_bad_input():
    feats = torch.rand(8, 2)
    p = hash_partition(8, 2)
    with pytest.raises(ValueError, match="local"):
        PartitionedSource(p, 0, feats, lambda r: {})
    with pytest.raises(ValueError, match="node"):
        PartitionedSource(p, 2, feats[:4], lambda r: {})
    with pytest.raises(TypeError, match="fetch"):
        PartitionedSource(p, 0, feats[p.rows_of(0)], None)
    src = PartitionedSource(p, 0, feats[p.rows_of(0)], lambda r: {o: feats[:1] for o in r})
    with pytest.raises(ValueError, match="outside"):
        src.read(torch.tensor([8]))
    with pytest.raises(ValueError, match="returned rows"):
        src.read(torch.tensor([1, 3]))


def test_read_counter_and_node_access_counts_sum_each_nodes_trainers_per_epoch():
    from fgnn.cache.node_counts import ReadCounter, node_access_counts

    a, b, c = ReadCounter(6), ReadCounter(6), ReadCounter(6)
    a.record(torch.tensor([0, 1, 2]))
    a.record(torch.tensor([1], dtype=torch.int32))  # a CUDA Sampler's narrowed ids
    b.record(torch.tensor([1, 5]))
    c.record(torch.tensor([4]))
    reads = {"a": a.take(), "b": b.take(), "c": c.take(), "gone": torch.ones(6)}
    assert reads["a"].tolist() == [1, 2, 1, 0, 0, 0] and reads["a"].dtype == torch.int32
    assert a.take().tolist() == [0] * 6  # take starts again from zero
    got = node_access_counts(reads, {"a": 0, "b": 1, "c": 0}, 2, 6, epochs=2)
    # "gone" (no node: it trains no more) is left out; counts are per epoch
    assert got.tolist() == [[0.5, 1.0, 0.5, 0, 0.5, 0], [0, 0.5, 0, 0, 0, 0.5]]
    assert node_access_counts({"a": torch.zeros(6, dtype=torch.int32)}, {"a": 0}, 2, 6) is None
    assert node_access_counts({}, {}, 2, 6) is None
    with pytest.raises(ValueError, match="node_of"):
        node_access_counts({"a": reads["a"]}, {"a": 2}, 2, 6)
    with pytest.raises(ValueError, match=r"reads\['a'\]"):
        node_access_counts({"a": torch.ones(5)}, {"a": 0}, 2, 6)


def test_a_given_hotness_picks_the_replicated_rows_and_counts_the_owners():
    # the even split of a hotness map (what the runtime falls back to) leaves the owners to
    # row % M; measured counts move them, and the replicated set follows ``hotness``
    hot = torch.tensor([0.0, 1, 9, 1, 1, 1])
    even = hotness_partition((hot / 2).repeat(2, 1), 2, 1)
    assert even.replicated.tolist() == [False, False, True, False, False, False]
    assert even.owner[~even.replicated].tolist() == [0, 1, 1, 0, 1]
    counts = torch.tensor([[0.0, 0, 0, 5, 5, 5], [1, 1, 9, 0, 0, 0]])
    p = hotness_partition(counts, 2, 1, hotness=hot)
    assert p.replicated.tolist() == even.replicated.tolist()
    assert p.owner[[0, 1, 3, 4, 5]].tolist() == [1, 1, 0, 0, 0]
    with pytest.raises(ValueError, match="hotness must be"):
        hotness_partition(counts, 2, 1, hotness=torch.ones(5))
