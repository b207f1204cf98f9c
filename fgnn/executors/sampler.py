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
runtime turns it into an actor in one place (:mod:`fgnn.runtime.driver`).
"""

from __future__ import annotations

import time
from typing import Any, Optional

import torch

from fgnn import gpu
from fgnn.executors.common import _device_tag, configure_torch, metrics_for, task_generator
from fgnn.evaluation import EvalPlan, eval_generator
from fgnn.executors import host
from fgnn.executors.graph_kind import graph_kind
from fgnn.executors.device import actor_device
from fgnn.executors._streams import StageClock
from fgnn.executors.queue import QueueItem
from fgnn.executors.transport import (choose_transport, host_copy, narrowable, pack_sample,
                                      pack_sample_tensors, tensor_from)
from fgnn.executors.scheduler import epoch_batches
from fgnn.procmem import process_memory
from fgnn.sampling.base import Sample, Sampler, per_type, per_type_zip
from fgnn.sampling.task_sampling import SamplingSpec
from fgnn.tasks.node import NodeSampling
from fgnn.sampling.locality import LocalityAwareKHop

__all__ = ["SamplerExecutor"]


def _add_visit(visits: torch.Tensor, ids: torch.Tensor) -> None:
    visits[ids] += 1


def _check_cache_map(cache_map: Any, device: torch.device) -> Optional[torch.Tensor]:
    if cache_map is None:
        return None
    m = tensor_from(cache_map)
    if m.dim() != 1 or m.is_floating_point() or m.dtype == torch.bool:
        raise ValueError(f"cache_map must be the (N,) integer holder bits of a Placement, got "
                         f"dtype {m.dtype} and shape {tuple(m.shape)}")
    return m.to(device)


class SamplerExecutor:
    """Samples mini-batch tasks and feeds the global queue.

    Args:
        graph: topology, a graph or its numpy payload (homogeneous or typed,
            :mod:`fgnn.executors.graph_kind`), kept on ``device``.
        sampler: the sampling algorithm.
        train_idx: ``(T,)`` training ids; task ``i`` of an epoch is
            ``epoch_batches(train_idx, batch_size, seed, epoch, parts)[i]``.
        batch_size: seeds per mini-batch (per optimizer step).
        seed: job seed (tasks draw from :func:`~fgnn.executors.common.task_generator`).
        cache_map: ``(N,)`` integer holder bits of the job's caches
            (:meth:`~fgnn.cache.placement.Placement.holder_bits`; None: nothing cached). A
            locality-aware sampler takes the cached vertices as its local set ``B``.
        queue: handle of the global queue actor (or an object with the same ``put``), or None to
            only return samples (in-process use).
        name: actor name, e.g. ``fgnn-sampler-0``.
        device: the sampling device (``"cpu"`` with Ray logical GPUs, ``"auto"``: the GPU Ray
            assigned this actor).
        transport: how samples reach the Trainers (:data:`~fgnn.executors.transport.TRANSPORTS`, :func:`~fgnn.executors.transport.choose_transport`).
        one_node: whether every executor of the job is on this node.
        shared_gpu: whether every Trainer that can take this Sampler's samples runs on its
            physical GPU (what ``cuda_ipc`` needs).
        eval_idx: split name -> ids of the splits evaluation passes score (``val``, ``test``;
            ``train`` is ``train_idx``).
        parts: tasks per mini-batch (R of :mod:`fgnn.exchange.ps`).
        task: the job task's :class:`~fgnn.tasks.base.SamplingSpec`
            (:meth:`Task.sampling <fgnn.tasks.base.Task.sampling>`): how a batch of items
            becomes a sample (a link job's items are training edges and evaluation pairs, a
            recommender's users and items). None: node classification.
    """

    def __init__(self, graph: Any, sampler: Sampler, train_idx: Any, batch_size: int, seed: int,
                 cache_map: Any = None, queue: Any = None, name: str = "fgnn-sampler-0",
                 device: str = "cpu", eval_idx: Optional[dict[str, Any]] = None,
                 transport: str = "object_store", one_node: bool = True,
                 parts: int = 1, shared_gpu: bool = False,
                 task: Optional[SamplingSpec] = None, deterministic: bool = False) -> None:
        configure_torch(deterministic)
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size!r}")
        self.name, self.device = name, actor_device(device)
        kind = "cuda" if gpu.is_cuda(self.device) else self.device.type
        self.transport = choose_transport(transport, kind, one_node, shared_gpu)
        self.kind = graph_kind(graph)  # homogeneous or typed topology
        self.graph = self.kind.graph_from_payload(graph, self.device)
        self.sampler = sampler
        spec = task if task is not None else SamplingSpec(NodeSampling)
        self.task = spec.build(sampler, self.device)
        self.train_idx = tensor_from(train_idx)
        self.split_idx = {"train": self.train_idx}
        self.split_idx.update({k: tensor_from(v) for k, v in (eval_idx or {}).items()})
        self.batch_size, self.seed, self.parts = int(batch_size), int(seed), int(parts)
        self.set_cache_map(cache_map)
        self.queue = queue
        self.metrics = metrics_for("sampler", _device_tag(name))
        self.clock = StageClock(self.device)
        self._visits: Optional[torch.Tensor] = None
        self._max_sample_bytes = 0
        self._epoch: Optional[int] = None
        self._batches: list[torch.Tensor] = []
        self._pending_put: Any = None

    def process_memory(self) -> dict[str, Any]:
        """This process's peak and resident memory and the resident, shared and private bytes
        of the topology files it maps (:func:`fgnn.procmem.process_memory`)."""
        files = getattr(self.graph, "files", None)
        paths = [] if files is None else [p for p in (files.indptr, files.indices,
                                                      files.weights) if p]
        return process_memory(paths, role="sampler")

    def ready(self) -> tuple[float, str]:
        """``(time.time(), device)`` once the actor is built: the runtime waits on it, reports
        the start-up time and learns the device Ray assigned."""
        return time.time(), str(self.device)

    def count_visits(self) -> None:
        """Count from now on how often each vertex is an input of a training sample (PreSC's
        visit counts, FGNN §6.3: the first K epochs of training are the pre-sampling)."""
        self._visits = self.kind.new_visits(self.graph, self.device)

    def take_visits(self) -> Optional[torch.Tensor]:
        """The visit counts so far (``(N,)`` int32 on the CPU) and stop counting; None if not
        counting."""
        visits, self._visits = self._visits, None
        return per_type(visits, lambda v: v.cpu())

    def working_set(self) -> dict[str, Any]:
        """Device bytes sampling needs beside the topology: the remap scratch array, the largest
        sample so far and, on CUDA, the process's peak of allocated and of *reserved* bytes
        (the latter is what the caching allocator holds, and what sizes the cache)."""
        from fgnn.sampling.remap import Remapper

        out = {"scratch_bytes": Remapper.scratch_bytes(self.graph.num_nodes),
               "max_sample_bytes": self._max_sample_bytes,
               "cuda_peak_bytes": None, "cuda_reserved_bytes": None,
               "graph_bytes": self.graph.nbytes()}
        if gpu.is_cuda(self.device):
            out["cuda_peak_bytes"] = gpu.max_memory_allocated(self.device)
            out["cuda_reserved_bytes"] = gpu.max_memory_reserved(self.device)
        return out

    def set_cache_map(self, cache_map: Any) -> None:
        """Mark against ``cache_map`` from now on (the caches are chosen after the warm-up); a
        locality-aware sampler takes its cached vertices as the local set ``B`` (Song & Jiang
        §4: the vertices stored on the group's devices)."""
        self.cache_map = _check_cache_map(cache_map, self.device)
        # the C step narrows ids to int32 where they fit (a CUDA Sampler's host copy only)
        self._narrow = gpu.is_cuda(self.device) and narrowable(self.graph, self.cache_map)
        if isinstance(self.sampler, LocalityAwareKHop):
            self.sampler.set_local(None if self.cache_map is None else self.cache_map != 0)
        if gpu.is_cuda(self.device):  # once per cache choice: a time-sharing Trainer samples
            gpu.current_stream(self.device).synchronize()  # on its copy stream

    def set_scale(self, scale: float) -> None:
        """Set the scale factor ``s`` of a locality-aware sampler (Song & Jiang Eq. 8); the
        runtime's Algorithm 2 controller sends it once per epoch. Other samplers ignore it."""
        if isinstance(self.sampler, LocalityAwareKHop):
            self.sampler.scale = float(scale)

    def seeds_of(self, epoch: int, task_id: int) -> torch.Tensor:
        """The seeds of task ``task_id`` of ``epoch``."""
        if epoch != self._epoch:
            self._epoch = epoch
            self._batches = epoch_batches(self.train_idx, self.batch_size, self.seed, epoch,
                                         self.parts)
        if not 0 <= task_id < len(self._batches):
            raise ValueError(f"task_id must be in [0, {len(self._batches)}), got {task_id!r}")
        return self._batches[task_id]

    def sample(self, epoch: int, task_id: int, plan: Optional[EvalPlan] = None
               ) -> tuple[Sample, float, float]:
        """S and M of one task: ``(sample, S seconds, M seconds)``.

        With ``plan`` the task is a chunk of an evaluation pass (:mod:`fgnn.evaluation`: the
        split's ids in order, the chunk's own generator); else a training mini-batch.
        """
        split: Optional[str] = None
        if plan is None:
            seeds = self.seeds_of(epoch, task_id)
            gen = task_generator(self.seed, epoch, task_id, self.device)
        else:
            split, chunk = plan.task(task_id)
            if split not in self.split_idx:
                raise ValueError(f"{self.name} holds no {split!r} ids to evaluate")
            seeds = plan.seeds(self.split_idx[split], task_id)
            gen = eval_generator(plan.seed, split, chunk, self.device)
        seeds = seeds.to(self.device)
        t0 = self.clock.start()
        sample = self._draw(seeds, gen, split)
        s_lap = self.clock.stop(t0)
        t1 = self.clock.start()
        if self._visits is not None and plan is None:  # input_nodes has no repeats
            per_type_zip(self._visits, sample.input_nodes, _add_visit)
        sample.mark(self.cache_map)
        sample.task_id = int(task_id)
        m_lap = self.clock.stop(t1)
        # CUDA: event times of the kernels, resolved once M's end is reached (not launch times)
        return sample, s_lap.seconds(), m_lap.seconds()

    def _draw(self, items: torch.Tensor, gen: torch.Generator, split: Optional[str]) -> Sample:
        """The S step: the task's sample of training items (``split`` None) or of ``split``'s
        evaluation items."""
        if split is None:
            return self.task.train_sample(self.graph, items, gen)
        return self.task.eval_sample(self.graph, split, items, gen)

    def sample_task(self, epoch: int, task_id: int, plan: Optional[EvalPlan] = None
                    ) -> dict[str, Any]:
        """Sample task ``task_id`` (of an evaluation pass with ``plan``) and enqueue it (S, M, C).

        The enqueue is pipelined: the put of this sample is submitted and the call returns; the
        next call (or :meth:`flush`) first waits for it. One put in flight per Sampler keeps the
        back-pressure of the bounded queue while the queue's round trip overlaps sampling.

        Returns:
            ``{"task_id", "S", "M", "C", "queue_wait", "nbytes"}``; ``queue_wait`` is the time
            this call blocked on the previous put while it waited for room (back-pressure), not
            counted in C.
        """
        sample, s, m = self.sample(epoch, task_id, plan)
        t0 = time.perf_counter()
        inline = host.is_inline(self.queue)  # in-process: the sample itself, not a copy
        if self.transport == "cuda_ipc":  # the sample stays on this GPU; Trainers read it
            ref = host.put(pack_sample_tensors(sample), inline, _tensor_transport="cuda_ipc")
        else:
            if not gpu.is_host(self.device):  # host memory side of the queue
                sample = host_copy(sample, narrow=self._narrow)
            ref = host.put(pack_sample(sample), inline)
        nbytes = sample.nbytes()
        self._max_sample_bytes = max(self._max_sample_bytes, nbytes)
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
        pending, self._pending_put = self._pending_put, None
        if pending is None:
            return 0.0
        t0 = time.perf_counter()
        _, waited = host.get(pending)
        return min(float(waited), time.perf_counter() - t0)
