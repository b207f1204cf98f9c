"""Executors take the device Ray assigned them (fgnn.executors.device), tested without a GPU by
giving the resolver what Ray and CUDA would report."""

from __future__ import annotations

import pytest
import torch

from fgnn.executors import device as _device
from fgnn.executors.device import AUTO, actor_device, resolve_device


@pytest.mark.parametrize("ids,cuda,visible,count,want", [
    ([], True, "0", 1, "cpu"),                # no GPU share: a CPU executor
    ([0], False, None, 0, "cpu"),             # Ray logical GPUs on a machine without CUDA
    (["3"], True, "3", 1, "cuda:0"),          # Ray's default: only the assigned GPU is visible
    ([2], True, "0,1,2,3", 4, "cuda:2"),      # all visible: the assigned one by position
    (["GPU-5e1c"], True, "GPU-a,GPU-5e1c", 2, "cuda:1"),  # UUIDs
    (["1"], True, None, 2, "cuda:1"),         # RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES
    ([1], True, "", 2, "cuda:1"),
])
def test_device_from_the_ids_ray_assigned(ids, cuda, visible, count, want):
    assert resolve_device(ids, cuda, visible, count) == torch.device(want)


@pytest.mark.parametrize("ids,visible,count,match", [
    (["4"], "0,1", 2, "does not list it"),
    (["3"], None, 2, "sees 2 CUDA devices"),
    (["GPU-x"], None, 1, "cannot tell which CUDA device"),
])
def test_an_unreachable_assignment_is_an_error(ids, visible, count, match):
    with pytest.raises(RuntimeError, match=match):
        resolve_device(ids, True, visible, count)


def test_actor_device_asks_ray_inside_the_actor(monkeypatch):
    """``auto`` reads the actor's own assignment (here a mocked Ray worker given GPU 1 of two
    visible), never the driver's view; an explicit device is taken as given."""
    import ray

    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    monkeypatch.setattr(ray, "get_gpu_ids", lambda: [1])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: None)
    monkeypatch.setattr(_device, "node_nvidia_gpus", lambda: 0)  # logical GPUs below
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert actor_device(AUTO) == torch.device("cuda:1")
    assert actor_device("cpu") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert actor_device(AUTO) == torch.device("cpu")
    assert _device.AUTO == "auto"


def test_executors_built_with_auto_land_where_ray_put_them():
    """In-process (no Ray worker) an executor built with ``auto`` runs on the CPU."""
    from fgnn.executors.sampler import SamplerExecutor
    from fgnn.sampling import KHop
    from conftest import random_graph

    ex = SamplerExecutor(random_graph(50, 200), KHop([2]), torch.arange(10), 4, 0, device=AUTO)
    assert ex.device == torch.device("cpu") and ex.ready()[1] == "cpu"
