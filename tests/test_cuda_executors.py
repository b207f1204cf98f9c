"""The CUDA-only branches of the executors (copy stream, stage clock, the Sampler's host copy and
CUDA IPC put, NCCL groups, the step memory meter), run on the CPU through the fake GPU of
``tests/fake_cuda.py`` (fixture ``fake_cuda``), which enforces CUDA's rules."""

from __future__ import annotations

import datetime
import threading
import types

import pytest
import torch
from torch import nn

from fake_cuda import CudaRuleError
from fgnn import gpu
from fgnn.sampling.base import Block, Sample


def _device_sample(fake, k: int = 0) -> Sample:
    t = lambda x: fake.tensor(torch.tensor(x), k)  # noqa: E731
    return Sample(t([0, 1]), [Block(t([2, 3]), t([0, 1]), 4, 2)], t([0, 1, 2, 3]),
                  fake.tensor(torch.zeros(4, dtype=torch.uint8), k), 6)


def test_copy_stream_pins_copies_on_its_stream_and_hands_over_to_training(fake_cuda):
    from fgnn.executors._streams import CopyStream

    dev = fake_cuda.device(0)
    cs = CopyStream(dev)
    host = torch.randn(8, 3)
    with cs.scope():
        assert gpu.current_stream(dev) is cs.stream
        x = cs.h2d(host)
        ev = cs.record()
    copy = fake_cuda.copies[-1]
    assert (copy.pinned, copy.non_blocking) == (True, True) and x._stream is cs.stream
    assert cs.h2d(x) is x
    cs.wait(ev, [x, None])
    assert torch.equal((x * 2).cpu(), host * 2)  # used on the training stream: allowed


def test_the_copy_event_is_on_the_copy_stream_wherever_it_is_recorded(fake_cuda):
    from fgnn.executors._streams import CopyStream

    cs = CopyStream(fake_cuda.device(0))
    with cs.scope():
        x = cs.h2d(torch.ones(4))
    ev = cs.record()  # outside the scope: still after the copy stream's work
    assert ev.stream is cs.stream
    cs.wait(ev, [x])
    assert float((x + 1).sum()) == 8.0


def test_a_copy_used_on_the_training_stream_without_the_handover_is_refused(fake_cuda):
    from fgnn.executors._streams import CopyStream

    cs = CopyStream(fake_cuda.device(0))
    with cs.scope():
        x = cs.h2d(torch.ones(4))
    with pytest.raises(CudaRuleError, match="waited"):
        x + 1


def test_stage_clock_times_with_events_resolved_after_their_end(fake_cuda):
    from fgnn.executors._streams import StageClock

    clock = StageClock(fake_cuda.device(0))
    lap = clock.stop(clock.start())
    assert lap._end.timing and lap._end.stream is fake_cuda.default_stream(0)
    assert lap.seconds() >= 0.0 and lap._end.done()


def test_host_copy_stages_into_pinned_memory_and_waits_once(fake_cuda):
    from fgnn.executors.transport import host_copy

    sample = _device_sample(fake_cuda)
    out = host_copy(sample, narrow=True)
    assert fake_cuda.in_flight() == []  # the one wait completed every copy
    tensors = list(out.tensors())
    assert tensors and all(fake_cuda.is_pinned(t) and not gpu.on_cuda(t) for t in tensors)
    assert out.seeds.dtype == torch.int32 and out.seeds.tolist() == [0, 1]
    assert all(c.non_blocking and c.pinned for c in fake_cuda.copies)


def _sampler(fake, **kw):
    from conftest import random_graph
    from fgnn.executors.sampler import SamplerExecutor
    from fgnn.sampling import KHop

    return SamplerExecutor(random_graph(30, 100), KHop([2]), torch.arange(8), 4, 0,
                           device=str(fake.device(0)), **kw)


