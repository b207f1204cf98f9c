"""How samples travel and how devices share a GPU: transport choice, both sample packings, and
the factored layout on one (logical) GPU with fractional shares."""

from __future__ import annotations

import pytest
import torch

from fgnn.executors.sampler import (choose_transport, pack_sample, pack_sample_tensors,
                                    unpack_sample)
from fgnn.sampling import KHop
from fgnn.executors._streams import CopyStream, StageClock
from conftest import random_graph


@pytest.mark.parametrize("requested,device,one_node,shared,want", [
    # the default is the object store: Ray's CUDA IPC receiver only reads tensors made on its
    # own GPU, and every Trainer takes from one queue (tests/test_executors_cuda_contract.py)
    ("auto", "cuda", True, False, "object_store"),
    ("auto", "cuda", True, True, "object_store"),
    ("auto", "cpu", True, False, "object_store"),       # Ray logical GPUs on CPU
    ("object_store", "cuda", True, True, "object_store"),
    ("cuda_ipc", "cuda", True, True, "cuda_ipc"),      # every Trainer on its Sampler's GPU
])
def test_transport_choice(requested, device, one_node, shared, want):
    assert choose_transport(requested, device, one_node, shared) == want


@pytest.mark.parametrize("device,one_node,shared,why", [
    ("cpu", True, True, "not on CUDA"),
    ("cuda", False, True, "several nodes"),
    ("cuda", True, False, "other GPUs than their Sampler"),
])
def test_cuda_ipc_where_it_cannot_work_is_refused(device, one_node, shared, why):
    with pytest.raises(ValueError, match=why):
        choose_transport("cuda_ipc", device, one_node, shared)
    with pytest.raises(ValueError, match="must be one of"):
        choose_transport("nccl", device, one_node, shared)


def test_both_packings_unpack_to_the_same_sample():
    g = random_graph(300, 3000, seed=2)
    s = KHop([4, 3]).sample(g, torch.arange(20), torch.Generator().manual_seed(1))
    s.task_id = 7
    for packed in (pack_sample(s), pack_sample_tensors(s)):
        u = unpack_sample(packed)
        assert u.task_id == 7 and torch.equal(u.input_nodes, s.input_nodes)
        for a, b in zip(u.blocks, s.blocks):
            assert torch.equal(a.src, b.src) and torch.equal(a.dst, b.dst)
            assert (a.num_src, a.num_dst) == (b.num_src, b.num_dst)
    # the direct packing leaves the tensors themselves (no numpy copy): on a GPU, in GPU memory
    assert pack_sample_tensors(s)["input_nodes"] is s.input_nodes


def test_copy_stream_and_clock_are_pass_throughs_on_cpu():
    cs = CopyStream("cpu")
    t = torch.arange(5)
    with cs.scope():
        assert cs.h2d(t) is t
        assert cs.record() is None
    cs.wait(None, [t])
    clock = StageClock("cpu")
    lap = clock.stop(clock.start())
    assert 0.0 <= lap.seconds() < 1.0


ray = pytest.importorskip("ray")


def test_factored_layout_on_one_gpu_with_half_shares():
    """Two devices at 0.5 GPU each: the whole factored layout (Sampler + standby on one device,
    a Trainer on the other) fits a single GPU -- here a single logical GPU."""
    from fgnn.config import (CacheConfig, JobConfig, ModelConfig, RuntimeConfig, SamplerConfig,
                             TrainConfig)
    from fgnn.data.synthetic import rmat_dataset
    from fgnn.executors.runtime import Runtime

    if ray.is_initialized():
        ray.shutdown()
    ray.init(address="local", num_cpus=2, num_gpus=1, include_dashboard=False,
             log_to_driver=False)
    try:
        ds = rmat_dataset(scale=9, edge_factor=8, feat_dim=16, num_classes=4, train_frac=0.25,
                          val_frac=0.05, test_frac=0.05, seed=0)
        cfg = JobConfig(model=ModelConfig("sage", hidden=16), sampler=SamplerConfig(fanouts=(4,)),
                        cache=CacheConfig(policy="degree"),
                        train=TrainConfig(epochs=2, batch_size=32, seed=0),
                        runtime=RuntimeConfig(devices=2, gpus_per_device=0.5, samplers=1))
        assert cfg.runtime.gpus_needed == 1
        rt = Runtime(cfg, ds)
        result = rt.run()
        assert (result.allocation["samplers"], result.allocation["trainers"]) == (1, 1)
        assert set(rt.actor_names) == {"fgnn-sampler-0", "fgnn-standby-0", "fgnn-trainer-1"}
        # 128 seeds: 4 mini-batches, each cut into one task per device (R = 2)
        assert all(e.batches == 8 for e in result.epochs)
        assert rt.executor_devices == {"cpu"} and result.allocation["device_kind"] == "logical"
    finally:
        ray.shutdown()


def test_gpus_needed_counts_shares():
    from fgnn.config import RuntimeConfig

    assert RuntimeConfig(devices=8).gpus_needed == 8
    assert RuntimeConfig(devices=8, gpus_per_device=0.5).gpus_needed == 4
    assert RuntimeConfig(devices=3, gpus_per_device=0.5).gpus_needed == 2
    assert RuntimeConfig(mode="single", devices=8).gpus_needed == 1
    with pytest.raises(ValueError, match="gpus_per_device"):
        RuntimeConfig(gpus_per_device=1.5)
