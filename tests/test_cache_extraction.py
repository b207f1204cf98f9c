"""Host-side extraction of the FeatureStore (issue 18, defect 7): host gathers use several
threads, every upload goes through the pinned uploader, the cache fills in bounded chunks, and
the device holds no per-vertex lookup that ``gather`` never reads.

The ``meta`` device stands in for a GPU: any tensor that crosses to it is an upload, and nothing
allocated there costs host memory.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import fgnn.cache.feature_store as fs
from fgnn.cache import FeatureStore, TensorSource, load_cache
from fgnn.cache.budget import TensorAllocationMeter
from fgnn.cache.placement import Placement

N, F = 4096, 64  # 256 B rows, 1 MiB of features


def feats() -> torch.Tensor:
    return torch.arange(N * F, dtype=torch.float32).reshape(N, F)


def _placement(devices: int = 2, per_device: int = 1024) -> Placement:
    """Device ``d`` caches vertices ``[d C, (d + 1) C)``; the rest are host rows."""
    return Placement([torch.arange(d * per_device, (d + 1) * per_device)
                      for d in range(devices)], N)


@pytest.mark.parametrize("kind", ["tensor", "numpy"])
def test_a_large_host_gather_runs_on_several_threads(monkeypatch, kind):
    # 64 rows a thread at least
    monkeypatch.setattr(fs, "GATHER_CHUNK_BYTES", 64 * F * 4, raising=False)
    host = feats() if kind == "tensor" else feats().numpy()
    store = FeatureStore.single(host, None, threads=2)
    # both chunks must be in flight at once: a single-threaded gather never passes the barrier
    barrier = threading.Barrier(2, timeout=10)
    seen: set[int] = set()
    take = TensorSource._take

    def spy(self, idx, out):
        seen.add(threading.get_ident())
        barrier.wait()
        take(self, idx, out)

    monkeypatch.setattr(TensorSource, "_take", spy)
    ids = torch.randperm(N, generator=torch.Generator().manual_seed(0))[:1000]
    assert torch.equal(store.gather(ids), feats()[ids])
    assert len(seen) == 2 and threading.get_ident() not in seen


def test_a_small_gather_stays_on_the_calling_thread(monkeypatch):
    store = FeatureStore.single(feats(), None, threads=4)
    calls = []
    monkeypatch.setattr(TensorSource, "_take",
                        lambda self, idx, out: calls.append(threading.get_ident()))
    store.gather(torch.arange(10))
    assert calls == [threading.get_ident()]


class _Uploads(TorchDispatchMode):
    """Counts tensors copied from the CPU to the meta device."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in (torch.ops.aten._to_copy.default, torch.ops.aten.copy_.default):
            src = args[1] if func is torch.ops.aten.copy_.default else args[0]
            dst = (args[0].device if func is torch.ops.aten.copy_.default
                   else kwargs.get("device"))
            if src.device.type == "cpu" and dst is not None and torch.device(dst).type == "meta":
                self.count += 1
        return func(*args, **kwargs)


@pytest.mark.parametrize("peers_from_host", [True, False])
def test_every_upload_of_gather_goes_through_the_pinned_uploader(monkeypatch,
                                                                 peers_from_host):
    placement = _placement()
    recorded: list[torch.Tensor] = []
    mode = _Uploads()

    def h2d(t):
        recorded.append(t)
        assert t.device.type == "cpu"
        return t.to("meta")

    real_upload = fs.upload  # a peer device's positions go to that device, pinned too
    monkeypatch.setattr(fs, "upload", lambda t, device: recorded.append(t) or real_upload(
        t, device))

    store = FeatureStore.from_placement(feats(), placement, 0, device="meta",
                                        peers_from_host=peers_from_host, h2d=h2d)
    ids = torch.randperm(N, generator=torch.Generator().manual_seed(1))[:600]
    with mode:
        out = store.gather(ids, placement.holder_bits()[ids])
    assert out.device.type == "meta" and out.shape == (600, F)
    s = store.stats
    assert s.hits and s.peer and s.misses
    # rows, the host positions, the local buffer positions and their positions: all uploads
    # went through the pinned uploaders (each counted once by the mode), none straight from
    # pageable memory
    assert len(recorded) >= 4
    assert mode.count == len(recorded)


