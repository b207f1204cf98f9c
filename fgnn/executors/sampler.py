"""The Sampler executor (FGNN §5.2, Fig. 9): sample, mark, copy into the global queue.

A Sampler keeps the graph topology on its device for the whole job (switching to a standby
Trainer is temporary, §5.3, so the topology never leaves). For each mini-batch task the scheduler
hands it, it

* **S** samples the task's seeds (:class:`~fgnn.sampling.Sampler`, deduplicated and remapped),
* **M** marks each input vertex with the devices whose cache holds it (the caches are static, so
  the job's cache map is known at sampling time, §5.2 / §6.1): one bit per device
  (:meth:`~fgnn.cache.placement.Placement.holder_bits`), so whichever Trainer takes the sample,
  a standby with its smaller cache included, splits it into local, peer and host rows from the
  marks (:meth:`~fgnn.cache.feature_store.FeatureStore.gather`),
* **C** copies the sample into the object store (host memory) and enqueues its ``ObjectRef`` on
  the bounded global queue,

and reports the three times (FGNN Table 5: Sample = S + M + C). The class is plain Python; the
runtime turns it into an actor in one place (:mod:`fgnn.executors.runtime`).
"""

from __future__ import annotations

import time
from typing import Any, Optional

import torch

from fgnn.executors._common import (_device_tag, graph_from_payload, metrics_for,
                                    task_generator, tensor_from)
from fgnn.executors.queue import QueueItem
from fgnn.executors.scheduler import epoch_batches
from fgnn.sampling.base import Sample, Sampler
from fgnn.sampling.locality import LocalityAwareKHop

__all__ = ["SamplerExecutor", "mark_sample", "sample_nbytes", "pack_sample", "unpack_sample"]


def mark_sample(sample: Sample, cache_map: Optional[torch.Tensor]) -> Sample:
    """The M step: ``sample.cached = cache_map[input_nodes]``, the holder bits of each input
    vertex (``(N,)`` integer map, bit ``d`` = device ``d`` caches the row; None: nothing is
    cached, every mark 0)."""
    if cache_map is None:
        sample.cached = torch.zeros(sample.input_nodes.numel(), dtype=torch.uint8)
    else:
        sample.cached = cache_map[sample.input_nodes.to(cache_map.device)]
    return sample


def _check_cache_map(cache_map: Any, device: torch.device) -> Optional[torch.Tensor]:
    if cache_map is None:
        return None
    m = tensor_from(cache_map)
    if m.dim() != 1 or m.is_floating_point() or m.dtype == torch.bool:
        raise ValueError(f"cache_map must be the (N,) integer holder bits of a Placement, got "
                         f"dtype {m.dtype} and shape {tuple(m.shape)}")
    return m.to(device)


def sample_nbytes(sample: Sample) -> int:
    """Bytes of the sample's tensors (what the C step copies)."""
    ts = [sample.seeds, sample.input_nodes]
    if sample.cached is not None:
        ts.append(sample.cached)
    for b in sample.blocks:
        ts += [b.src, b.dst] + ([] if b.weights is None else [b.weights])
    return int(sum(t.numel() * t.element_size() for t in ts))


def pack_sample(sample: Sample) -> dict[str, Any]:
    """The sample as numpy arrays: Ray stores numpy buffers out of band and maps them zero-copy
    into the reader, several times cheaper than pickling torch tensors (the C step)."""
    def a(t: Optional[torch.Tensor]) -> Any:
        return None if t is None else t.detach().cpu().numpy()

    return {"seeds": a(sample.seeds), "input_nodes": a(sample.input_nodes),
            "cached": a(sample.cached), "task_id": sample.task_id,
            "blocks": [(a(b.src), a(b.dst), b.num_src, b.num_dst, a(b.weights))
                       for b in sample.blocks]}


def unpack_sample(packed: Any) -> Sample:
    """Inverse of :func:`pack_sample` (tensors over the read-only object-store buffers; the
    runtime never writes to a sample). A :class:`Sample` passes through."""
    if isinstance(packed, Sample):
        return packed
    from fgnn.sampling.base import Block

    def t(x: Any) -> Optional[torch.Tensor]:
        return None if x is None else tensor_from(x)

    blocks = [Block(t(src), t(dst), int(ns), int(nd), t(w))
              for src, dst, ns, nd, w in packed["blocks"]]
    return Sample(t(packed["seeds"]), blocks, t(packed["input_nodes"]), t(packed["cached"]),
                  packed["task_id"])


