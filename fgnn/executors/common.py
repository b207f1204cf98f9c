"""Helpers shared by the executors (internal): payloads through the object store, per-task
generators, the metrics fallback."""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import torch

from fgnn.executors.transport import tensor_from
from fgnn.graph import CSRGraph, TopologyFiles

__all__ = ["graph_payload", "graph_from_payload", "task_generator", "metrics_for",
           "NullMetrics", "MemmapFeatures", "features_payload", "open_features",
           "open_disk_tiers"]


def graph_payload(graph: CSRGraph) -> Any:
    """What the runtime ships for the topology: its :class:`~fgnn.graph.TopologyFiles` when it
    is memory-mapped from an ``ondisk:`` directory (every executor on the host maps the same
    pages; nothing enters the object store), else numpy arrays, which Ray stores once and maps
    zero-copy into every executor on the node."""
    if graph.files is not None:
        return graph.files
    return {"indptr": graph.indptr.cpu().numpy(), "indices": graph.indices.cpu().numpy(),
            "weights": None if graph.weights is None else graph.weights.cpu().numpy()}


@dataclass(frozen=True)
class MemmapFeatures:
    """Where a file-backed feature matrix lies: enough for an executor to map it itself.

    The runtime ships this (a few hundred bytes) instead of the matrix when the dataset's
    features are an ``np.memmap`` (an ``ondisk:DIR`` dataset), so features larger than host
    memory never pass through the object store; each Trainer opens its host tier locally and
    reads only the rows it needs (cache fill, misses). The path must be readable on every node
    that runs a Trainer (always so on one machine).

    Attributes:
        path: absolute path of the file (``features.npy``).
        offset: byte offset of row 0 in the file (past the ``.npy`` header).
        shape: ``(N, F)``.
        dtype: numpy dtype string (``"<f4"``).
    """

    path: str
    offset: int
    shape: tuple[int, int]
    dtype: str

    @classmethod
    def of(cls, array: Any) -> Optional["MemmapFeatures"]:
        """The descriptor of a C-contiguous 2-D ``np.memmap`` backed by a file, or None (an
        in-memory array, a strided view, an anonymous map)."""
        if not isinstance(array, np.memmap) or array.ndim != 2 or not array.flags.c_contiguous:
            return None
        mm = getattr(array, "_mmap", None)
        if array.filename is None or mm is None or not os.path.isfile(array.filename):
            return None
        try:  # file offset of the first element: mapping start + position inside the mapping
            base = np.frombuffer(mm, dtype=np.uint8).ctypes.data
        except (TypeError, ValueError, BufferError):
            return None
        start = int(array.offset) - int(array.offset) % mmap.ALLOCATIONGRANULARITY
        offset = start + (array.ctypes.data - base)
        size = int(np.prod(array.shape)) * array.dtype.itemsize
        if offset < 0 or offset + size > os.path.getsize(array.filename):
            return None
        return cls(os.path.abspath(array.filename), int(offset),
                   (int(array.shape[0]), int(array.shape[1])), array.dtype.str)

    def open(self) -> np.ndarray:
        """Map the matrix read-only (nothing is read until rows are indexed).

        Raises:
            ValueError: if the file is missing on this node or shorter than described.
        """
        if not os.path.isfile(self.path):
            raise ValueError(f"feature file {self.path} is not readable on this node (an "
                             f"on-disk dataset must lie on storage every Trainer node sees)")
        need = self.offset + int(np.prod(self.shape)) * np.dtype(self.dtype).itemsize
        if os.path.getsize(self.path) < need:
            raise ValueError(f"feature file {self.path} holds fewer than {need} bytes")
        arr = np.memmap(self.path, dtype=np.dtype(self.dtype), mode="r", offset=self.offset,
                        shape=self.shape)
        from fgnn.data.ondisk import advise_random  # not at import: fgnn.data loads scipy

        advise_random(arr)
        return arr


def features_payload(features: Any) -> Any:
    """What the runtime ships for the feature matrix: a :class:`MemmapFeatures` for a
    file-backed memmap, else a numpy array (for ``ray.put``)."""
    desc = MemmapFeatures.of(features)
    if desc is not None:
        return desc
    if isinstance(features, torch.Tensor):
        return features.cpu().numpy()
    return np.asarray(features)


def open_features(payload: Any) -> Any:
    """An executor's host feature matrix from :func:`features_payload`'s result (a
    :class:`MemmapFeatures` is mapped here, locally)."""
    if isinstance(payload, MemmapFeatures):
        return payload.open()
    return payload