def test_upload_pins_before_a_cuda_copy(monkeypatch):
    pinned: list[torch.Tensor] = []
    moved: list[tuple[bool, bool]] = []

    class Pinned(torch.Tensor):
        pass

    monkeypatch.setattr(torch.Tensor, "is_pinned", lambda self: isinstance(self, Pinned))
    monkeypatch.setattr(torch.Tensor, "pin_memory",
                        lambda self: pinned.append(self) or self.as_subclass(Pinned))
    monkeypatch.setattr(torch.Tensor, "to", lambda self, *a, **k: moved.append(
        (isinstance(self, Pinned), bool(k.get("non_blocking")))) or self)
    fs.upload(torch.arange(5), torch.device("cuda:0"))
    assert len(pinned) == 1 and moved == [(True, True)]


def test_cache_fill_holds_one_chunk_of_host_memory(monkeypatch):
    chunk = 64 * 1024
    monkeypatch.setattr(fs, "FILL_CHUNK_BYTES", chunk, raising=False)
    placement = _placement(devices=1, per_device=N)  # the whole 1 MiB matrix is cached
    host = feats()
    meter = TensorAllocationMeter()
    out = []
    peak = meter.measure(lambda: out.append(FeatureStore.from_placement(
        host, placement, 0, device="meta", peers_from_host=True, threads=1)))
    store = out[0]
    assert store.buffers[0].shape == (N, F)
    # one chunk plus the per-vertex lookup (int8 + int64 and placement's temporaries: < 40 B a
    # vertex); the whole cache (1 MiB) never sits in host memory
    assert peak <= chunk + 40 * N < N * F * 4


def test_load_cache_fills_in_chunks(monkeypatch):
    monkeypatch.setattr(fs, "FILL_CHUNK_BYTES", 100 * F * 4, raising=False)
    hot = torch.rand(N, generator=torch.Generator().manual_seed(2))
    reads = []
    take = TensorSource._take
    monkeypatch.setattr(TensorSource, "_take",
                        lambda self, idx, out: reads.append(idx.numel()) or take(self, idx, out))
    cache = load_cache(hot, 0.5, feats())
    assert max(reads) <= 100 and sum(reads) == N // 2
    assert torch.equal(cache.rows, feats()[cache.ids])
    mm = feats().numpy()
    assert torch.equal(load_cache(hot, 0.5, np.asarray(mm)).rows, cache.rows)


def test_the_device_holds_rows_only():
    """dev_num/buf_pos (9 bytes a vertex) stay on the host, where gather reads them; so does the
    slot array of a single-device cache."""
    placement = _placement()
    store = FeatureStore.from_placement(feats(), placement, 1, device="meta",
                                        peers_from_host=True)
    on_device = {k: v for k, v in vars(store).items()
                 if isinstance(v, torch.Tensor) and v.device.type == "meta"}
    assert on_device == {}
    assert [b.device.type for b in store.buffers if b is not None] == ["meta"]
    assert store.lookup.holders_device.type == "cpu"
    cache = load_cache(torch.rand(N), 0.25, feats(), "meta")
    assert cache.ids.device.type == "cpu"
    assert cache.rows.device.type == "meta"
    assert FeatureStore.single(feats(), cache, "meta").lookup.holders_device.type == "cpu"
    assert not hasattr(FeatureStore, "lookup_nbytes")


def test_the_trainer_store_uploads_through_its_copy_stream():
    from fgnn.config import ModelConfig
    from fgnn.executors.trainer import TrainerExecutor
    from fgnn.models import build_model

    model = build_model(ModelConfig("sage", hidden=8), F, 4, 2)
    threads = torch.get_num_threads()
    try:
        trainer = TrainerExecutor(feats(), torch.zeros(N, dtype=torch.long), model,
                                  _placement(), 0, None, None)
    finally:
        torch.set_num_threads(threads)  # the Trainer keeps one compute thread
    assert trainer.store._h2d == trainer.copies.h2d
    assert trainer.cached_rows() == 1024


def test_misses_and_host_served_peers_are_read_in_one_pass(monkeypatch):
    """On CUDA each host read refills the pinned staging buffer after the previous copy out of
    it ends; one read per batch means no peer's read waits on another's copy."""
    placement = _placement(devices=4, per_device=512)
    store = FeatureStore.from_placement(feats(), placement, 0, peers_from_host=True)
    calls = []
    read = FeatureStore._read_host
    monkeypatch.setattr(FeatureStore, "_read_host",
                        lambda self, ids: calls.append(ids.numel()) or read(self, ids))
    ids = torch.randperm(N, generator=torch.Generator().manual_seed(5))[:800]
    assert torch.equal(store.gather(ids, placement.holder_bits()[ids]), feats()[ids])
    s = store.stats
    assert s.hits and s.peer and s.misses
    assert calls == [s.peer + s.misses]