class SamplerExecutor:
    """Samples mini-batch tasks and feeds the global queue.

    Args:
        graph: topology, a :class:`~fgnn.graph.CSRGraph` or its numpy payload; kept on ``device``.
        sampler: the sampling algorithm.
        train_idx: ``(T,)`` training ids; task ``i`` of an epoch is
            ``epoch_batches(train_idx, batch_size, seed, epoch)[i]``.
        batch_size: seeds per task.
        seed: job seed (tasks draw from :func:`~fgnn.executors._common.task_generator`).
        cache_map: ``(N,)`` integer holder bits of the job's caches
            (:meth:`~fgnn.cache.placement.Placement.holder_bits`; None: nothing cached). A
            locality-aware sampler takes the cached vertices as its local set ``B``.
        queue: handle of the global queue actor (or an object with the same ``put``), or None to
            only return samples (in-process use).
        name: actor name, e.g. ``fgnn-sampler-0``.
        device: the sampling device (``"cpu"`` with Ray logical GPUs).
    """

    def __init__(self, graph: Any, sampler: Sampler, train_idx: Any, batch_size: int, seed: int,
                 cache_map: Any = None, queue: Any = None, name: str = "fgnn-sampler-0",
                 device: str = "cpu") -> None:
        torch.set_num_threads(1)
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size!r}")
        self.name, self.device = name, torch.device(device)
        self.graph = graph_from_payload(graph, self.device)
        self.sampler = sampler
        self.train_idx = tensor_from(train_idx)
        self.batch_size, self.seed = int(batch_size), int(seed)
        self.set_cache_map(cache_map)
        self.queue = queue
        self.metrics = metrics_for("sampler", _device_tag(name))
        self._epoch: Optional[int] = None
        self._batches: list[torch.Tensor] = []
        self._pending_put: Any = None

    def ready(self) -> str:
        """Returns the name once the topology is loaded (the runtime waits on it)."""
        return self.name

    def set_cache_map(self, cache_map: Any) -> None:
        """Mark against ``cache_map`` from now on (the placement changed with the layout); a
        locality-aware sampler takes its cached vertices as the local set ``B`` (Song & Jiang
        §4: the vertices stored on the group's devices)."""
        self.cache_map = _check_cache_map(cache_map, self.device)
        if isinstance(self.sampler, LocalityAwareKHop):
            self.sampler.set_local(None if self.cache_map is None else self.cache_map != 0)

    def set_scale(self, scale: float) -> None:
        """Set the scale factor ``s`` of a locality-aware sampler (Song & Jiang Eq. 8); the
        runtime's Algorithm 2 controller sends it once per epoch. Other samplers ignore it."""
        if isinstance(self.sampler, LocalityAwareKHop):
            self.sampler.scale = float(scale)

    def seeds_of(self, epoch: int, task_id: int) -> torch.Tensor:
        """The seeds of task ``task_id`` of ``epoch``."""
        if epoch != self._epoch:
            self._epoch = epoch
            self._batches = epoch_batches(self.train_idx, self.batch_size, self.seed, epoch)
        if not 0 <= task_id < len(self._batches):
            raise ValueError(f"task_id must be in [0, {len(self._batches)}), got {task_id!r}")
        return self._batches[task_id]

    def sample(self, epoch: int, task_id: int) -> tuple[Sample, float, float]:
        """S and M of one task: ``(sample, S seconds, M seconds)``."""
        seeds = self.seeds_of(epoch, task_id).to(self.device)
        t0 = time.perf_counter()
        sample = self.sampler.sample(self.graph, seeds,
                                     task_generator(self.seed, epoch, task_id, self.device))
        t1 = time.perf_counter()
        mark_sample(sample, self.cache_map)
        sample.task_id = int(task_id)
        t2 = time.perf_counter()
        return sample, t1 - t0, t2 - t1

    def sample_task(self, epoch: int, task_id: int) -> dict[str, Any]:
        """Sample task ``task_id`` and enqueue it (S, M, C).

        The enqueue is pipelined: the put of this sample is submitted and the call returns; the
        next call (or :meth:`flush`) first waits for it. One put in flight per Sampler keeps the
        back-pressure of the bounded queue while the queue's round trip overlaps sampling.

        Returns:
            ``{"task_id", "S", "M", "C", "queue_wait", "nbytes"}``; ``queue_wait`` is the time
            this call blocked on the previous put while it waited for room (back-pressure), not
            counted in C.
        """
        import ray

        sample, s, m = self.sample(epoch, task_id)
        t0 = time.perf_counter()
        if self.device.type != "cpu":
            sample = sample.to("cpu")  # host memory side of the queue
        ref = ray.put(pack_sample(sample))
        nbytes = sample_nbytes(sample)
        waited = self._wait_put()
        self._pending_put = self.queue.put.remote(
            QueueItem(epoch, int(task_id), ref=ref, producer=self.name, nbytes=nbytes))
        c = time.perf_counter() - t0 - waited
        self.metrics.stage_seconds("sample", s)
        self.metrics.stage_seconds("mark", m)
        self.metrics.stage_seconds("copy", c)
        self.metrics.batch_done(s + m + c)
        return {"task_id": int(task_id), "S": s, "M": m, "C": c, "queue_wait": waited,
                "nbytes": nbytes}

    def flush(self) -> dict[str, float]:
        """Wait until the last sample is in the queue; ``{"C", "queue_wait"}`` of that wait."""
        t0 = time.perf_counter()
        waited = self._wait_put()
        return {"C": time.perf_counter() - t0 - waited, "queue_wait": waited}

    def _wait_put(self) -> float:
        """Wait for the put in flight; returns the seconds of this call that were back-pressure.

        The queue reports how long the put waited for room, but the put is pipelined: most of
        that wait can overlap the sampling of the next task, and only the part that falls inside
        this blocking call stalls the Sampler. The room wait ends before the reply is sent, so
        the back-pressure inside the call is at most the call's own duration; the rest of the
        call is the put's round trip (counted in C).
        """
        import ray

        pending, self._pending_put = self._pending_put, None
        if pending is None:
            return 0.0
        t0 = time.perf_counter()
        _, waited = ray.get(pending)
        return min(float(waited), time.perf_counter() - t0)
