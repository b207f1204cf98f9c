"""The CUDA-only branches of the cache, the graph and checkpoints, run on the CPU through the fake
GPU of ``tests/fake_cuda.py`` (fixture ``fake_cuda``), which enforces CUDA's rules."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from fake_cuda import CudaRuleError
from fgnn import gpu


def _store(fake, host: torch.Tensor):
    """A store on fake GPU 0: rows 0-4 cached on GPU 0, rows 5-9 on GPU 1, the rest on the host."""
    from fgnn.cache.feature_store import FeatureStore
    from fgnn.cache.lookup import CacheLookup
    from fgnn.cache.placement import Placement

    placement = Placement([torch.arange(0, 5), torch.arange(5, 10)], host.shape[0])
    buffers = [fake.tensor(host[0:5], 0), fake.tensor(host[5:10], 1)]
    return FeatureStore(host, buffers, CacheLookup.from_placement(placement, 0), local=0,
                        device=fake.device(0), threads=1)


def test_upload_pins_the_host_tensor_and_copies_without_blocking(fake_cuda):
    from fgnn.cache.feature_store import upload

    out = upload(torch.arange(8.0), fake_cuda.device(0))
    assert gpu.device_of(out) == fake_cuda.device(0)
    copy = fake_cuda.copies[-1]
    assert (copy.dst, copy.pinned, copy.non_blocking) == ("cuda:0", True, True)
    assert upload(out, fake_cuda.device(0)) is out  # already there: no copy
    assert len(fake_cuda.copies) == 1


def test_host_rows_go_through_one_pinned_staging_buffer_reused_after_its_copy(fake_cuda):
    host = torch.randn(30, 4)
    store = _store(fake_cuda, host)
    a, b = torch.tensor([12, 20, 13, 27]), torch.tensor([25, 14, 29])
    ra = store.gather(a)
    stage = store._staging
    rb = store.gather(b)  # reuses the buffer: only once batch a's copy out of it is done
    fake_cuda.check()
    assert store._staging is stage and fake_cuda.is_pinned(stage)
    assert all(c.pinned and c.non_blocking for c in fake_cuda.copies if c.src == "cpu"
               and c.nbytes <= 4 * 4 * 4)
    assert torch.equal(ra.cpu(), host[a]) and torch.equal(rb.cpu(), host[b])


def test_a_peer_buffer_is_gathered_on_its_gpu_and_copied_over(fake_cuda):
    host = torch.randn(30, 4)
    store = _store(fake_cuda, host)
    ids = torch.tensor([6, 1, 20, 9, 3])
    out = store.gather(ids)
    assert any(c.src == "cuda:1" and c.dst == "cuda:0" and c.non_blocking
               for c in fake_cuda.copies), fake_cuda.copies
    assert torch.equal(out.cpu(), host[ids])
    assert (store.stats.hits, store.stats.peer, store.stats.misses) == (2, 2, 1)


def test_the_fake_refuses_a_reused_pinned_buffer_and_a_cross_gpu_op(fake_cuda):
    pinned = gpu.pin(torch.ones(4))
    gpu.to_device(pinned, fake_cuda.device(0))
    pinned.add_(1)
    with pytest.raises(CudaRuleError, match="in flight"):
        fake_cuda.check()
    fake_cuda._in_flight.clear()
    with pytest.raises(CudaRuleError, match="explicit copy"):
        fake_cuda.tensor(torch.ones(2), 0) + fake_cuda.tensor(torch.ones(2), 1)


def test_cuda_peak_meter_resets_runs_and_synchronises(fake_cuda):
    from fgnn.cache.budget import CudaPeakMeter, measure_step_peak

    fake_cuda.peak[0], fake_cuda.allocated[0] = 10_000, 100   # a stale peak from before

    def step() -> None:
        fake_cuda.peak[0] = max(fake_cuda.peak[0], 300)

    assert CudaPeakMeter(fake_cuda.device(0)).measure(step) == 300
    assert fake_cuda.resets == [0] and fake_cuda.syncs == 2
    fake_cuda.peak[0] = 10_000
    assert measure_step_peak(step, fake_cuda.device(0)) == 300  # picks the CUDA meter


def test_cache_budget_on_a_gpu_is_its_total_memory(fake_cuda):
    from fgnn.cache.budget import choose_cache_ratio

    fake_cuda.total = 1 << 20
    b = choose_cache_ratio(num_nodes=1000, row_bytes=100, device=fake_cuda.device(0),
                           peak_bytes=1 << 18)
    assert b.budget_bytes == 1 << 20
    with pytest.raises(ValueError, match="required on CPU"):
        choose_cache_ratio(num_nodes=1000, row_bytes=100, device="cpu", peak_bytes=1)


def test_cuda_ipc_export_and_open_on_this_gpu(fake_cuda):
    from fgnn.cache import peer_share

    t = fake_cuda.tensor(torch.arange(6.0).view(2, 3), 1)
    h = peer_share.export_buffer(t)
    assert (h.kind, h.gpu, h.shape) == ("ipc", "GPU-fake-1", (2, 3))
    other = dataclasses.replace(h, pid=h.pid + 1)  # as another process sees it
    with pytest.raises(peer_share.PeerShareError, match="exported it"):
        peer_share.open_buffer(other, fake_cuda.device(0))  # still the exporting process
    fake_cuda.pid += 1  # now opened in another process
    opened = peer_share.open_buffer(other, fake_cuda.device(0))
    assert gpu.device_of(opened) == fake_cuda.device(0)   # labelled with this process's GPU
    assert torch.equal(opened.cpu(), t.cpu())
    with pytest.raises(peer_share.PeerShareError, match="cannot be mapped"):
        peer_share.open_buffer(other, "cpu")
    peer_share.release(h)


def test_csr_pin_memory_pins_every_array(fake_cuda):
    from fgnn.graph import CSRGraph

    g = CSRGraph(torch.tensor([0, 1, 2]), torch.tensor([1, 0]))
    p = g.pin_memory()
    assert fake_cuda.is_pinned(p.indptr) and fake_cuda.is_pinned(p.indices)
    assert torch.equal(p.indices, g.indices)


def test_checkpoint_captures_and_restores_the_cuda_rng(fake_cuda):
    from fgnn.checkpoint import capture_rng_state, restore_rng_state

    state = capture_rng_state()
    assert [int(s[0]) for s in state["cuda"]] == [0, 1]
    fake_cuda.rng = [torch.tensor([9], dtype=torch.uint8)] * 2
    restore_rng_state(state)
    assert [int(s[0]) for s in fake_cuda.rng] == [0, 1]


def test_cpu_buffer_and_its_misses_are_pinned_with_cuda(fake_cuda):
    from fgnn.cache.disk_cpu_buffer import CPUBufferedSource
    from fgnn.cache.feature_store import TensorSource

    data = torch.randn(20, 3)
    src = CPUBufferedSource(TensorSource(data), torch.arange(20.0), capacity=5)
    assert src.pin and fake_cuda.is_pinned(src.buffer)
    ids = torch.tensor([19, 0, 3])  # 19 is buffered (the hottest), 0 and 3 are misses
    out = src.read(ids)
    assert fake_cuda.is_pinned(out) and torch.equal(out, data[ids])


def test_disk_rows_are_pinned_with_cuda(fake_cuda, tmp_path):
    from fgnn.cache.disk_source import DiskFeatureSource

    data = np.arange(40, dtype=np.float32).reshape(10, 4)
    np.save(tmp_path / "x.npy", data)
    src = DiskFeatureSource(tmp_path / "x.npy", num_threads=1)
    out = src.read(torch.tensor([7, 2]))
    assert src.pin and fake_cuda.is_pinned(out)
    assert np.array_equal(out.numpy(), data[[7, 2]])
