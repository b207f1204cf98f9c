"""Real-GPU checks of the data path (skipped without CUDA): the executor's device, copies on
the copy stream that overlap compute, event-timed stages, and the CUDA-IPC sample transport."""

from __future__ import annotations

import pytest
import torch

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def test_copies_run_on_the_copy_stream_and_training_waits_for_them():
    from fgnn.executors._streams import CopyStream

    cs = CopyStream("cuda:0")
    host = torch.randn(4096, 256)
    with cs.scope():
        assert torch.cuda.current_stream() == cs.stream
        dev = cs.h2d(host)
        ev = cs.record()
    assert torch.cuda.current_stream() != cs.stream
    cs.wait(ev, [dev])
    assert torch.equal(dev.cpu(), host)


def test_stage_clock_measures_kernels_not_launches():
    from fgnn.executors._streams import StageClock

    clock = StageClock("cuda:0")
    a = torch.randn(4096, 4096, device="cuda")
    t = clock.start()
    for _ in range(20):
        a = a @ a / 64.0
    lap = clock.stop(t)
    assert lap.seconds() > 0


def test_feature_store_gather_matches_on_gpu():
    from fgnn.cache.feature_store import FeatureStore, load_cache

    feats = torch.randn(1000, 32)
    hot = torch.rand(1000)
    store = FeatureStore.single(feats, load_cache(hot, 0.3, feats, "cuda:0"), "cuda:0")
    ids = torch.randperm(1000)[:400]
    assert torch.equal(store.gather(ids).cpu(), feats[ids])


def test_sampler_on_gpu_matches_cpu():
    from fgnn.sampling import KHop
    from conftest import random_graph

    g = random_graph(5000, 50000, seed=0)
    seeds = torch.arange(256)
    s = KHop([5, 5]).sample(g.to("cuda"), seeds.cuda(),
                            torch.Generator("cuda").manual_seed(0))
    assert s.input_nodes.device.type == "cuda"
    assert torch.equal(s.seeds.cpu(), seeds)


def test_index_add_repeats_exactly_under_the_deterministic_flag():
    """``--deterministic`` (docs/gpu.md): with torch's deterministic algorithms on, a CUDA
    ``index_add_`` with many colliding rows gives the same bits on every run."""
    from fgnn.executors.common import configure_torch

    was = torch.are_deterministic_algorithms_enabled()
    configure_torch(deterministic=True)
    try:
        g = torch.Generator(device="cuda").manual_seed(0)
        src = torch.randn(200_000, 64, device="cuda", generator=g)
        index = torch.randint(0, 64, (200_000,), device="cuda", generator=g)
        runs = [torch.zeros(64, 64, device="cuda").index_add_(0, index, src) for _ in range(5)]
        assert all(torch.equal(runs[0], r) for r in runs[1:])
    finally:
        torch.use_deterministic_algorithms(was)
