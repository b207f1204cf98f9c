"""Helpers shared by the executors (internal): payloads through the object store, per-task
generators, the metrics fallback."""

from __future__ import annotations

import warnings
from typing import Any, Optional

import numpy as np
import torch

from fgnn.graph import CSRGraph

__all__ = ["graph_payload", "graph_from_payload", "tensor_from", "task_generator", "metrics_for",
           "NullMetrics"]


def graph_payload(graph: CSRGraph) -> dict[str, Optional[np.ndarray]]:
    """Numpy arrays of the topology: Ray stores them once and maps them zero-copy into every
    executor on the node (host memory shared like FGNN's pinned host copy)."""
    return {"indptr": graph.indptr.cpu().numpy(), "indices": graph.indices.cpu().numpy(),
            "weights": None if graph.weights is None else graph.weights.cpu().numpy()}


def tensor_from(array: Any) -> torch.Tensor:
    """A tensor over ``array`` without a copy (read-only object-store arrays included)."""
    if isinstance(array, torch.Tensor):
        return array
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # non-writable buffer: we never write
        return torch.from_numpy(np.asarray(array))


def graph_from_payload(payload: Any, device: torch.device | str = "cpu") -> CSRGraph:
    """Rebuild the graph from :func:`graph_payload` (or take a CSRGraph) on ``device``."""
    if isinstance(payload, CSRGraph):
        return payload.to(device)
    w = payload.get("weights")
    g = CSRGraph._trusted(tensor_from(payload["indptr"]), tensor_from(payload["indices"]),
                          None if w is None else tensor_from(w))
    return g.to(device)


def task_generator(seed: int, epoch: int, task_id: int, device: torch.device | str = "cpu"
                   ) -> torch.Generator:
    """The random source of one mini-batch task: the same on every executor, so a task
    re-sampled after a fault draws the same neighbourhood."""
    g = torch.Generator(device=device)
    g.manual_seed((int(seed) * 1_000_003 + int(epoch) * 100_003 + int(task_id)) % (2 ** 63))
    return g


class NullMetrics:
    """Stand-in for :class:`fgnn.monitor.metrics.RuntimeMetrics` when it is unavailable."""

    def __init__(self, role: str = "", device: str = "") -> None:
        self.role, self.device = role, device

    def batch_done(self, seconds: float) -> None:  # noqa: D102
        pass

    def stage_seconds(self, stage: str, seconds: float) -> None:  # noqa: D102
        pass

    def queue_depth(self, depth: int) -> None:  # noqa: D102
        pass

    def cache(self, hits: int, misses: int, bytes_host_to_device: int) -> None:  # noqa: D102
        pass


def _device_tag(name: str) -> str:
    """``fgnn-trainer-2`` -> ``device-2``: the metrics' device tag from an executor's name."""
    idx = name.rsplit("-", 1)[-1]
    return f"device-{idx}" if idx.isdigit() else name


def metrics_for(role: str, device: str) -> Any:
    """A ``RuntimeMetrics(role, device)``, or a no-op stand-in if the module is missing."""
    try:
        from fgnn.monitor.metrics import RuntimeMetrics
    except ImportError:  # pragma: no cover - the monitor package is optional for executors
        return NullMetrics(role, device)
    try:
        return RuntimeMetrics(role, device)
    except Exception:  # pragma: no cover - metrics must never stop training
        return NullMetrics(role, device)
