"""The CUDA path's contracts, checked on a CPU (issue 18, defects 1, 2, 5, 8, 9, 10).

No GPU is needed: Ray's own CUDA IPC receiver (``ray/experimental/rdt/cuda_ipc_transport.py``)
runs with ``ray.get_gpu_ids`` and the runtime context mocked, samples are built on the ``meta``
device, and ``torch.cuda``'s entry points are replaced by recorders. Each test fails on the code
before its fix.
"""

from __future__ import annotations

import contextlib
import types

import pytest
import torch

ray = pytest.importorskip("ray")
from ray.experimental.rdt.cuda_ipc_transport import (  # noqa: E402
    CudaIpcCommunicatorMetadata, CudaIpcTransport, CudaIpcTransportMetadata)

from fgnn.executors import device as _device  # noqa: E402
from fgnn.executors.device import AUTO, actor_device, resolve_device  # noqa: E402
from fgnn.executors._streams import StageClock  # noqa: E402
from fgnn.executors.queue import QueueItem  # noqa: E402
from fgnn.executors.sampler import SamplerExecutor  # noqa: E402
from fgnn.executors.transport import (choose_transport, pack_sample,  # noqa: E402
                                      pack_sample_tensors, trainers_share_gpu)
from fgnn.sampling.base import Block, Sample  # noqa: E402


# ---------------------------------------------------------------- Ray's CUDA IPC receiver
def _as_ray_actor(monkeypatch, gpu_ids, node="node-a"):
    """The calling process looks like a Ray actor assigned ``gpu_ids`` on ``node``."""
    monkeypatch.setattr(ray, "get_gpu_ids", lambda: list(gpu_ids))
    monkeypatch.setattr(ray, "get_runtime_context",
                        lambda: types.SimpleNamespace(get_node_id=lambda: node))


def _rebuilt(*args):
    return torch.zeros(3)


def _sent(ray_gpu, rebuild=_rebuilt, event=None, node="node-a"):
    """What Ray's sender records for one tensor made on Ray GPU ``ray_gpu``: torch's
    ``reduce_tensor`` pair (rebuild function, 15 arguments, [6] the storage device)."""
    args = (torch.Tensor, (3,), (1,), 0, None, torch.float32, 0, b"h", 12, 0, False, b"r", 0,
            b"e", False)
    return CudaIpcTransportMetadata(tensor_meta=[((3,), torch.float32)], tensor_device="cuda",
                                    cuda_ipc_handles=[(rebuild, args)],
                                    cuda_ipc_event_ipc_handle=event, ray_gpu_idx=ray_gpu,
                                    ray_node_id=node)


def _receive(meta):
    return CudaIpcTransport().recv_multiple_tensors("obj", meta, CudaIpcCommunicatorMetadata())


def test_rays_receiver_rejects_a_tensor_made_on_another_gpu(monkeypatch):
    # The contract the transport choice must respect (read in Ray's source).
    _as_ray_actor(monkeypatch, [1])
    with pytest.raises(ValueError, match="same GPU"):
        _receive(_sent(0))
    _as_ray_actor(monkeypatch, [0])
    assert len(_receive(_sent(0))) == 1


@pytest.mark.parametrize("mode,cluster_gpus,sampler_gpu,trainer_gpu", [
    ("factored", 8, 0, 1),    # launch.py --devices 8: Trainers on other GPUs than the Sampler
    ("factored", 1, 0, 0),    # --devices 2 --gpus-per-device 0.5 on one GPU
    ("single", 8, 3, 3),      # the standby trains in its Sampler's bundle
])
@pytest.mark.parametrize("requested", ["auto", "cuda_ipc"])
def test_the_transport_in_force_is_one_rays_receiver_accepts(monkeypatch, requested, mode,
                                                             cluster_gpus, sampler_gpu,
                                                             trainer_gpu):
    """Whatever transport a layout gets, a Trainer of it can receive the sample: CUDA IPC only
    where the Trainer is on its Sampler's GPU (before the fix ``auto`` picked cuda_ipc for the
    8-GPU factored layout, and Ray's receiver raised)."""
    shared = trainers_share_gpu(mode, cluster_gpus)
    try:
        transport = choose_transport(requested, "cuda", True, shared)
    except ValueError as e:  # refused up front, with the reason, never at the first sample
        assert requested == "cuda_ipc" and not shared and "other GPUs" in str(e)
        return
    if transport == "cuda_ipc":
        _as_ray_actor(monkeypatch, [trainer_gpu])
        assert len(_receive(_sent(sampler_gpu))) == 1


