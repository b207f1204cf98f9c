"""Which torch device an executor runs on: the one Ray assigned to its actor.

Each executor asks for a share of a GPU (``num_gpus``); Ray picks the physical GPU and, by
default, sets the actor process's ``CUDA_VISIBLE_DEVICES`` to it, so torch numbers it ``cuda:0``.
The executor therefore resolves its device *inside* the actor, from ``ray.get_gpu_ids()``, never
from the driver (whose machine may have no GPU at all, e.g. a CPU head node of a GPU cluster) and
never as a hard-coded ``cuda:0``. With Ray *logical* GPUs on a machine without GPUs the same code
lands on the CPU; on a node with NVIDIA GPUs a process that cannot use CUDA (a CPU wheel of torch,
a driver mismatch) is an error, never a silent CPU run. The resolved CUDA device is made the
process's current device (``torch.cuda.set_device``), so bare events and allocations land on it
even when Ray leaves every GPU visible (``RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES``).
"""

from __future__ import annotations

import os
from typing import Optional, Sequence, Union

import torch

from fgnn import gpu

__all__ = ["AUTO", "resolve_device", "actor_device", "bind_device", "node_nvidia_gpus"]

#: The device argument that asks an executor to take the device Ray assigned it.
AUTO = "auto"


def resolve_device(gpu_ids: Sequence[Union[int, str]], cuda_available: bool,
                   visible: Optional[str], device_count: int,
                   node_gpus: int = 0) -> torch.device:
    """The torch device for an actor assigned ``gpu_ids`` (pure logic, testable without Ray).

    Args:
        gpu_ids: what ``ray.get_gpu_ids()`` returned in the actor (empty: no GPU share).
        cuda_available: ``torch.cuda.is_available()`` in the actor.
        visible: the actor's ``CUDA_VISIBLE_DEVICES`` (None when unset).
        device_count: ``torch.cuda.device_count()`` in the actor.
        node_gpus: NVIDIA GPUs the node has, as Ray's own detection counts them (NVML, without
            torch); 0 on a machine without GPUs, where Ray's GPUs are logical.

    Returns:
        ``cpu`` without an assigned GPU, or with Ray logical GPUs (no CUDA, no GPU on the node);
        else ``cuda:i``, ``i`` the position of the first assigned id among the visible devices
        (Ray's default, so usually 0), or the id itself when Ray left ``CUDA_VISIBLE_DEVICES``
        unset.

    Raises:
        RuntimeError: when the assigned GPU is not one this process can see, or when the node
            has GPUs but this process cannot use CUDA.
    """
    if not gpu_ids:
        return torch.device("cpu")
    if not cuda_available:
        if node_gpus > 0:
            raise RuntimeError(
                f"Ray assigned GPU {gpu_ids[0]} on a node with {node_gpus} NVIDIA GPUs, but "
                f"torch.cuda.is_available() is False in this process (torch {torch.__version__}, "
                f"CUDA build {torch.version.cuda}): install a CUDA build of torch that matches "
                f"the driver")
        return torch.device("cpu")  # Ray logical GPUs on a machine without GPUs
    first = str(gpu_ids[0]).strip()
    if visible is not None and visible.strip() != "":
        names = [v.strip() for v in visible.split(",")]
        if first not in names:
            raise RuntimeError(f"Ray assigned GPU {first} but CUDA_VISIBLE_DEVICES={visible!r} "
                               f"does not list it")
        index = names.index(first)
    else:
        if not first.isdigit():
            raise RuntimeError(f"Ray assigned GPU {first!r} and CUDA_VISIBLE_DEVICES is unset: "
                               f"cannot tell which CUDA device that is")
        index = int(first)
    if index >= device_count:
        raise RuntimeError(f"Ray assigned GPU {first}, device index {index}, but this process "
                           f"sees {device_count} CUDA devices")
    return torch.device("cuda", index)


def node_nvidia_gpus() -> int:
    """NVIDIA GPUs on this node as Ray counts them (NVML, independent of torch); 0 when none or
    when Ray's detection is unavailable."""
    try:
        from ray._private.accelerators.nvidia_gpu import NvidiaGPUAcceleratorManager

        return int(NvidiaGPUAcceleratorManager.get_current_node_num_accelerators())
    except Exception:  # Ray absent, or NVML unusable: nothing to tell
        return 0


def bind_device(device: torch.device) -> torch.device:
    """Make a CUDA ``device`` the calling thread's current device (``torch.cuda.set_device``;
    CUDA's current device is per thread); other devices pass through."""
    if gpu.is_cuda(device):
        gpu.set_device(device)
    return device


def actor_device(requested: Union[str, torch.device] = AUTO) -> torch.device:
    """The device of the calling executor, made its current device (:func:`bind_device`):
    ``requested`` unless it is :data:`AUTO`, in which case the GPU Ray assigned to this actor
    (or the CPU, see :func:`resolve_device`).

    Raises:
        RuntimeError: see :func:`resolve_device`.
    """
    if str(requested) != AUTO:
        return bind_device(torch.device(requested))
    try:
        import ray

        ids = ray.get_gpu_ids() if ray.is_initialized() else []
    except Exception:  # not inside a Ray worker
        ids = []
    cuda = gpu.is_available()
    node_gpus = node_nvidia_gpus() if ids and not cuda else 0
    return bind_device(resolve_device(ids, cuda, os.environ.get("CUDA_VISIBLE_DEVICES"),
                                      gpu.device_count() if cuda else 0, node_gpus))
