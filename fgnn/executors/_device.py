"""Which torch device an executor runs on: the one Ray assigned to its actor.

Each executor asks for a share of a GPU (``num_gpus``); Ray picks the physical GPU and, by
default, sets the actor process's ``CUDA_VISIBLE_DEVICES`` to it, so torch numbers it ``cuda:0``.
The executor therefore resolves its device *inside* the actor, from ``ray.get_gpu_ids()``, never
from the driver (whose machine may have no GPU at all, e.g. a CPU head node of a GPU cluster) and
never as a hard-coded ``cuda:0``. With Ray *logical* GPUs on a machine without CUDA the same code
lands on the CPU.
"""

from __future__ import annotations

import os
from typing import Optional, Sequence, Union

import torch

__all__ = ["AUTO", "resolve_device", "actor_device"]

#: The device argument that asks an executor to take the device Ray assigned it.
AUTO = "auto"


def resolve_device(gpu_ids: Sequence[Union[int, str]], cuda_available: bool,
                   visible: Optional[str], device_count: int) -> torch.device:
    """The torch device for an actor assigned ``gpu_ids`` (pure logic, testable without Ray).

    Args:
        gpu_ids: what ``ray.get_gpu_ids()`` returned in the actor (empty: no GPU share).
        cuda_available: ``torch.cuda.is_available()`` in the actor.
        visible: the actor's ``CUDA_VISIBLE_DEVICES`` (None when unset).
        device_count: ``torch.cuda.device_count()`` in the actor.

    Returns:
        ``cpu`` without an assigned GPU or without CUDA (Ray logical GPUs); else ``cuda:i``, ``i``
        the position of the first assigned id among the visible devices (Ray's default, so
        usually 0), or the id itself when Ray left ``CUDA_VISIBLE_DEVICES`` unset.

    Raises:
        RuntimeError: when the assigned GPU is not one this process can see.
    """
    if not gpu_ids or not cuda_available:
        return torch.device("cpu")
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


def actor_device(requested: Union[str, torch.device] = AUTO) -> torch.device:
    """The device of the calling executor: ``requested`` unless it is :data:`AUTO`, in which
    case the GPU Ray assigned to this actor (or the CPU, see :func:`resolve_device`)."""
    if str(requested) != AUTO:
        return torch.device(requested)
    try:
        import ray

        ids = ray.get_gpu_ids() if ray.is_initialized() else []
    except Exception:  # not inside a Ray worker
        ids = []
    cuda = torch.cuda.is_available()
    return resolve_device(ids, cuda, os.environ.get("CUDA_VISIBLE_DEVICES"),
                          torch.cuda.device_count() if cuda else 0)