def test_a_cuda_sampler_syncs_once_per_cache_choice_and_reports_its_working_set(fake_cuda):
    fake_cuda.peak[0], fake_cuda.reserved[0] = 1234, 5678
    ex = _sampler(fake_cuda)
    assert fake_cuda.default_stream(0).completed == fake_cuda.seq  # set_cache_map's sync
    assert ex._narrow  # ids narrowed in the C step of a CUDA Sampler
    ws = ex.working_set()
    assert (ws["cuda_peak_bytes"], ws["cuda_reserved_bytes"]) == (1234, 5678)


def test_the_cuda_ipc_transport_puts_device_tensors(fake_cuda, monkeypatch):
    from fgnn.executors import sampler as sampler_mod

    puts: list = []
    monkeypatch.setattr(sampler_mod.host, "put", lambda v, inline, **kw: puts.append(kw) or v)
    queue = types.SimpleNamespace(put=types.SimpleNamespace(remote=lambda item: None))
    ex = _sampler(fake_cuda, transport="cuda_ipc", shared_gpu=True, queue=queue)
    monkeypatch.setattr(ex, "sample", lambda *a: (_device_sample(fake_cuda), 0.0, 0.0))
    ex.sample_task(0, 0)
    assert puts == [{"_tensor_transport": "cuda_ipc"}]
    assert not any(c.dst == "cpu" for c in fake_cuda.copies)  # no host copy


def test_object_store_transport_copies_a_device_sample_to_the_host(fake_cuda, monkeypatch):
    from fgnn.executors import sampler as sampler_mod

    got: list = []
    monkeypatch.setattr(sampler_mod.host, "put", lambda v, inline, **kw: got.append(v) or v)
    queue = types.SimpleNamespace(put=types.SimpleNamespace(remote=lambda item: None))
    ex = _sampler(fake_cuda, queue=queue)
    monkeypatch.setattr(ex, "sample", lambda *a: (_device_sample(fake_cuda), 0.0, 0.0))
    ex.sample_task(0, 0)
    assert any(c.dst == "cpu" and c.pinned for c in fake_cuda.copies)


def _members(fake, devices, monkeypatch, env=None):
    """Build the NCCL group of ``len(devices)`` ranks in threads (each on its GPU)."""
    import torch.distributed as dist

    from fgnn.exchange.groups import new_group

    if env is None:
        monkeypatch.delenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", raising=False)
    else:
        monkeypatch.setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", env)
    store, out, errors = dist.HashStore(), {}, []

    def member(rank: int) -> None:
        try:
            gpu.set_device(fake.device(devices[rank]))
            out[rank] = new_group(store, 3, rank, len(devices),
                                  fake.device(devices[rank]), 7.0)
        except Exception as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=member, args=(r,)) for r in range(len(devices))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    return out


def test_nccl_group_gets_its_timeout_and_an_error_handling_that_keeps_the_process(
        fake_cuda, monkeypatch):
    from fgnn.exchange.groups import is_nccl

    groups = _members(fake_cuda, [0, 1], monkeypatch)
    assert all(is_nccl(g) for g in groups.values())
    assert sorted(m["gpu"] for m in fake_cuda.nccl) == [0, 1]
    assert {m["timeout"] for m in fake_cuda.nccl} == {datetime.timedelta(seconds=7.0)}
    assert {m["async_error_handling"] for m in fake_cuda.nccl} == {"2"}


def test_nccl_error_handling_set_by_the_environment_is_kept(fake_cuda, monkeypatch):
    _members(fake_cuda, [0, 1], monkeypatch, env="1")
    assert {m["async_error_handling"] for m in fake_cuda.nccl} == {"1"}


def test_two_nccl_ranks_on_one_gpu_are_refused(fake_cuda):
    import torch.distributed as dist

    from fgnn.exchange.groups import nccl_group

    store, timeout = dist.HashStore(), datetime.timedelta(seconds=1)
    nccl_group(store, 0, 2, timeout, fake_cuda.device(0))
    with pytest.raises(CudaRuleError, match="Duplicate GPU"):
        nccl_group(store, 1, 2, timeout, fake_cuda.device(0))


