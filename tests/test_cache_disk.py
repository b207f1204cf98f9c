"""Tests of the GIDS disk tier: disk source, CPU buffer, window cache, accumulator, loader."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from fgnn.cache.disk_accumulator import (AccessAccumulator, StorageAccessModel, eq2_num_accesses,
                                         eq3_steady_time)
from fgnn.cache.disk_cpu_buffer import CPUBufferedSource
from fgnn.cache.disk_loader import DiskFeatureLoader
from fgnn.cache.disk_source import PAGE_SIZE, DiskFeatureSource, read_npy_layout
from fgnn.cache.disk_window_cache import DeviceSoftwareCache
from fgnn.sampling.base import Sample, Sampler
from tests.conftest import random_graph


# ---------------------------------------------------------------------- helpers
def _write(path: Path, arr: np.ndarray) -> Path:
    np.save(path, arr)
    return path


def _ondisk_dir(tmp_path: Path, arr: np.ndarray, **overrides) -> Path:
    d = tmp_path / "ds"
    d.mkdir()
    np.save(d / "features.npy", arr)
    manifest = {"format": "fgnn-ondisk", "version": 1, "name": "t", "num_nodes": arr.shape[0],
                "num_edges": 0, "feat_dim": arr.shape[1], "feat_dtype": str(arr.dtype),
                "num_classes": 2, "files": {"features": "features.npy"}}
    manifest.update(overrides)
    (d / "manifest.json").write_text(json.dumps(manifest))
    return d


class SeedsOnly(Sampler):
    """A stand-in sampler: input_nodes = the unique seeds (test helper)."""

    num_layers = 0

    def sample(self, graph, seeds, generator=None) -> Sample:
        return Sample(seeds, [], torch.unique(seeds))


class OneHop(Sampler):
    """Uniform one-hop sampler with replacement, seeds first (test helper, no blocks)."""

    num_layers = 0

    def __init__(self, fanout: int) -> None:
        self.fanout = fanout

    def sample(self, graph, seeds, generator=None) -> Sample:
        deg = graph.degrees()[seeds]
        r = (torch.rand(seeds.numel(), self.fanout, generator=generator) * deg[:, None]).long()
        nbr = graph.indices[graph.indptr[seeds][:, None] + r].long()[deg > 0].flatten()
        extra = torch.unique(nbr)
        extra = extra[~torch.isin(extra, seeds)]
        return Sample(seeds, [], torch.cat([seeds, extra]))


# ---------------------------------------------------------------------- disk source
@pytest.mark.parametrize("dtype,dim", [(np.float32, 100), (np.float16, 7), (np.float32, 2048)])
@pytest.mark.parametrize("threads", [1, 3])
def test_disk_source_reads_rows_exactly(tmp_path, dtype, dim, threads):
    rng = np.random.default_rng(0)
    arr = rng.standard_normal((500, dim)).astype(dtype)
    src = DiskFeatureSource(_write(tmp_path / "f.npy", arr), num_threads=threads, max_run_pages=3)
    ids = torch.tensor([499, 0, 17, 17, 250, 3, 498, 1])
    out = src.read(ids)
    assert out.shape == (8, dim) and out.dtype == torch.from_numpy(arr).dtype
    np.testing.assert_array_equal(out.numpy(), arr[ids.numpy()])
    rand = torch.from_numpy(rng.integers(0, 500, 300))
    np.testing.assert_array_equal(src.read(rand).numpy(), arr[rand.numpy()])
    assert src.read(torch.empty(0, dtype=torch.int64)).shape == (0, dim)
    assert (src.num_rows, src.dim) == (500, dim)
    src.close()


@pytest.mark.parametrize("dim", [7, 1000, 3000])
def test_a_large_read_stages_a_bounded_slice_of_pages_at_a_time(tmp_path, dim, monkeypatch):
    rng = np.random.default_rng(1)
    arr = rng.standard_normal((2000, dim)).astype(np.float32)
    src = DiskFeatureSource(_write(tmp_path / "f.npy", arr), num_threads=2,
                            max_staging_bytes=3 * PAGE_SIZE)
    staged: list[int] = []
    read_rows = src._read_rows

    def spy(ids_np, first, last):
        rows = read_rows(ids_np, first, last)
        staged.append(int(np.unique(np.concatenate(
            [np.arange(a, b + 1) for a, b in zip(first, last)])).size))
        return rows

    monkeypatch.setattr(src, "_read_rows", spy)
    ids = torch.from_numpy(rng.integers(0, 2000, 1500))  # any order, with repeats
    np.testing.assert_array_equal(src.read(ids).numpy(), arr[ids.numpy()])
    bound = max(3, -(-dim * 4 // PAGE_SIZE) + 1)
    assert len(staged) > 1 and max(staged) <= bound
    src.close()


def test_disk_source_counts_whole_coalesced_pages(tmp_path):
    arr = np.arange(64 * 1024, dtype=np.float32).reshape(1024, 64)  # 256 B rows, 16 per page
    src = DiskFeatureSource(_write(tmp_path / "f.npy", arr), num_threads=2)
    off = src.layout.data_offset
    ids = torch.arange(100, 140)  # one contiguous range -> one run of pages
    src.read(ids)
    first = (off + 100 * 256) // PAGE_SIZE
    last = (off + 140 * 256 - 1) // PAGE_SIZE
    assert src.stats.pages == last - first + 1
    assert src.stats.read_calls == 1
    assert src.stats.bytes_read == src.stats.pages * PAGE_SIZE
    assert src.stats.rows == 40 and src.stats.requests == 1
    assert torch.equal(src.pages_of(ids), torch.arange(first, last + 1))
    src.reset_stats()
    src.read(torch.tensor([0, 1000]))  # two far-apart rows: two reads of one page each
    assert (src.stats.read_calls, src.stats.pages) == (2, 2)


def test_disk_source_from_ondisk_and_protocol(tmp_path):
    from fgnn.cache.source import FeatureSource

    arr = np.random.default_rng(1).standard_normal((30, 5)).astype(np.float32)
    src = DiskFeatureSource.from_ondisk(_ondisk_dir(tmp_path, arr))
    assert isinstance(src, FeatureSource)
    np.testing.assert_array_equal(src.read(torch.tensor([29, 2])).numpy(), arr[[29, 2]])


@pytest.mark.parametrize("cut", [1, 100])
def test_truncated_feature_file_is_rejected(tmp_path, cut):
    path = _write(tmp_path / "f.npy", np.ones((50, 8), dtype=np.float32))
    data = path.read_bytes()
    path.write_bytes(data[:-cut])
    with pytest.raises(ValueError, match=r"f\.npy.*truncated"):
        DiskFeatureSource(path)


def test_padded_feature_file_is_rejected(tmp_path):
    path = _write(tmp_path / "f.npy", np.ones((50, 8), dtype=np.float32))
    with open(path, "ab") as f:
        f.write(b"\0" * 32)
    with pytest.raises(ValueError, match=r"f\.npy.*longer than its header"):
        read_npy_layout(path)


@pytest.mark.parametrize("field,value", [("num_nodes", 31), ("feat_dim", 6),
                                         ("feat_dtype", "float16")])
def test_manifest_mismatch_is_rejected(tmp_path, field, value):
    arr = np.zeros((30, 5), dtype=np.float32)
    d = _ondisk_dir(tmp_path, arr, **{field: value})
    with pytest.raises(ValueError, match=rf"manifest.json.*{field}={value!r}.*features\.npy"):
        DiskFeatureSource.from_ondisk(d)


def test_bad_files_and_ids_are_rejected(tmp_path):
    header_cut = _write(tmp_path / "head.npy", np.zeros((3, 3), np.float32)).read_bytes()[:40]
    (tmp_path / "head.npy").write_bytes(header_cut)
    with pytest.raises(ValueError, match=r"head\.npy.*not a readable.*header"):
        DiskFeatureSource(tmp_path / "head.npy")
    (tmp_path / "junk.npy").write_bytes(b"not a numpy file at all")
    with pytest.raises(ValueError, match=r"junk\.npy.*not a readable"):
        DiskFeatureSource(tmp_path / "junk.npy")
    with pytest.raises(ValueError, match=r"cube\.npy.*2-D"):
        DiskFeatureSource(_write(tmp_path / "cube.npy", np.zeros((2, 2, 2), np.float32)))
    with pytest.raises(ValueError, match=r"int\.npy.*dtype"):
        DiskFeatureSource(_write(tmp_path / "int.npy", np.zeros((2, 2), np.int32)))
    with pytest.raises(ValueError, match="does not exist"):
        DiskFeatureSource(tmp_path / "missing.npy")
    with pytest.raises(ValueError, match=r"manifest\.json.*not found"):
        DiskFeatureSource.from_ondisk(tmp_path)
    src = DiskFeatureSource(_write(tmp_path / "f.npy", np.zeros((4, 2), np.float32)))
    with pytest.raises(ValueError, match=r"row id 4 outside \[0, 4\)"):
        src.read(torch.tensor([0, 4]))
    with pytest.raises(ValueError, match="1-D integer"):
        src.read(torch.tensor([0.5]))


# ---------------------------------------------------------------------- CPU buffer (§3.3)
def test_cpu_buffer_holds_the_hottest_rows_and_redirects(tmp_path):
    arr = np.random.default_rng(2).standard_normal((100, 16)).astype(np.float32)
    disk = DiskFeatureSource(_write(tmp_path / "f.npy", arr), num_threads=1)
    hot = torch.zeros(100)
    hot[[5, 50, 95, 7]] = torch.tensor([4.0, 3.0, 2.0, 2.0])  # tie 95/7: lower id 7 wins
    buf = CPUBufferedSource(disk, hot, capacity=3)
    assert buf.ids.tolist() == [5, 7, 50]
    assert buf.stats.load_bytes == 3 * 64
    disk.reset_stats()
    ids = torch.tensor([50, 1, 5, 2, 5])
    np.testing.assert_array_equal(buf.read(ids).numpy(), arr[ids.numpy()])
    assert (buf.stats.hits, buf.stats.misses) == (3, 2)
    assert disk.stats.rows == 2  # only the misses reached storage
    assert buf.contains(torch.tensor([7, 95])).tolist() == [True, False]
    assert CPUBufferedSource(disk, hot, budget_bytes=64 * 2 + 10).capacity == 2
    assert CPUBufferedSource(disk, hot, ratio=0.1).capacity == 10


def test_cpu_buffer_bad_input(tmp_path):
    disk = DiskFeatureSource(_write(tmp_path / "f.npy", np.zeros((10, 2), np.float32)))
    with pytest.raises(ValueError, match=r"hotness has shape \(9,\)"):
        CPUBufferedSource(disk, torch.zeros(9), capacity=2)
    with pytest.raises(ValueError, match="exactly one"):
        CPUBufferedSource(disk, torch.zeros(10), capacity=2, ratio=0.5)
    with pytest.raises(ValueError, match="ratio must lie in"):
        CPUBufferedSource(disk, torch.zeros(10), ratio=1.5)
    assert CPUBufferedSource(disk, None, capacity=0).read(torch.tensor([3])).shape == (1, 2)


# ---------------------------------------------------------------------- window cache (§3.4)
def _run_cache(cache: DeviceSoftwareCache, batches: list[list[int]], window: int,
               table: torch.Tensor) -> list[int]:
    """Drive a cache over ``batches`` with a window of W look-ahead; return hits per batch."""
    hits = []
    for i in range(min(window + 1, len(batches))):
        if window:
            cache.add_future(torch.tensor(batches[i]))
    for i, b in enumerate(batches):
        ids = torch.tensor(b, device=table.device)
        before = cache.stats.hits
        out = cache.fetch(ids, lambda miss: table[miss])
        assert torch.equal(out, table[ids])
        hits.append(cache.stats.hits - before)
        if window:
            cache.consume(ids)
            if i + 1 + window < len(batches):
                cache.add_future(torch.tensor(batches[i + 1 + window]))
    return hits


def test_window_keeps_rows_a_future_batch_needs(device):
    # Capacity 2. Batches 0 | 1 | 2 | 0. When batch "2" misses, the cache holds {0, 1}:
    # LRU evicts 0 (oldest) and misses again at the last batch; the window (W=3) knows 0 comes
    # back (reuse[0] = 1, reuse[1] = 0), so it evicts 1 and hits.
    table = torch.arange(8.0, device=device)[:, None].repeat(1, 2)
    batches = [[0], [1], [2], [0]]
    lru = DeviceSoftwareCache(8, 2, 2, policy="lru", device=device)
    assert _run_cache(lru, batches, 0, table) == [0, 0, 0, 0]
    win = DeviceSoftwareCache(8, 2, 2, policy="window", device=device)
    assert _run_cache(win, batches, 3, table) == [0, 0, 0, 1]
    assert win.resident().tolist() == [0, 2]
    assert win.stats.evictions == 1 and win.reuse.sum() == 0


@pytest.mark.parametrize("seed", range(5))
def test_window_evicts_only_the_zero_counter_row(seed):
    # Window: [0 1 2] (current) | [3] | [0 1]. After the first batch, reuse = {0: 1, 1: 1, 2: 0};
    # the cache (capacity 3) is full, so 3 must replace 2 whatever the random victim draw is.
    table = torch.arange(8.0)[:, None]
    batches = [[0, 1, 2], [3], [0, 1]]
    win = DeviceSoftwareCache(8, 3, 1, policy="window", seed=seed)
    assert _run_cache(win, batches, 2, table) == [0, 0, 2]
    assert win.stats.evictions == 1 and win.resident().tolist() == [0, 1, 3]


def test_window_bypasses_when_every_resident_row_is_protected():
    table = torch.arange(8.0)[:, None]
    cache = DeviceSoftwareCache(8, 2, 1, policy="window")
    for b in ([0, 1], [2], [0, 1]):
        cache.add_future(torch.tensor(b))
    cache.fetch(torch.tensor([0, 1]), lambda m: table[m])
    cache.consume(torch.tensor([0, 1]))
    cache.fetch(torch.tensor([2]), lambda m: table[m])  # 0 and 1 are protected: 2 bypasses
    assert cache.resident().tolist() == [0, 1]
    assert cache.stats.bypassed == 1 and cache.last_evicted.numel() == 0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_window_never_evicts_a_needed_row_while_a_zero_counter_row_exists(seed):
    g = torch.Generator().manual_seed(seed)
    n, window = 40, 3
    batches = [torch.unique(torch.randint(0, n, (6,), generator=g)).tolist() for _ in range(30)]
    table = torch.randn(n, 4, generator=g)
    cache = DeviceSoftwareCache(n, 8, 4, policy="window", seed=seed)
    for i in range(window + 1):
        cache.add_future(torch.tensor(batches[i]))
    for i, b in enumerate(batches):
        ids = torch.tensor(b)
        reuse_before = cache.reuse.clone()
        out = cache.fetch(ids, lambda m: table[m])
        assert torch.equal(out, table[ids])
        ev = cache.last_evicted
        # Every evicted row had a zero future-reuse counter at eviction time ...
        assert bool((reuse_before[ev] == 0).all())
        # ... and a bypass only happens when no zero-counter row was left to evict.
        cache.consume(ids)
        if i + 1 + window < len(batches):
            cache.add_future(torch.tensor(batches[i + 1 + window]))
    assert cache.stats.hits + cache.stats.misses == sum(len(b) for b in batches)


def test_cache_policies_bad_input():
    with pytest.raises(ValueError, match="policy must be one of"):
        DeviceSoftwareCache(4, 2, 1, policy="fifo")
    with pytest.raises(ValueError, match="capacity=-1"):
        DeviceSoftwareCache(4, -1, 1)


# ---------------------------------------------------------------------- accumulator (§3.2)
def test_eq2_eq3_exact():
    # Eq. 2: 1.425e6 IOPs * (36 + 779 + 5) us * 1 SSD = 1168.5 accesses.
    assert eq2_num_accesses(1.425e6, 36e-6, 779e-6, 5e-6, 1) == pytest.approx(1168.5, rel=1e-12)
    assert eq2_num_accesses(1.0e5, 1e-3, 2e-3, 1e-3, 3) == pytest.approx(1200.0, rel=1e-12)
    # Eq. 3: 1168.5 / 1.5e6 = 779 us.
    assert eq3_steady_time(1168.5, 1.5e6) == pytest.approx(779e-6, rel=1e-12)


def test_storage_model_solves_eq2_and_eq3_together():
    # Optane of §4.2: peak 1.5 M IOPs, T_i = 11 + 25 us, T_t = 5 us, target 95 % of peak.
    # By hand: N = 1.425e6 * 41e-6 / (1 - 0.95) = 58.425 / 0.05 = 1168.5; T_s = 779 us.
    m = StorageAccessModel(iop_peak=1.5e6, t_initial=36e-6, t_termination=5e-6,
                           target_fraction=0.95)
    assert m.iop_achieved == pytest.approx(1.425e6)
    assert m.required_accesses() == pytest.approx(1168.5, rel=1e-12)
    assert m.steady_time() == pytest.approx(779e-6, rel=1e-12)
    # The solution satisfies Eq. 2 with T_s from Eq. 3.
    n = m.required_accesses()
    assert eq2_num_accesses(m.iop_achieved, 36e-6, eq3_steady_time(n, 1.5e6), 5e-6) == \
        pytest.approx(n, rel=1e-12)
    # Two SSDs: twice the accesses (§3.2 linear scaling); Eq. 3 per SSD.
    m2 = StorageAccessModel(iop_peak=1.5e6, t_initial=36e-6, t_termination=5e-6, num_ssd=2)
    assert m2.required_accesses() == pytest.approx(2337.0, rel=1e-12)
    assert eq2_num_accesses(1.425e6, 36e-6, m2.steady_time(), 5e-6, 2) == \
        pytest.approx(2337.0, rel=1e-12)
    # Samsung 980 Pro: 7e5 peak, 80 % target, T_i = 324 + 25 us, T_t = 5 us:
    # N = 5.6e5 * 354e-6 / 0.2 = 991.2.
    assert StorageAccessModel(7e5, 5.6e5, 349e-6, 5e-6).required_accesses() == \
        pytest.approx(991.2, rel=1e-12)
    with pytest.raises(ValueError, match="iop_achieved must lie in"):
        StorageAccessModel(iop_peak=1e5, iop_achieved=1e5)


def test_accumulator_threshold_adjusts_to_redirected_accesses():
    acc = AccessAccumulator(1000.0, accesses_per_row=1.0)
    assert acc.threshold() == 1000  # nothing redirected yet: N_access node accesses
    acc.update(node_accesses=1000, redirected=600, storage_accesses=800)
    # r = 600 / 1000 = 0.6; a = 800 / (1000 - 600) = 2; ceil(1000 / (0.4 * 2)) = 1250.
    assert acc.redirect_ratio == pytest.approx(0.6)
    assert acc.accesses_per_row == pytest.approx(2.0)
    assert acc.threshold() == 1250
    acc.update(node_accesses=1000, redirected=1000, storage_accesses=0)
    # r = 1600 / 2000 = 0.8; a = 800 / 400 = 2; ceil(1000 / (0.2 * 2)) = 2500.
    assert acc.threshold() == 2500
    capped = AccessAccumulator(10.0, max_redirect=0.9)
    capped.update(10, 10, 0)
    assert capped.redirect_ratio == 0.9 and capped.threshold() == 100  # 10 / (0.1 * 1)
    m = StorageAccessModel(iop_peak=1.5e6, t_initial=36e-6, t_termination=5e-6)
    assert AccessAccumulator.from_model(m, row_bytes=4097).threshold() == math.ceil(1168.5 / 2)
    with pytest.raises(ValueError, match="redirected"):
        acc.update(5, 6, 0)


# ---------------------------------------------------------------------- loader
@pytest.fixture
def disk_setup(tmp_path):
    n, f = 600, 24
    arr = np.random.default_rng(3).standard_normal((n, f)).astype(np.float32)
    graph = random_graph(n, 3000, seed=3)
    disk = DiskFeatureSource(_write(tmp_path / "f.npy", arr), num_threads=2)
    seeds = torch.randperm(n, generator=torch.Generator().manual_seed(0))[:320]
    return arr, graph, disk, list(seeds.split(32))


@pytest.mark.parametrize("policy,window,use_buffer,use_acc", [
    (None, 0, False, False), ("lru", 0, True, False), ("random", 0, False, True),
    ("window", 4, True, True), ("window", 2, False, False)])
def test_loader_yields_exact_features_through_all_tiers(disk_setup, policy, window, use_buffer,
                                                        use_acc):
    arr, graph, disk, batches = disk_setup
    source = CPUBufferedSource(disk, graph.in_degrees().float(), ratio=0.1) if use_buffer else disk
    cache = None if policy is None else DeviceSoftwareCache(600, 60, 24, policy=policy)
    acc = AccessAccumulator(200.0) if use_acc else None
    loader = DiskFeatureLoader(OneHop(3), graph, batches, source=source, cache=cache,
                               window=window, accumulator=acc, max_merge=4,
                               generator=torch.Generator().manual_seed(1))
    seen = 0
    for sample, feats in loader:
        np.testing.assert_array_equal(feats.numpy(), arr[sample.input_nodes.numpy()])
        seen += 1
    assert seen == len(batches) == loader.counts["batches"]
    rep = loader.report()
    assert rep["disk_bytes"] > 0 and rep["node_accesses"] > 0
    if use_acc:
        assert loader.counts["groups"] < len(batches)  # reads were merged across batches
    else:
        assert loader.counts["groups"] == len(batches)
    tiers = rep["tiers"]
    assert tiers["device"]["rows"] + tiers["cpu"]["rows"] + tiers["storage"]["rows"] == \
        rep["node_accesses"]
    if cache is not None:
        assert rep["device_cache"]["hits"] + rep["device_cache"]["misses"] == rep["node_accesses"]
        assert tiers["device"]["rows"] == rep["device_cache"]["hits"]
        if window:
            assert int(cache.reuse.sum()) == 0  # every registered batch was consumed
        if use_buffer:  # the cache holds only rows read from storage (§3.4)
            assert not bool(source.contains(cache.resident()).any())
    else:
        assert tiers["device"]["rows"] == 0
    if not use_buffer:
        assert tiers["cpu"]["rows"] == 0


def test_window_reads_fewer_disk_bytes_than_lru_and_random(disk_setup):
    arr, graph, disk, batches = disk_setup
    disk_bytes = {}
    for policy, window in (("lru", 0), ("random", 0), ("window", 8)):
        disk.reset_stats()
        cache = DeviceSoftwareCache(600, 90, 24, policy=policy, seed=0)
        loader = DiskFeatureLoader(OneHop(3), graph, batches * 2, source=disk, cache=cache,
                                   window=window, generator=torch.Generator().manual_seed(5))
        for _ in loader:
            pass
        disk_bytes[policy] = disk.stats.rows
    assert disk_bytes["window"] < disk_bytes["lru"]
    assert disk_bytes["window"] < disk_bytes["random"]


def test_loader_bad_input(disk_setup):
    _, graph, disk, batches = disk_setup
    with pytest.raises(ValueError, match="window must be >= 0"):
        DiskFeatureLoader(SeedsOnly(), graph, batches, source=disk, window=-1)
    with pytest.raises(ValueError, match="max_merge"):
        DiskFeatureLoader(SeedsOnly(), graph, batches, source=disk, max_merge=0)


def test_static_feature_store_reads_its_misses_through_the_disk_tiers(tmp_path):
    fs = pytest.importorskip("fgnn.cache.feature_store")
    arr = np.random.default_rng(4).standard_normal((200, 8)).astype(np.float32)
    disk = DiskFeatureSource(_write(tmp_path / "f.npy", arr), num_threads=2)
    hot = torch.arange(200, 0, -1).float()  # row 0 hottest
    host = CPUBufferedSource(disk, hot, ratio=0.2)  # rows 0..39 in the CPU buffer
    store = fs.FeatureStore.single(host, fs.load_cache(hot, 0.1, host))  # rows 0..19 on device
    host.reset_stats()
    disk.reset_stats()
    ids = torch.tensor([5, 30, 150, 199, 25])
    np.testing.assert_array_equal(store.gather(ids).numpy(), arr[ids.numpy()])
    assert (host.stats.hits, host.stats.misses) == (2, 2)  # 30, 25 buffered; 150, 199 on disk
    assert disk.stats.rows == 2


def test_reads_the_data_engineers_ondisk_format(tmp_path):
    ondisk = pytest.importorskip("fgnn.data.ondisk")
    from fgnn.data.dataset import Dataset

    n = 50
    feats = torch.randn(n, 6)
    ds = Dataset("tiny", random_graph(n, 200, seed=5), feats, torch.zeros(n, dtype=torch.int64),
                 torch.arange(10), torch.arange(10, 20), torch.arange(20, 30), 2)
    d = ondisk.save_dataset(ds, tmp_path / "tiny")
    src = DiskFeatureSource.from_ondisk(d)
    ids = torch.tensor([49, 0, 7])
    assert torch.equal(src.read(ids), feats[ids])
