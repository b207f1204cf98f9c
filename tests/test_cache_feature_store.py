"""load_cache, TensorSource and the tiered FeatureStore (device cache, peers, host)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from fgnn.cache import (FeatureSource, FeatureStore, TensorSource, clique_placement,
                        load_cache)
from fgnn.cache.lookup import CacheLookup
from fgnn.cache.placement import job_placement, replicate_placement
from fgnn.sampling.base import Sample

N, F = 50, 4


def feats() -> torch.Tensor:
    return torch.arange(N * F, dtype=torch.float32).reshape(N, F)


def test_tensor_source_over_tensor_numpy_and_memmap(tmp_path):
    x = feats()
    mm = np.lib.format.open_memmap(tmp_path / "f.npy", mode="w+", dtype=np.float32,
                                   shape=(N, F))
    mm[:] = x.numpy()
    ids = torch.tensor([3, 0, 49, 3])
    for data in (x, x.numpy(), mm):
        src = TensorSource(data)
        assert isinstance(src, FeatureSource)
        assert (src.num_rows, src.dim, src.dtype, src.row_bytes) == (N, F, torch.float32, 16)
        assert torch.equal(src.read(ids), x[ids])
    with pytest.raises(ValueError, match="outside"):
        TensorSource(x).read(torch.tensor([N]))
    with pytest.raises(ValueError, match="2-D"):
        TensorSource(torch.zeros(3))


def test_load_cache_top_alpha_rows(device):
    hot = torch.rand(N, generator=torch.Generator().manual_seed(0))
    cache = load_cache(hot, 0.1, feats(), device)
    top = torch.argsort(hot, descending=True)[:5]
    assert cache.num_cached == 5 and cache.nbytes == 5 * F * 4
    assert cache.ids.tolist() == top.tolist()
    assert torch.equal(cache.rows.cpu(), feats()[top])
    lookup = FeatureStore.single(feats(), cache, device).lookup
    assert lookup.devices(torch.arange(N)).eq(0).sum() == 5
    assert lookup.positions(0, top).tolist() == [0, 1, 2, 3, 4]
    assert load_cache(hot, 0.0, feats()).num_cached == 0
    assert load_cache(hot, 1.0, feats()).num_cached == N


@pytest.mark.parametrize("alpha", [-0.1, 1.5, float("nan")])
def test_load_cache_rejects_alpha(alpha):
    with pytest.raises(ValueError, match="alpha"):
        load_cache(torch.rand(N), alpha, feats())


def test_load_cache_rejects_wrong_hotness_length():
    with pytest.raises(ValueError, match=r"hotness has shape \(49,\), expected \(50,\)"):
        load_cache(torch.rand(N - 1), 0.1, feats())


def test_single_store_gather_mark_and_counters(device):
    hot = torch.arange(N, 0, -1).float()  # vertices 0..9 hottest
    store = FeatureStore.single(feats(), load_cache(hot, 0.2, feats(), device), device)
    ids = torch.tensor([12, 3, 40, 0, 9, 11])
    out = store.gather(ids)
    assert out.device.type == torch.device(device).type
    assert torch.equal(out.cpu(), feats()[ids])
    s = store.stats
    assert (s.hits, s.peer, s.misses) == (3, 0, 3)
    assert s.bytes == {"device": 3 * 16, "peer": 0, "host": 3 * 16}
    assert s.hit_rate == pytest.approx(0.5)
    sample = Sample(ids[:2], [], ids)
    assert store.mark(sample) is sample
    assert sample.cached.dtype == torch.uint8
    assert sample.cached.tolist() == [0, 1, 0, 1, 1, 0]  # holder bits: device 0 or none
    done = store.reset_stats()
    assert done.lookups == 6 and store.stats.lookups == 0
    assert torch.equal(store.gather(torch.zeros(0, dtype=torch.long)).cpu(), torch.zeros(0, F))


def test_store_without_cache_reads_host_numpy():
    store = FeatureStore.single(feats().numpy())
    ids = torch.tensor([1, 2])
    assert torch.equal(store.gather(ids), feats()[ids])
    assert store.stats.misses == 2 and store.stats.hits == 0


def test_placement_store_reads_local_peer_and_host():
    # Song & Jiang worked example: B1 = [1, 3], B2 = [4, 2] on a 6-vertex graph.
    x = torch.arange(6 * F, dtype=torch.float32).reshape(6, F)
    p = torch.tensor([4, 6, 6, 6, 5, 5], dtype=torch.float64) / 6
    pl = clique_placement(p, 2, 2, alpha=0.3)
    buffers = [x[b] for b in pl.buffers]  # shared by both stores
    s0 = FeatureStore.from_placement(x, pl, 0, buffers)
    ids = torch.tensor([0, 1, 2, 3, 4, 5, 2])
    assert torch.equal(s0.gather(ids), x[ids])
    st = s0.stats
    assert (st.hits, st.peer, st.misses) == (2, 3, 2)
    assert st.bytes == {"device": 32, "peer": 48, "host": 32}
    s1 = FeatureStore.from_placement(x, pl, 1)  # buffers read from host
    assert torch.equal(s1.gather(ids), x[ids])
    assert (s1.stats.hits, s1.stats.peer, s1.stats.misses) == (3, 2, 2)
    assert s1.cached_mask(ids).tolist() == [False, False, True, False, True, False, True]


def test_gather_rejects_bad_ids():
    store = FeatureStore.single(feats())
    with pytest.raises(ValueError, match="outside"):
        store.gather(torch.tensor([N]))
    with pytest.raises(ValueError, match="integer"):
        store.gather(torch.tensor([0.5]))
    with pytest.raises(ValueError, match="host"):
        FeatureStore.single([[1.0]])


class ListSource:
    """A minimal custom FeatureSource (e.g. what a disk tier provides)."""

    def __init__(self, x: torch.Tensor):
        self.x = x
        self.reads = 0

    num_rows = property(lambda self: self.x.shape[0])
    dim = property(lambda self: self.x.shape[1])
    dtype = property(lambda self: self.x.dtype)

    def read(self, ids: torch.Tensor) -> torch.Tensor:
        self.reads += 1
        return self.x[ids]


def test_store_over_custom_source_reads_only_misses():
    src = ListSource(feats())
    assert isinstance(src, FeatureSource)
    store = FeatureStore.single(src, load_cache(torch.arange(N, 0, -1).float(), 0.5, src))
    assert torch.equal(store.gather(torch.tensor([0, 1])), feats()[:2])
    assert src.reads == 1  # only load_cache read the host; the all-hit batch did not
    store.gather(torch.tensor([0, 49]))
    assert src.reads == 2


def test_count_advances_counters_like_gather():
    x = torch.arange(6 * F, dtype=torch.float32).reshape(6, F)
    p = torch.tensor([4, 6, 6, 6, 5, 5], dtype=torch.float64) / 6
    pl = clique_placement(p, 2, 2, alpha=0.3)
    a, b = (FeatureStore.from_placement(x, pl, 0) for _ in range(2))
    ids = torch.tensor([0, 1, 2, 3, 4, 5, 2])
    a.gather(ids)
    b.count(ids)
    assert a.stats.as_dict() == b.stats.as_dict()


# ---------------------------------------------------------------------------- M-step marks
def _job():
    """Devices 0 (a standby: 3 rows), 1 (a Sampler: nothing), 2 and 3 (Trainers: 6 rows each,
    Algorithm 1 with c = 0, so their 12 rows are distinct)."""
    h = torch.arange(N, 0, -1).float()  # vertex 0 hottest
    return job_placement(h, 4, trainers=[2, 3], capacity=6, standbys=[0], standby_capacity=3,
                         strategy="algorithm1", peer_cost=0.0)[1]


IDS = torch.tensor([0, 7, 49, 2, 11, 30, 5, 1, 12, 20])


@pytest.mark.parametrize("local", [0, 2, 3])
@pytest.mark.parametrize("peers_from_host", [False, True])
def test_marks_split_a_batch_like_the_lookup(local, peers_from_host):
    pl = _job()
    marks = pl.holder_bits()[IDS]  # what the Sampler's M step attaches
    a = FeatureStore.from_placement(feats(), pl, local, peers_from_host=peers_from_host)
    b = FeatureStore.from_placement(feats(), pl, local, peers_from_host=peers_from_host)
    assert torch.equal(a.gather(IDS, marks), feats()[IDS])
    assert torch.equal(b.gather(IDS), feats()[IDS])
    assert a.stats.as_dict() == b.stats.as_dict()
    own = set(pl.buffers[local].tolist())
    anywhere = set(torch.cat(pl.buffers).tolist())
    n_local = sum(v in own for v in IDS.tolist())
    n_host = sum(v not in anywhere for v in IDS.tolist())
    assert (a.stats.hits, a.stats.peer, a.stats.misses) == \
        (n_local, len(IDS) - n_local - n_host, n_host)


def test_standby_extraction_and_counters_from_the_samplers_marks():
    # The standby (device 0) caches vertices 0..2 only; the Trainers hold 0..11 between them.
    pl = _job()
    store = FeatureStore.from_placement(feats(), pl, 0, peers_from_host=True)
    marks = pl.holder_bits()[IDS]
    out = store.gather(IDS, marks)
    assert torch.equal(out, feats()[IDS])
    # local: 0, 2, 1; peer: 7, 11, 5 (on a Trainer); host: 49, 30, 12, 20
    assert (store.stats.hits, store.stats.peer, store.stats.misses) == (3, 3, 4)
    assert store.stats.bytes == {"device": 3 * 16, "peer": 3 * 16, "host": 4 * 16}
    # The old M step marked against the Trainers' full-budget cache: for the standby, its own
    # rows would look like peer rows. Such marks disagree with the standby's placement and are
    # refused rather than miscounted.
    trainers_only = _job()
    trainers_only.buffers[0] = trainers_only.buffers[0][:0]
    with pytest.raises(ValueError, match="disagree"):
        store.gather(IDS, trainers_only.holder_bits()[IDS])
    with pytest.raises(ValueError, match="integer holder bits"):
        store.gather(IDS, marks.bool())
    with pytest.raises(ValueError, match="above"):
        store.gather(IDS[:1], torch.tensor([0b10000], dtype=torch.uint8))


def test_store_mark_gives_holder_bits_of_its_view():
    pl = _job()
    store = FeatureStore.from_placement(feats(), pl, 0, peers_from_host=True)
    sample = store.mark(Sample(IDS[:2], [], IDS))
    # the standby reads 0, 2, 1 itself (bit 0), 7, 11, 5 from the lowest Trainer holding them
    dev_num = store.lookup.devices(IDS)
    assert sample.cached.tolist() == [0 if d < 0 else 1 << d for d in dev_num.tolist()]
    assert torch.equal(store.gather(IDS, sample.cached), feats()[IDS])


def test_a_trainer_store_reads_the_shared_holder_map_in_place():
    """The runtime's cache map (one copy a host, a read-only object-store array) is the
    store's lookup itself: no per-Trainer (N,) array is made, and the answers are the
    placement's."""
    import numpy as np

    from fgnn.executors.graph_kind import build_store

    pl = _job()
    shared = pl.holder_bits().numpy()
    shared.setflags(write=False)                       # as Ray maps it from the object store
    store = build_store(feats(), pl, 0, holders=shared)
    assert np.shares_memory(store.lookup.holders.numpy(), shared)
    own = FeatureStore.from_placement(feats(), pl, 0, peers_from_host=True)
    ids = torch.arange(pl.num_nodes)
    assert torch.equal(store.lookup.devices(ids), own.lookup.devices(ids))
    assert torch.equal(store.gather(ids), feats())
    # what a lookup holds beside the map is O(cached rows), not O(N); replicas share a table
    assert store.lookup.own_bytes == 16 * sum(int(b.numel()) for b in pl.buffers)
    rep = replicate_placement(torch.arange(N, 0, -1).float(), 4, 6)
    assert CacheLookup.from_placement(rep, 2).own_bytes == 16 * 6
    assert CacheLookup.from_placement(pickle.loads(pickle.dumps(rep)), 1).own_bytes == 16 * 6