def test_the_seed_count_is_read_on_a_side_stream_once_the_sum_is_done(fake_cuda):
    from fgnn.exchange.groups import _read_done

    count = fake_cuda.tensor(torch.tensor([3.0]), 0)[0]
    with pytest.raises(CudaRuleError):  # the host has not seen the sum complete
        _read_done(count)
    gpu.current_stream(fake_cuda.device(0)).synchronize()  # what wait_work does
    assert _read_done(count) == 3.0
    assert fake_cuda.host_reads[-1] is not fake_cuda.default_stream(0)
    assert _read_done(torch.tensor(2.0)) == 2.0


def test_step_memory_meter_on_a_gpu_reads_the_allocator_and_the_driver(fake_cuda):
    from fgnn.cache.sizing import CUDA_CONTEXT_BYTES
    from fgnn.executors._memory import StepMemoryMeter

    dev = fake_cuda.device(0)
    fake_cuda.allocated[0], fake_cuda.peak[0] = 1000, 9999
    meter = StepMemoryMeter(nn.Linear(2, 2), dev, pipelined=True)
    assert fake_cuda.resets == [0] and meter._base == 1000 and fake_cuda.syncs == 1
    assert meter.run(lambda b: {"loss": b}, 5) == {"loss": 5}
    fake_cuda.peak[0], fake_cuda.reserved[0], fake_cuda.free[0] = 1500, 4000, 7000
    fake_cuda.total, fake_cuda.nvml_bytes = 10_000, 4500
    r = meter.report()
    assert (r["step_peak_bytes"], r["device_free_bytes"], r["device_total_bytes"]) == \
        (500, 7000, 10_000)
    assert (r["context_bytes"], r["process_bytes"], r["gather_bytes"]) == (500, 4500, 0)
    fake_cuda.nvml_bytes = None  # NVML cannot see this process: the assumed context
    assert meter.report()["process_bytes"] == 4000 + CUDA_CONTEXT_BYTES


def test_an_executor_binds_its_gpu_as_the_thread_current_device(fake_cuda):
    from fgnn.executors.device import actor_device

    assert actor_device(str(fake_cuda.device(1))) == fake_cuda.device(1)
    assert fake_cuda.current_device() == 1


def test_a_job_on_gpus_lays_them_out_and_refuses_more_than_are_present(fake_cuda):
    from fgnn.config import JobConfig, RuntimeConfig
    from fgnn.job import Job, JobConfigError, describe_devices

    assert describe_devices(2) == ("gpu", "2 devices: CUDA GPUs (2 present)")
    kind, line = describe_devices(3)
    assert kind == "logical" and "only 2 CUDA devices present" in line
    Job(JobConfig(runtime=RuntimeConfig(devices=2))).validate()
    with pytest.raises(JobConfigError, match="runtime.devices.*only 2 CUDA devices are present"):
        Job(JobConfig(runtime=RuntimeConfig(devices=3))).validate()


def test_the_memory_plan_on_gpus_keeps_the_device_cache_off_the_host(fake_cuda, tmp_path):
    from fgnn.config import CacheConfig, JobConfig, ModelConfig, RuntimeConfig, SamplerConfig
    from fgnn.config import TrainConfig
    from fgnn.data.memory import MemoryLimit
    from fgnn.data.ondisk import load_ondisk
    from fgnn.data.outofcore import GraphRecipe, build
    from fgnn.memory_plan import plan_job

    path = build(GraphRecipe("g", 2000, 20000, feat_dim=16, num_classes=4), tmp_path / "g",
                 progress=False).path
    cfg = JobConfig(dataset=f"ondisk:{path}", model=ModelConfig(name="sage", hidden=16),
                    sampler=SamplerConfig(fanouts=(5, 5)),
                    train=TrainConfig(epochs=1, batch_size=100, eval_batch_size=100),
                    cache=CacheConfig(cache_ratio=0.5), runtime=RuntimeConfig(devices=2))
    names = {t.name for t in plan_job(cfg, load_ondisk(path), limit=MemoryLimit(1 << 36, "t")).terms}
    assert "device cache (logical device: host memory)" not in names