# ---------------------------------------------------------------- the Trainer's receipt
class _CopyStreamRecorder:
    """Stands in for a Trainer's CopyStream: knows whether the caller is inside its scope and
    plays ``torch.cuda.current_stream`` (the copy stream inside the scope)."""

    def __init__(self) -> None:
        self.inside = False
        self.waits: list[tuple[str, object]] = []

    @contextlib.contextmanager
    def scope(self):
        self.inside = True
        try:
            yield
        finally:
            self.inside = False

    def current_stream(self, device=None):
        name = "copy" if self.inside else "default"
        return types.SimpleNamespace(wait_event=lambda ev: self.waits.append((name, ev)))


class _Ref:
    """An item's sample ref; ``ray.get`` (mocked) calls ``fetch``."""

    def __init__(self, fetch) -> None:
        self.fetch = fetch


class _Queue:
    """Stands in for the queue actor: hands out ``items``, then ``done``; records ``fail``."""

    def __init__(self, items) -> None:
        self.items, self.failed, self.reasons = list(items), [], []
        self.get = types.SimpleNamespace(remote=self._get)
        self.fail = types.SimpleNamespace(remote=self._fail)

    def _fail(self, name, task, reason=""):
        self.failed.append(task)
        self.reasons.append(reason)

    def _get(self, name, generation, timeout):
        return ("item", self.items.pop(0), 0.0) if self.items else ("done", None, 0.0)


def _trainer(queue, local_sampler=None):
    from fgnn.executors.trainer import TrainerExecutor
    from fgnn.models import GraphSAGE

    return TrainerExecutor(torch.randn(20, 4), torch.zeros(20, dtype=torch.long),
                           GraphSAGE(4, 2, num_layers=1, hidden=4), None, 0, None, queue,
                           local_sampler=local_sampler)


def _small_sample(task_id=6):
    return Sample(torch.tensor([0, 1]),
                  [Block(torch.tensor([2, 3]), torch.tensor([0, 1]), 4, 2)],
                  torch.tensor([0, 1, 2, 3]), torch.zeros(4, dtype=torch.uint8), task_id)


def _fake_ray_get(monkeypatch):
    monkeypatch.setattr(ray, "get", lambda x, *a, **k: x.fetch() if isinstance(x, _Ref) else x)


def _dead_producer(*args):
    raise RuntimeError("cudaIpcOpenMemHandle failed")  # what torch raises for a dead sender


@pytest.mark.parametrize("failure", ["other GPU", "producer died", "owner died"])
def test_a_failed_receipt_hands_the_task_back_to_be_sampled_again(monkeypatch, failure):
    """A ValueError/RuntimeError from Ray's CUDA IPC receiver (or a RayError) is "sample that
    task again": the task is failed on the queue and the Trainer takes the next one (before the
    fix the ValueError and RuntimeError escaped and aborted the job)."""
    def broken():
        if failure == "other GPU":
            _as_ray_actor(monkeypatch, [1])
            return _receive(_sent(0))
        if failure == "producer died":
            _as_ray_actor(monkeypatch, [0])
            return _receive(_sent(0, rebuild=_dead_producer))
        raise ray.exceptions.OwnerDiedError("00" * 28, "", "")

    good = pack_sample(_small_sample(6))
    queue = _Queue([QueueItem(0, 5, ref=_Ref(broken)), QueueItem(0, 6, ref=_Ref(lambda: good))])
    _fake_ray_get(monkeypatch)
    got = _trainer(queue)._take(0, 0)
    assert got is not None and got[0] == 6 and queue.failed == [5]
    # the reason travels with the retry (the queue logs it; its cap's line names it)
    want = {"other GPU": "ValueError: CUDA IPC transport only supports tensors on the same GPU",
            "producer died": "RuntimeError:", "owner died": "OwnerDiedError"}[failure]
    assert queue.reasons[0].startswith(want) and "\n" not in queue.reasons[0]


def test_the_ipc_event_is_waited_on_the_copy_stream(monkeypatch):
    """Ray's receiver makes ``torch.cuda.current_stream`` wait for the sender's event; the
    Trainer receives inside its copy-stream scope, where the sample's tensors are then used
    (before the fix it received on the default stream)."""
    recorder = _CopyStreamRecorder()
    monkeypatch.setattr(torch.cuda, "current_stream", recorder.current_stream)
    monkeypatch.setattr(torch.cuda, "Event", types.SimpleNamespace(
        from_ipc_handle=lambda device, handle: ("event", handle)))
    _as_ray_actor(monkeypatch, [0])
    rebuilt = pack_sample_tensors(_small_sample(6))

    def fetch():
        _receive(_sent(0, event=b"ev"))  # Ray's own receipt, event wait included
        return rebuilt

    queue = _Queue([QueueItem(0, 6, ref=_Ref(fetch))])
    _fake_ray_get(monkeypatch)
    trainer = _trainer(queue)
    trainer.copies = recorder
    assert trainer._take(0, 0)[0] == 6
    assert recorder.waits == [("copy", ("event", b"ev"))]


