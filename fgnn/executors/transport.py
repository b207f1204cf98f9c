"""The transport stage: how a sample travels from its Sampler to a Trainer through the global
queue. The Sampler packs it (numpy buffers for Ray's object store, or tensors left on the GPU for
CUDA IPC), its ids narrowed to int32 where they fit and copied into pinned host memory; the
Trainer unpacks it over the object store's buffers and widens the ids again on its device.
"""

from __future__ import annotations

import warnings
from typing import Any, Optional

import numpy as np
import torch

from fgnn import gpu
from fgnn.config import SAMPLE_TRANSPORTS
from fgnn.sampling.base import Sample

__all__ = ["TRANSPORTS", "tensor_from", "choose_transport", "trainers_share_gpu",
           "transport_errors", "pack_sample", "pack_sample_tensors", "unpack_sample", "host_copy",
           "narrowable", "widen", "to_device"]


def tensor_from(array: Any) -> torch.Tensor:
    """A tensor over ``array`` without a copy (read-only object-store arrays included)."""
    if isinstance(array, torch.Tensor):
        return array
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # non-writable buffer: we never write
        return torch.from_numpy(np.asarray(array))


#: How a sample travels from its Sampler to a Trainer: ``object_store`` (host memory: Ray's
#: object store, numpy buffers mapped zero-copy; every device kind, across nodes; what ``auto``
#: takes) or ``cuda_ipc`` (Ray Direct Transport: the sample stays in the Sampler's GPU memory
#: and the Trainer maps it over CUDA IPC -- no host round trip). Ray's CUDA IPC receiver only
#: accepts tensors made on a GPU Ray assigned to the *receiving* actor
#: (``ray/experimental/rdt/cuda_ipc_transport.py``), and every Trainer takes from one queue, so
#: ``cuda_ipc`` is only valid when every Trainer of the job is on its Sampler's physical GPU.
TRANSPORTS = SAMPLE_TRANSPORTS


def transport_errors() -> tuple[type, ...]:
    """What a failed receipt of a sample raises: a :class:`ray.exceptions.RayError` (the owner
    died, the fetch timed out), ``ValueError`` (CUDA IPC: the receiver is not on the sender's
    GPU or node) or ``RuntimeError`` (CUDA IPC: the tensor cannot be reconstructed, e.g. its
    producer died). A Trainer answers each by handing the task back to be sampled again."""
    import ray

    return (ray.exceptions.RayError, ValueError, RuntimeError)


def trainers_share_gpu(mode: str, cluster_gpus: float) -> bool:
    """Whether every Trainer that can take a Sampler's samples runs on that Sampler's physical
    GPU, by construction: in ``single`` mode only the standby trains, in its Sampler's bundle;
    otherwise only a Ray cluster of one GPU puts every bundle on the same GPU (Ray picks the GPU
    of a fractional bundle itself)."""
    return mode == "single" or cluster_gpus <= 1


def choose_transport(requested: str, device_type: str, one_node: bool,
                     shared_gpu: bool) -> str:
    """The sample transport in force.

    ``auto`` is ``object_store``. ``cuda_ipc`` is taken only when asked for, and only where Ray's
    CUDA IPC receiver can read the samples: CUDA Samplers, one node and ``shared_gpu`` (every
    Trainer that can take a sample runs on its Sampler's physical GPU,
    :func:`trainers_share_gpu`: ``single`` mode, or a cluster of one GPU, e.g.
    ``--devices 2 --gpus-per-device 0.5`` on one GPU).

    Raises:
        ValueError: for an unknown name, or ``cuda_ipc`` asked for where it cannot work.
    """
    if requested not in TRANSPORTS:
        raise ValueError(f"sample transport must be one of {', '.join(TRANSPORTS)}, got "
                         f"{requested!r}")
    if requested != "cuda_ipc":
        return "object_store"
    why = ("the Samplers are not on CUDA" if device_type != "cuda" else
           "the executors span several nodes" if not one_node else
           "some Trainers are on other GPUs than their Sampler (Ray's CUDA IPC receiver only "
           "accepts tensors made on its own GPU)" if not shared_gpu else None)
    if why is not None:
        raise ValueError(f"sample transport cuda_ipc needs every Trainer on its Sampler's GPU: "
                         f"{why}; use object_store")
    return requested


def _numpy(t: torch.Tensor) -> Any:
    return t.detach().cpu().numpy()


def pack_sample(sample: Sample) -> dict[str, Any]:
    """The sample as numpy arrays: Ray stores numpy buffers out of band and maps them zero-copy
    into the reader, several times cheaper than pickling torch tensors (the C step)."""
    return sample.pack(_numpy)


def pack_sample_tensors(sample: Sample) -> dict[str, Any]:
    """The sample's layout with its tensors left where they are (on the GPU), for a direct
    tensor transport (:data:`TRANSPORTS`).

    Raises:
        ValueError: when the tensors are not all on one device (Ray puts one RDT object only
            when they are).
    """
    devices = {str(t.device) for t in sample.tensors()}
    if len(devices) > 1:
        raise ValueError(f"a sample sent by a tensor transport must have every tensor on one "
                         f"device, got {', '.join(sorted(devices))}")
    return sample.pack(lambda t: t)


def host_copy(sample: Sample, narrow: bool = False) -> Sample:
    """The C step's copy of a device sample into host memory: every tensor (int64 ids
    narrowed to int32 first, with ``narrow``: half the bytes of every edge list and id array)
    copied into pinned memory without blocking, then one wait for them all, where each
    tensor was one synchronous copy into pageable memory. A receiver restores the ids'
    width with :func:`widen` (on its device, after the upload)."""
    def stage(t: torch.Tensor) -> torch.Tensor:
        if narrow and t.dtype == torch.int64:
            t = t.to(torch.int32)
        if gpu.is_host(gpu.device_of(t)):
            return t
        return gpu.copy_into(gpu.empty_pinned(t.shape, t.dtype), t)

    moved = sample.map(stage)
    for dev in {gpu.device_of(t) for t in sample.tensors() if gpu.on_cuda(t)}:
        gpu.current_stream(dev).synchronize()  # one wait for every copy
    return moved


def narrowable(graph: Any, cache_map: Optional[torch.Tensor]) -> bool:
    """Whether a sample's int64 tensors fit int32: vertex ids below 2^31 on a homogeneous
    graph, and marks of at most 31 devices (an int64 cache map holds more)."""
    n = getattr(graph, "num_nodes", None)
    return (isinstance(n, int) and n < 2 ** 31
            and (cache_map is None or cache_map.dtype != torch.int64))


def widen(t: torch.Tensor) -> torch.Tensor:
    """An int32 id array of a narrowed sample (:func:`host_copy`) back to int64."""
    return t.long() if t.dtype == torch.int32 else t


def unpack_sample(packed: Any) -> Sample:
    """Inverse of :func:`pack_sample` (tensors over the read-only object-store buffers; the
    runtime never writes to a sample) and of :func:`pack_sample_tensors`. A :class:`Sample`
    passes through."""
    if isinstance(packed, Sample):
        return packed
    return Sample.unpack(packed, tensor_from)


def to_device(sample: Sample, h2d: Any) -> Sample:
    """The sample on a Trainer's device: each tensor uploaded by ``h2d`` (the Trainer's copy
    stream), the ids a CUDA Sampler narrowed for the host copy widened again there."""
    return sample.map(lambda t: widen(h2d(t)))