def open_disk_tiers(payload: Any, hotness: Optional[torch.Tensor], alpha: float, device: str,
                    disk: Any, seed: int = 0) -> Any:
    """A Trainer's GIDS tiers over an on-disk feature file (``DiskConfig.feature_tier="disk"``).

    Storage: 4 KiB-page reads of the file (``O_DIRECT`` when ``disk.io == "direct"``); in front
    of it the constant CPU buffer of the ``disk.cpu_buffer`` hottest rows by ``hotness`` (GIDS
    §3.3; filled once here, which is not counted as per-epoch traffic); in front of that a device
    software cache of ``floor(alpha N)`` rows with ``disk.cache`` eviction (window buffering with
    ``disk.window`` look-ahead, LRU or random, §3.4); with ``disk.accumulator`` the storage reads
    of consecutive mini-batches are merged up to the Eq. 2-3 threshold (§3.2).

    Args:
        payload: the :class:`MemmapFeatures` descriptor of the file.
        hotness: ``(N,)`` hotness of the job's cache policy (orders the CPU buffer); None in
            the warm-up epochs, which run without the CPU buffer.
        alpha: this Trainer's cache ratio (the device cache's share of rows).
        device: the training device.
        disk: the :class:`~fgnn.config.DiskConfig`.
        seed: seed of the cache's random eviction.

    Returns:
        A :class:`~fgnn.cache.disk_tiers.DiskTiers`.

    Raises:
        ValueError: in-memory features, a file that disagrees with the descriptor, or a file
            that cannot be read with direct I/O.
    """
    from fgnn.cache.disk import (AccessAccumulator, CPUBufferedSource, DeviceSoftwareCache,
                                 DiskFeatureSource, DiskTiers, StorageAccessModel)
    from fgnn.cache.feature_store import num_cached_rows

    if not isinstance(payload, MemmapFeatures):
        raise ValueError("the disk feature tier reads the features.npy of an ondisk:DIR dataset; "
                         f"these features are in memory ({type(payload).__name__})")
    src = DiskFeatureSource(payload.path, num_threads=disk.threads, direct=disk.io == "direct")
    if (src.layout.data_offset, src.layout.shape) != (payload.offset, tuple(payload.shape)):
        src.close()
        raise ValueError(f"feature file {payload.path}: the disk tier reads the whole .npy matrix "
                         f"(rows from offset {src.layout.data_offset}, shape {src.layout.shape}), "
                         f"but the dataset maps offset {payload.offset}, shape {payload.shape}")
    n = src.num_rows
    source: Any = src
    if disk.cpu_buffer > 0 and hotness is not None:  # no hotness yet: the warm-up, no buffer
        source = CPUBufferedSource(src, hotness, ratio=disk.cpu_buffer)
        src.reset_stats()  # the one-time fill is preprocessing, not per-epoch traffic
    rows = num_cached_rows(alpha, n)
    cache = (DeviceSoftwareCache(n, rows, src.dim, src.dtype, device, policy=disk.cache,
                                 seed=seed) if rows > 0 else None)
    acc = (AccessAccumulator.from_model(StorageAccessModel(), src.row_bytes, src.page_size)
           if disk.accumulator else None)
    return DiskTiers(source, cache, window=disk.window if disk.cache == "window" else 0,
                     accumulator=acc, device=device)



def graph_from_payload(payload: Any, device: torch.device | str = "cpu") -> CSRGraph:
    """Rebuild the graph from :func:`graph_payload` (or take a CSRGraph) on ``device``."""
    if isinstance(payload, CSRGraph):
        return payload.to(device)
    if isinstance(payload, TopologyFiles):
        return payload.open().to(device)
    w = payload.get("weights")
    g = CSRGraph._trusted(tensor_from(payload["indptr"]), tensor_from(payload["indices"]),
                          None if w is None else tensor_from(w))
    return g.to(device)


def task_generator(seed: int, epoch: int, task_id: int, device: torch.device | str = "cpu"
                   ) -> torch.Generator:
    """The random source of one mini-batch task: the same on every executor, so a task
    re-sampled after a fault draws the same neighbourhood."""
    g = torch.Generator(device=device)
    g.manual_seed(_task_seed(seed, epoch, task_id))
    return g


def _task_seed(seed: int, epoch: int, task_id: int, salt: int = 0) -> int:
    """The seed of one task's random stream; ``salt`` keeps streams of one task apart."""
    return (int(seed) * 1_000_003 + int(epoch) * 100_003 + int(task_id) + salt) % (2 ** 63)


def seed_task_rng(seed: int, epoch: int, task_id: int) -> None:
    """Seed this process's global torch RNG (CPU and CUDA) for one task's training step, so its
    dropout masks depend only on ``(seed, epoch, task_id)``: a single-mode run repeats exactly
    with the same seed, and a task re-run after a fault draws the same masks. Salted apart from
    :func:`task_generator`'s sampling stream."""
    torch.manual_seed(_task_seed(seed, epoch, task_id, salt=0x5EED))


class NonFiniteLoss(ArithmeticError):
    """A Trainer's loss or gradient for a task is not finite (NaN or inf); the gradient was not
    pushed, and the job stops (the driver names the epoch and the task).

    Attributes:
        epoch: the epoch (0-based).
        task_id: the task.
        loss: the loss value.
    """

    def __init__(self, epoch: int, task_id: int, loss: float) -> None:
        super().__init__(epoch, task_id, loss)
        self.epoch, self.task_id, self.loss = epoch, task_id, loss

    def __str__(self) -> str:
        what = "loss" if self.loss != self.loss or abs(self.loss) == float("inf") else "gradient"
        return (f"epoch {self.epoch + 1}: the {what} of task {self.task_id} is not finite (loss "
                f"{self.loss}); its gradient was not applied")


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


#: cuBLAS's workspace setting that makes its GEMMs deterministic on CUDA (torch's
#: reproducibility notes); set in an executor only with ``train.deterministic``.
CUBLAS_DETERMINISTIC = ":4096:8"


def configure_torch(deterministic: bool = False) -> None:
    """Torch settings of an executor process: one compute thread (executors share the host's
    cores), and with ``deterministic`` torch's deterministic algorithms.

    On CUDA, ``index_add_`` (every aggregation of :mod:`fgnn.models.aggregate`, and the backward
    of ``index_select``) adds with atomics whose order varies between runs; under
    ``torch.use_deterministic_algorithms(True)`` it takes torch's deterministic kernel instead,
    and cuBLAS uses a fixed workspace (``CUBLAS_WORKSPACE_CONFIG``). ``warn_only``: an op that
    has no deterministic kernel still runs, with torch's warning, rather than stopping the job.
    On the CPU every op fgnn uses is deterministic already; the setting changes nothing there.
    """
    torch.set_num_threads(1)
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_DETERMINISTIC)
        torch.use_deterministic_algorithms(True, warn_only=True)
