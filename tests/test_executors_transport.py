"""How samples travel and how devices share a GPU: transport choice, both sample packings, and
the factored layout on one (logical) GPU with fractional shares."""

from __future__ import annotations

import pytest
import torch

from fgnn.executors.transport import (choose_transport, pack_sample, pack_sample_tensors,
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


@pytest.mark.own_ray  # other resources than the shared cluster
def test_factored_layout_on_one_gpu_with_half_shares():
    """Two devices at 0.5 GPU each: the whole factored layout (Sampler + standby on one device,
    a Trainer on the other) fits a single GPU -- here a single logical GPU."""
    from fgnn.config import (CacheConfig, JobConfig, ModelConfig, RuntimeConfig, SamplerConfig,
                             TrainConfig)
    from fgnn.data.synthetic import rmat_dataset
    from fgnn.runtime.driver import Runtime

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


# ---------------------------------------------------------------------------- failed receipts
class _QueueHandle:
    """A :class:`GlobalQueue` behind Ray-like ``handle.method.remote(...)`` calls, run on an
    event loop in a thread (the queue actor's loop)."""

    def __init__(self, q):
        import asyncio
        import threading

        self.q, self.loop = q, asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()

    def __getattr__(self, name):
        import asyncio
        from types import SimpleNamespace

        fn = getattr(self.q, name)

        def remote(*args):
            if asyncio.iscoroutinefunction(fn):
                return asyncio.run_coroutine_threadsafe(fn(*args), self.loop)
            return asyncio.run_coroutine_threadsafe(asyncio.sleep(0, fn(*args)), self.loop)

        return SimpleNamespace(remote=remote)


def test_a_transport_that_always_fails_ends_the_epoch_with_one_line_after_the_retries(
        monkeypatch, caplog):
    """A Trainer whose every receipt fails (a CUDA IPC handle refused, as Ray's receiver
    refuses a tensor made on another GPU): each failure hands the task back with its reason,
    logged; the MAX_FETCH_RETRIES-th aborts the epoch, the Trainer's take returns (no stall)
    and the queue names the cause in one line. Before, ``queue.fail`` had no cap: the task was
    sampled and refused again until the stall guard."""
    import concurrent.futures
    import logging
    import threading
    import time
    from contextlib import nullcontext
    from types import SimpleNamespace

    import ray

    from fgnn.executors.queue import MAX_FETCH_RETRIES, GlobalQueue, QueueItem
    from fgnn.executors.trainer import TrainerExecutor

    handle = _QueueHandle(GlobalQueue(8))
    handle.begin_epoch.remote(0, 1).result(5)
    gen = handle.register.remote("t0").result(5)
    refused = object()  # a sample ref whose receipt always fails

    def fake_get(ref, timeout=None):
        if ref is refused:
            raise ValueError("CUDA IPC: the tensor was made on GPU 0, this actor has GPU 1\n"
                             "(traceback ...)")
        return ref.result(10) if isinstance(ref, concurrent.futures.Future) else ref

    monkeypatch.setattr(ray, "get", fake_get)
    resampled = []

    def sampler():  # the runtime samples a lost task again (here: the same refused ref)
        while True:
            st = handle.poll.remote(0).result(5)
            resampled.extend(st["lost"])
            if st["failure"]:
                return st
            for t in st["lost"]:
                handle.put.remote(QueueItem(0, t, ref=refused, producer="s0")).result(5)
            time.sleep(0.01)

    handle.put.remote(QueueItem(0, 0, ref=refused, producer="s0")).result(5)
    trainer = SimpleNamespace(_stop=threading.Event(), queue=handle, name="t0", role="trainer",
                              copies=SimpleNamespace(scope=nullcontext), local_sampler=None)
    out: dict = {}
    t = threading.Thread(target=lambda: out.setdefault(
        "took", TrainerExecutor._take(trainer, 0, gen)), daemon=True)
    caplog.set_level(logging.WARNING, logger="fgnn.executors.queue")
    t.start()
    st = sampler()
    t.join(10)
    assert not t.is_alive() and out["took"] is None  # the epoch ended; nothing was trained
    assert resampled == [0] * (MAX_FETCH_RETRIES - 1)
    assert st["failure"].count("\n") == 0
    assert (f"task 0's sample could not be received {MAX_FETCH_RETRIES} times" in st["failure"]
            and "ValueError: CUDA IPC: the tensor was made on GPU 0" in st["failure"])
    assert st["aborted"] == st["failure"]
    retries = [r for r in caplog.records if "could not fetch its sample" in r.getMessage()]
    assert len(retries) == MAX_FETCH_RETRIES and "made on GPU 0" in retries[0].getMessage()


def test_a_cuda_ipc_sampler_gets_ray_s_tensor_transport_group():
    from fgnn.executors.actors import remote_options, tensor_transport_supported

    assert tensor_transport_supported()  # Ray 2.60 takes enable_tensor_transport
    ipc = remote_options(0.25, {"transport": "cuda_ipc"})
    assert ipc["enable_tensor_transport"] is True and ipc["num_gpus"] == 0.25
    assert "enable_tensor_transport" not in remote_options(0.5, {"transport": "object_store"})
    assert "enable_tensor_transport" not in remote_options(0.5, {})


def test_an_actor_whose_constructor_raised_is_reported_with_its_error():
    """A refused ``cuda_ipc`` raises in the Sampler's constructor; the job's line names that
    error, not only "died (ActorDiedError)"."""
    from fgnn.runtime.driver import _why

    text = ("The actor died because of an error raised in its creation task, "
            "ray::fgnn-sampler-0:SamplerExecutor.__init__() (pid=1, ip=1.2.3.4)\n"
            "  File \"sampler.py\", line 95, in choose_transport\n"
            "    raise ValueError(...)\n"
            "ValueError: sample transport cuda_ipc needs every Trainer on its Sampler's GPU: "
            "the Samplers are not on CUDA; use object_store")
    why = _why(RuntimeError(text))
    assert why.startswith(": its constructor raised ValueError: sample transport cuda_ipc")
    assert "not on CUDA" in why
    assert _why(RuntimeError("The actor is dead because its node has died. More.")) == \
        ": the actor is dead because its node has died"


def test_the_c_step_narrows_ids_to_int32_and_the_trainer_restores_them():
    """A CUDA Sampler's host copy (the C step) narrows int64 ids to int32 where they fit:
    half the bytes of every edge list through the object store; the Trainer widens them on
    its device after the upload, so it trains on the same sample."""
    from fgnn.executors.transport import narrowable, host_copy, widen

    g = random_graph(300, 3000, seed=2)
    s = KHop([4, 3]).sample(g, torch.arange(20), torch.Generator().manual_seed(1))
    s.mark(torch.zeros(300, dtype=torch.uint8))
    s.task_id = 7
    narrow = host_copy(s, narrow=True)
    assert narrow.task_id == 7 and narrow.input_nodes.dtype == torch.int32
    assert all(b.src.dtype == torch.int32 for b in narrow.blocks)
    assert narrow.nbytes() < s.nbytes()
    back = unpack_sample(pack_sample(narrow)).map(widen)
    assert back.input_nodes.dtype == torch.int64
    assert torch.equal(back.input_nodes, s.input_nodes) and torch.equal(back.seeds, s.seeds)
    assert torch.equal(back.cached, s.cached)
    for a, b in zip(back.blocks, s.blocks):
        assert torch.equal(a.src, b.src) and torch.equal(a.dst, b.dst)
    assert host_copy(s).input_nodes.dtype == torch.int64  # not narrowed unless asked
    assert narrowable(g, None) and narrowable(g, torch.zeros(300, dtype=torch.int32))
    assert not narrowable(g, torch.zeros(300, dtype=torch.int64))  # > 31 devices' marks
    assert not narrowable(object(), None)  # a typed graph: no single vertex count