def test_time_sharing_samples_inside_the_copy_stream_scope(monkeypatch):
    """The time-sharing Trainer's own sampling (with its host syncs) runs on the copy stream, so
    it does not wait for the training kernels queued on the training stream."""
    recorder = _CopyStreamRecorder()
    seen = []

    class LocalSampler:
        def set_cache_map(self, cache_map):
            pass

        def sample(self, epoch, task_id, plan=None):
            seen.append(recorder.inside)
            return _small_sample(task_id), 0.0, 0.0

    trainer = _trainer(_Queue([QueueItem(0, 3)]), LocalSampler())
    trainer.copies = recorder
    _fake_ray_get(monkeypatch)
    assert trainer._take(0, 0)[0] == 3 and seen == [True]


# ---------------------------------------------------------------- one device per RDT object
class _MetaSampler:
    """Returns a sample on the ``meta`` device, as a CUDA sampler returns one on its GPU."""

    def sample(self, graph, seeds, gen):
        m = torch.device("meta")
        return Sample(torch.empty(4, dtype=torch.long, device=m),
                      [Block(torch.empty(9, dtype=torch.long, device=m),
                             torch.empty(9, dtype=torch.long, device=m), 7, 4)],
                      torch.empty(7, dtype=torch.long, device=m))


@pytest.mark.parametrize("with_map", [False, True])
def test_every_tensor_of_a_marked_sample_is_on_the_samplers_device(with_map):
    """``ray.put(..., _tensor_transport="cuda_ipc")`` needs every tensor of the object on one
    device; the M step without a cache map (every warm-up sample) made ``cached`` on the CPU."""
    from conftest import random_graph

    ex = SamplerExecutor(random_graph(30, 100), _MetaSampler(), torch.arange(8), 4, 0)
    ex.cache_map = torch.zeros(30, dtype=torch.uint8, device="meta") if with_map else None
    sample, _, _ = ex.sample(0, 0)
    packed = pack_sample_tensors(sample)
    tensors = [packed["seeds"], packed["input_nodes"], packed["cached"]]
    tensors += [t for blk in packed["blocks"] for t in blk if isinstance(t, torch.Tensor)]
    assert {t.device.type for t in tensors} == {"meta"}


def test_a_sample_across_devices_is_refused_before_ray_sees_it():
    s = _small_sample()
    s.cached = torch.zeros(4, dtype=torch.uint8, device="meta")
    with pytest.raises(ValueError, match="one device"):
        pack_sample_tensors(s)


# ---------------------------------------------------------------- the actor's device
def test_a_gpu_node_without_cuda_in_torch_is_an_error_not_a_cpu_run():
    with pytest.raises(RuntimeError, match="torch.cuda.is_available"):
        resolve_device([0], False, "0", 0, node_gpus=8)
    assert resolve_device([0], False, "0", 0, node_gpus=0) == torch.device("cpu")  # logical


def test_actor_device_refuses_a_silent_cpu_fallback(monkeypatch):
    """Ray assigned a GPU on a node with NVIDIA GPUs (Ray's NVML count) but this torch cannot
    use CUDA (a CPU wheel, a driver mismatch): the actor fails with the reason. With Ray logical
    GPUs (no GPU on the node) the executor runs on the CPU."""
    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    monkeypatch.setattr(ray, "get_gpu_ids", lambda: [0])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(_device, "node_nvidia_gpus", lambda: 8)
    with pytest.raises(RuntimeError, match="8 NVIDIA GPUs"):
        actor_device(AUTO)
    monkeypatch.setattr(_device, "node_nvidia_gpus", lambda: 0)
    assert actor_device(AUTO) == torch.device("cpu")


def test_the_assigned_gpu_becomes_the_current_device(monkeypatch):
    """With every GPU visible (``RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES``) the actor's GPU
    is not device 0: ``torch.cuda.set_device`` makes it the current one, and stage events are
    recorded on that device's stream."""
    calls = []
    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    monkeypatch.setattr(ray, "get_gpu_ids", lambda: [1])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: calls.append(("set", d)))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert actor_device(AUTO) == torch.device("cuda:1")
    assert calls == [("set", torch.device("cuda:1"))]

    class Event:
        def __init__(self, enable_timing=False):
            pass

        def record(self, stream=None):
            calls.append(("record", stream))

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda d=None: f"stream of {d}")
    StageClock("cuda:1").start()
    assert calls[-1] == ("record", "stream of cuda:1")


# ---------------------------------------------------------------- host syncs of a training step
def _trainer_batch():
    """A Trainer executor in this process and one extracted batch (gpucheck's pair)."""
    from fgnn import gpucheck
    from fgnn.data import load_dataset

    ds = load_dataset("rmat:scale=9,edge_factor=8,feat_dim=8,seed=0")
    _, trn, fetch, _ = gpucheck._executor_pair(ds, torch.device("cpu"), 32)
    return trn, fetch(0)


@pytest.mark.parametrize("to_host", [False, True], ids=["collective", "server"])
def test_a_training_step_reads_the_device_once_after_the_backward_pass(monkeypatch, to_host):
    """Host syncs of one training step (forward, backward, finiteness check, the gradient's
    host copy for the parameter server), counted as the sampler's budget is
    (:mod:`fgnn.monitor.dispatch_count`): the step's own forward and backward, plus one read.
    Before, ``bool(torch.isfinite(loss))`` synced between forward and backward (the backward
    kernels waited for it), and ``float(loss)`` and the gradient's check read the device
    again."""
    from fgnn.executors import trainer as trainer_mod
    from fgnn.models.step import forward_backward
    from fgnn.monitor.dispatch_count import DispatchCounter

    trn, batch = _trainer_batch()
    with DispatchCounter() as plain:  # forward and backward alone
        forward_backward(trn.model, trn.step.loss, batch.sample, batch.x, batch.labels)
    calls = []
    real = forward_backward

    def spy(*args, **kwargs):
        calls.append(kwargs.get("check", args[5] if len(args) > 5 else None))
        return real(*args, **kwargs)

    monkeypatch.setattr(trainer_mod, "forward_backward", spy)
    with DispatchCounter() as step:
        loss, grad = trn._backward(0, batch, to_host=to_host)
    assert calls == [None]  # nothing runs between the loss and the backward pass
    assert step.syncs == plain.syncs + 1, (step.sync_ops, plain.sync_ops)
    assert loss.device.type == "cpu" and torch.isfinite(loss)
    assert (grad is not None) == to_host
    if to_host:
        assert grad.numel() == sum(p.numel() for p in trn.params)


@pytest.mark.parametrize("to_host", [False, True], ids=["collective", "server"])
def test_a_non_finite_step_is_refused_before_its_gradient_leaves(to_host):
    from fgnn.executors.common import NonFiniteLoss

    trn, batch = _trainer_batch()
    with torch.no_grad():
        trn.params[0].fill_(float("nan"))
    with pytest.raises(NonFiniteLoss) as err:
        trn._backward(0, batch, to_host=to_host)
    assert err.value.task_id == batch.task_id


# ---------------------------------------------------------------- gather keeps a device sample there
@pytest.mark.parametrize("with_marks", [False, True])
def test_a_sample_already_on_the_device_is_split_there(monkeypatch, with_marks):
    """A sample that arrived on the Trainer's device (CUDA IPC, time-sharing) is split on the
    device: only the misses' ids go to the host (for the host read); the batch's ids and marks
    no longer make a round trip through host memory. On the CPU the device split is forced
    (``split_on_device``) and ``Tensor.cpu`` counted: the rows and counters equal the host
    split's."""
    from fgnn.cache.feature_store import FeatureStore
    from fgnn.cache.placement import clique_placement

    feat = 4
    x = torch.arange(6 * feat, dtype=torch.float32).reshape(6, feat)
    pl = clique_placement(torch.tensor([4, 6, 6, 6, 5, 5], dtype=torch.float64) / 6, 2, 2,
                          alpha=0.3)
    buffers = [x[b] for b in pl.buffers]
    ids = torch.tensor([0, 1, 2, 3, 4, 5, 2])
    marks = pl.holder_bits()[ids] if with_marks else None
    host = FeatureStore.from_placement(x, pl, 0, buffers)
    device = FeatureStore.from_placement(x, pl, 0, buffers)
    device.split_on_device = True
    assert not host.split_on_device  # a CPU store splits on the host (where its ids are)
    copies = []
    real_cpu = torch.Tensor.cpu

    def counted_cpu(self, *a, **k):
        copies.append(self.numel())
        return real_cpu(self, *a, **k)

    monkeypatch.setattr(torch.Tensor, "cpu", counted_cpu)
    want = host.gather(ids, marks)
    host_copies, copies[:] = list(copies), []
    got = device.gather(ids, marks)
    assert torch.equal(got, want) and torch.equal(got, x[ids])
    assert (device.stats.hits, device.stats.peer, device.stats.misses) == \
        (host.stats.hits, host.stats.peer, host.stats.misses) == (2, 3, 2)
    # the host split copies the batch's ids (and marks) to the host
    assert host_copies == [len(ids)] * (2 if with_marks else 1) + [2]
    assert copies == [2]  # the device split: the two misses' ids only
