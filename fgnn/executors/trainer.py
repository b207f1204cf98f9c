"""The Trainer executor (FGNN §5.2, Fig. 9): extract from cache + host, train, exchange gradients.

A Trainer dequeues sample refs from the global queue, extracts the input features through a
:class:`~fgnn.cache.feature_store.FeatureStore` (its own cache, peer devices' caches, host
memory; FGNN §6.1, Song & Jiang §3.2), split by the Sampler's M-step marks, runs
forward/backward, and exchanges the gradient: through the collective (``runtime.exchange=
"collective"``, :mod:`fgnn.executors.trainer_exchange`: weights and optimizer on this device, one
all-reduce per step) or by pushing it to the :class:`~fgnn.exchange.ps.ParameterServer`.
Before computing a task it claims a slot of the current step (with the server, the claim brings
the current weights): every step averages the gradients of its tasks, all computed from the
previous step's weights (the rule of :mod:`fgnn.exchange.ps`, in place of FGNN §5.2's bounded
staleness).

Pipelining (§5.2): a normal Trainer fetches and extracts mini-batch ``i + 1`` in a prefetch thread
while it trains mini-batch ``i``. A *standby* Trainer (a Trainer on a Sampler's device with a
smaller cache, §5.3) fetches one task at a time and evaluates the switching profit
``P = M_r * T_t / N_t - T_t'`` before each fetch (:class:`~fgnn.executors.scheduler.StandbyPolicy`).
In time-sharing mode the queue carries raw tasks and the Trainer samples them itself, with the
topology resident on its device.

Exactly-once: each dequeued task is leased to this Trainer; it is acknowledged after the server
applied (or rejected as a duplicate) its gradient. If the Trainer dies, the runtime puts its
leases back in the queue.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, Callable, Optional

import numpy as np
import torch
from torch import nn

from fgnn.evaluation import EvalPlan
from fgnn.executors.common import (MemmapFeatures, NonFiniteLoss, _device_tag,
                                    configure_torch, graph_from_payload, metrics_for,
                                    open_disk_tiers, open_features, seed_task_rng)
from fgnn.executors import host
from fgnn.executors.graph_kind import graph_kind
from fgnn.executors.device import actor_device, bind_device
from fgnn.executors._memory import StepMemoryMeter
from fgnn.executors.peers import TrainerPeers
from fgnn.executors._streams import CopyStream
from fgnn.executors.fault_injection import NO_FAULTS, TrainerFaults, exhaust_memory
from fgnn.exchange.ps import flatten, step_wait, unflatten_into
from fgnn.executors.transport import tensor_from, to_device, transport_errors, unpack_sample
from fgnn.executors.scheduler import StandbyPolicy
from fgnn.executors.task_record import TaskRecord
from fgnn.cache.feature_store import FeatureStore
from fgnn.cache.placement import Placement
from fgnn.procmem import process_memory
from fgnn.sampling.base import Sample, per_type, per_type_tensors
from fgnn.models.step import forward_backward
from fgnn.tasks.base import StepRule
from fgnn.tasks.node import NODE_STEP

log = logging.getLogger(__name__)

__all__ = ["TrainerExecutor"]


def _reconstructed() -> bool:
    """Whether this Trainer's actor was restarted by Ray (fault injection crashes it once; a
    crashing job always runs on Ray, :func:`fgnn.executors.host.uses_ray`)."""
    import ray

    return bool(ray.get_runtime_context().was_current_actor_reconstructed)

#: Seconds a ``get`` waits inside the queue before the Trainer re-checks its stop flag.
_GET_TIMEOUT_S = 1.0


def checked_step(loss: torch.Tensor, grads: list[torch.Tensor], epoch: int, task_id: int,
                 to_host: bool) -> tuple[Optional[torch.Tensor], float]:
    """The loss of a task's step as a float and, with ``to_host``, its flat gradient on the
    host, read from the device in one copy after the backward pass: no host sync between
    forward and backward (the backward kernels are queued at once), and one per step in all
    (the parameter server's gradient must reach the host anyway; the collective reads two
    numbers, the loss and whether every gradient is finite).

    Raises:
        NonFiniteLoss: the loss or a gradient is NaN or infinite (the gradient is never
            delivered).
    """
    flat = flatten(grads)
    if to_host:
        vals = torch.cat([flat, loss.detach().reshape(1).float()]).cpu()
        arr = vals.numpy()
        value, ok = float(arr[-1]), bool(np.isfinite(arr).all())
        grad: Optional[torch.Tensor] = vals[:-1]
    else:
        finite = torch.isfinite(flat).all() & torch.isfinite(loss.detach())
        arr = torch.stack([loss.detach().float().reshape(()), finite.float()]).cpu().numpy()
        value, ok = float(arr[0]), bool(arr[1] > 0)
        grad = None
    if not ok:
        raise NonFiniteLoss(epoch, task_id, value)
    return grad, value


def _no_next() -> bool:
    return False


def _holds_task(fetch: Future) -> bool:
    """Whether the prefetch ``fetch`` has brought a next task by now (done, with a batch; a
    failed fetch raises where its result is taken, not here)."""
    return fetch.done() and fetch.exception() is None and fetch.result() is not None


def _first_line(err: BaseException) -> str:
    """The first non-empty line of an error's text, at most 300 characters."""
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    return (lines[0] if lines else "")[:300]


def _as_float32(x: Any) -> Any:
    """The model's input: float16 rows (a half-precision feature file, gathered and moved at
    half the bytes) widened to float32 on the device, after their copy is waited for."""
    return per_type(x, lambda t: t.float() if t.is_floating_point() and t.dtype != torch.float32
                    else t)


@dataclass
class _Batch:
    """A fetched and extracted mini-batch."""

    task_id: int
    sample: Sample
    x: torch.Tensor
    labels: torch.Tensor
    rec: TaskRecord
    ready: Any = None
    """CUDA event after the batch's copies (None off CUDA)."""

    def tensors(self) -> list[torch.Tensor]:
        """Every device tensor of the batch."""
        return [*per_type_tensors(self.x), self.labels, *self.sample.tensors()]


class TrainerExecutor:
    """Trains on samples from the global queue.

    Args:
        features: ``(N, F)`` host feature matrix (tensor, numpy or memmap), or a
            :class:`~fgnn.executors.common.MemmapFeatures` naming a file that this Trainer maps
            itself (its host tier then reads rows from the file, not from the object store),
            or for a typed dataset node type -> ``(N_t, F_t)`` matrix (``placement`` is then
            node type -> cached ids, and the store a
            :class:`~fgnn.cache.hetero.HeteroFeatureStore`).
        labels: ``(N,)`` int64 labels.
        model: a model of the :mod:`fgnn.models` contract (weights come from the server).
        placement: the job's cache placement over its devices
            (:func:`~fgnn.cache.placement.job_placement`; a standby's own buffer is smaller, the
            topology shares its device), or None for no cache (yet: the runtime starts the actor
            early and calls :meth:`load_cache` once the caches are chosen).
        device_index: this Trainer's device in ``placement`` (its bit in the M-step marks).
        ps: handle of the parameter server actor.
        queue: handle of the global queue actor.
        name: actor name (``fgnn-trainer-1``, ``fgnn-standby-0``).
        device: the training device (``"cpu"`` with Ray logical GPUs).
        role: ``"trainer"`` or ``"standby"``.
        local_sampler: a :class:`~fgnn.executors.sampler.SamplerExecutor` (in-process) to sample
            raw tasks itself (time-sharing mode), else None.
        faults: this Trainer's fault injection
            (:class:`~fgnn.executors.fault_injection.TrainerFaults`: a delay per mini-batch, an
            exit after the first applied gradient); None: none.
        disk: a :class:`~fgnn.config.DiskConfig` with ``feature_tier="disk"``: read rows through
            the GIDS tiers of the on-disk file (device software cache of ``alpha``, CPU buffer,
            storage) instead of a static cache over the host matrix; ``features`` must then be a
            :class:`~fgnn.executors.common.MemmapFeatures`.
        seed: the job's seed; each training step seeds its dropout from ``(seed, epoch, task)``
            (:func:`~fgnn.executors.common.seed_task_rng`).
        exchange: an :class:`~fgnn.exchange.collective.ExchangeSpec`: exchange gradients over
            the collective (weights and optimizer on this device,
            :mod:`fgnn.executors.trainer_exchange`) instead of through the parameter server ``ps``.
        deterministic: ``train.deterministic``: torch's deterministic algorithms in this
            process (:func:`~fgnn.executors.common.configure_torch`).
        step: the job task's :class:`~fgnn.tasks.base.StepRule` (labels, loss, evaluation
            record; :attr:`Task.step <fgnn.tasks.base.Task.step>`); None: node
            classification.
        peer_tier: ``cache.peer_tier``: ``auto`` keeps the cache in a shareable buffer and
            reads peers' rows from their buffers once :meth:`open_peers` maps them, ``host``
            reads them from the host copy (:mod:`fgnn.executors.peers`).
    """

    def __init__(self, features: Any, labels: Any, model: nn.Module,
                 placement: Optional[Placement], device_index: int, ps: Any, queue: Any,
                 name: str = "fgnn-trainer-0", device: str = "cpu", role: str = "trainer",
                 local_sampler: Any = None, faults: Optional[TrainerFaults] = None,
                 disk: Any = None, seed: int = 0,
                 exchange: Any = None, deterministic: bool = False,
                 step: Optional[StepRule] = None, peer_tier: str = "auto") -> None:
        # one compute thread (executors share the host's cores); host gathers run on the
        # feature store's own pool (fgnn.cache.feature_store.extract_threads)
        configure_torch(deterministic)
        if role not in ("trainer", "standby"):
            raise ValueError(f"role must be 'trainer' or 'standby', got {role!r}")
        self.name, self.role, self.device = name, role, actor_device(device)
        self.labels = tensor_from(labels)
        self.step = step if step is not None else NODE_STEP
        self.kind = graph_kind(features)  # one feature matrix, or one per node type
        self.device_index = int(device_index)
        self._features_file = (features.path if isinstance(features, MemmapFeatures) else None)
        self._features, self._disk = features, disk
        self._host = None if self._disk_tier else open_features(features)
        self.store, self.tiers, self.lookahead = None, None, 0
        self._device_rows = 0  # device-cache rows since take_traffic (a partitioned host tier)
        self._reads: Any = None  # a ReadCounter while a hotness partition is pending
        self._ahead: deque[tuple[int, Sample, TaskRecord]] = deque()
        self.copies = CopyStream(self.device)
        self.model = model.to(self.device)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.ps, self.queue = ps, queue
        self.local_sampler = local_sampler
        self.peers = TrainerPeers(peer_tier, name)
        self.load_cache(placement)
        if faults is not None and not isinstance(faults, TrainerFaults):
            raise TypeError(f"faults must be a TrainerFaults, got {faults!r}")
        self.faults = faults if faults is not None else NO_FAULTS
        self.seed = int(seed)
        self.metrics = metrics_for(role, _device_tag(name))
        self._stop = threading.Event()
        self._version = -1  # version of the server's weights this Trainer holds
        self._incarnation: Optional[int] = None  # enrolled on the server per epoch
        self._next_claim: Any = None  # a slot the last push brought for the next task
        self.exchange = None
        if exchange is not None:
            from fgnn.executors.trainer_exchange import TrainerExchange

            self.exchange = TrainerExchange(exchange, name, self.model, self._ack,
                                            self.faults.crash_after_apply)

    def process_memory(self) -> dict[str, Any]:
        """This process's peak and resident memory and the resident share of the feature file
        it maps (:func:`fgnn.procmem.process_memory`)."""
        files = [self._features_file] if self._features_file else []
        return process_memory(files, role="trainer")

    def ready(self) -> tuple[float, str]:
        """``(time.time(), device)`` once the actor is built: the runtime waits on it, reports
        the start-up time and learns the device Ray assigned."""
        return time.time(), str(self.device)

    def load_cache(self, placement: Optional[Placement], hotness: Optional[Any] = None,
                   alpha: float = 0.0, peers: Optional[dict[int, Any]] = None,
                   holders: Optional[Any] = None,
                   replica: Optional[dict[str, Any]] = None) -> int:
        """Fill the cache once the runtime has chosen it (after the warm-up epochs, and again
        after a restart); returns the rows this device caches.

        Args:
            placement: the job's placement (memory tier); None: no cache.
            hotness: with the disk tier, the ``(N,)`` hotness ranking its CPU buffer and device
                software cache (GIDS); ignored otherwise.
            alpha: with the disk tier, the share of rows of the device software cache.
            peers: the peers' buffers to read from at once (:meth:`open_peers`; a restarted
                Trainer); None: every peer from the host copy until :meth:`open_peers`.
            holders: the placement's holder bits, read in place (the runtime's cache map in
                the object store, one copy a host); None: computed from ``placement``.
            replica: the export (:meth:`export_cache`) of a Trainer on this host caching the
                same ids in host memory (logical devices, replicated placement), or ``[ref]`` of
                that call: its rows are mapped as this Trainer's cache instead of a copy of
                them; None (or a replica that cannot be mapped): fill its own.

        Raises:
            ValueError: for ``alpha`` outside ``[0, 1]``.
        """
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"alpha must lie in [0, 1], got {alpha!r}")
        if self._disk_tier:
            h = None if hotness is None else tensor_from(hotness)
            # GIDS tiers: a device software cache of alpha N rows, the CPU buffer, storage
            self.tiers = open_disk_tiers(self._features, h, float(alpha), str(self.device),
                                         self._disk)
            # leased look-ahead serves window buffering and the accumulator; a standby fetches
            # one task at a time (its profit decides each fetch, §5.3)
            ahead = self._disk.cache == "window" or self._disk.accumulator
            self.lookahead = self._disk.window if ahead and self.role != "standby" else 0
            return int(alpha * self.labels.numel())
        self.peers.close()  # the buffer being replaced is no longer shared
        self.store = self._build_store(placement, holders, replica)
        if peers:
            self.open_peers(peers)
        if self.local_sampler is not None:  # time-sharing: this device marks its own samples
            self.local_sampler.set_cache_map(
                None if placement is None else
                holders if holders is not None else placement.holder_bits())
        return self.cached_rows()

    def _build_store(self, placement: Optional[Placement], holders: Optional[Any],
                     replica: Optional[dict[str, Any]]) -> Any:
        """The feature store over the replica's rows when they can be mapped and match this
        device's share of ``placement``, else over rows it fills itself."""
        own = None if placement is None else self.peers.adopt(_resolved(replica), self.device)
        if own is not None:
            try:
                return self.kind.build_store(self._host, placement, self.device_index,
                                             str(self.device), self.copies.h2d,
                                             self.peers.alloc, holders, own)
            except ValueError as err:  # another shape: fill this Trainer's own
                log.warning("%s fills its own cache: the replica does not fit (%s)",
                            self.name, err)
                self.peers.close()
        return self.kind.build_store(self._host, placement, self.device_index,
                                     str(self.device), self.copies.h2d, self.peers.alloc,
                                     holders)

    def export_cache(self) -> dict[str, Any]:
        """This Trainer's cache buffer for its peers: ``{"handle", "node", "why"}``
        (:meth:`TrainerPeers.export <fgnn.executors.peers.TrainerPeers.export>`; no handle,
        with the reason, without a shareable buffer)."""
        return self.peers.export()

    def open_peers(self, offers: dict[int, Any]) -> dict[str, Any]:
        """Read the peers' rows from their buffers: ``offers`` maps a peer device to its
        handle (opened into the store) or to the reason there is none (that peer stays on the
        host copy, one log line). Returns ``{"sources", "reasons"}`` per peer device."""
        if not isinstance(self.store, FeatureStore) or self.store.peer_rows is None:
            return {"sources": {}, "reasons": {}}
        return self.peers.open(self.store, offers)

    def use_partition(self, partition: Any, node: int, servers: list[Any]) -> int:
        """Read host rows from node ``node`` of ``partition`` (its feature server's matrix, the
        other rows from their owners' servers) instead of the whole matrix; the next
        :meth:`load_cache` fills the cache from there. Returns the rows the node holds."""
        from fgnn.cache.partitioned_source import PartitionedSource
        from fgnn.executors.feature_server import node_source

        if not isinstance(self._host, PartitionedSource) or self._host.node != node:
            self._host = node_source(partition, int(node), servers)
            self._features = None  # the whole matrix is no longer referenced here
        self._device_rows, self._reads = 0, None
        return int(self._host.partition.holds(int(node)).sum())

    def count_reads(self, num_rows: int) -> None:
        """Count from now on the feature rows each training mini-batch reads, until the node's
        host tier is installed (:meth:`use_partition`): the per-node access counts of a
        ``hotness`` partition (:class:`~fgnn.cache.node_counts.ReadCounter`)."""
        from fgnn.cache.node_counts import ReadCounter

        self._reads = ReadCounter(int(num_rows))

    def take_reads(self) -> Optional[torch.Tensor]:
        """The ``(N,)`` int32 read counts since :meth:`count_reads` or the last call (counting
        goes on); None when not counting."""
        return None if self._reads is None else self._reads.take()

    def take_traffic(self) -> Optional[dict[str, Any]]:
        """Rows and bytes read per tier (device cache, local host, remote node) and seconds
        waited on remote rows since the last call; None without a partitioned host tier."""
        from fgnn.cache.partitioned_source import PartitionedSource

        if not isinstance(self._host, PartitionedSource):
            return None
        st = self._host.take_stats()
        dev, self._device_rows = self._device_rows, 0
        st["rows"]["device"] = dev
        st["bytes"]["device"] = dev * self._host.row_bytes
        return st

    @property
    def _disk_tier(self) -> bool:
        return self._disk is not None and self._disk.feature_tier == "disk"

    def cached_rows(self) -> int:
        """Rows in this device's own cache."""
        return self.kind.cached_rows(self.store)

    def set_scale(self, scale: float) -> None:
        """Forward the locality scale factor ``s`` to the in-process sampler (time-sharing)."""
        if self.local_sampler is not None:
            self.local_sampler.set_scale(scale)

    def host_info(self) -> dict[str, Any]:
        """Where this Trainer's host tier reads from: ``{"kind": "file" | "memory", "path",
        "source"}`` (``path`` is the mapped file, or None)."""
        source = (self.kind.store_source(self.store) if self.tiers is None
                  else type(self.tiers).__name__)
        return {"kind": "memory" if self._features_file is None else "file",
                "path": self._features_file, "source": source}

    def stop(self) -> None:
        """Ask a running :meth:`run_epoch` to finish after its current mini-batch."""
        self._stop.set()

    # ------------------------------------------------------------------ stages
    def _take(self, epoch: int, generation: int, plan: Optional[EvalPlan] = None,
              wait: bool = True) -> Optional[tuple[int, Sample, TaskRecord]]:
        """Dequeue the next task and load its sample: ``(task_id, sample, record)``; None when
        the epoch is over (or, with ``wait=False``, when nothing is queued right now). With
        ``plan`` the tasks are chunks of an evaluation pass."""
        rpc = wait_s = 0.0
        while not self._stop.is_set():
            t0 = time.perf_counter()
            status, item, waited = host.get(self.queue.get.remote(
                self.name, generation, _GET_TIMEOUT_S if wait else 0))
            rpc += time.perf_counter() - t0 - waited
            wait_s += waited
            if status == "timeout" and wait:
                continue
            if status != "item":
                return None
            t1 = time.perf_counter()
            rec = TaskRecord(role=self.role, wait_s=wait_s, rpc_s=rpc, producer=item.producer,
                             nbytes=item.nbytes)
            # On the copy stream: a CUDA IPC receipt makes the current stream wait for the
            # sender's event, and the local sampler's host syncs then wait only for its own
            # kernels, not for the training queued on the training stream.
            with self.copies.scope():
                if item.ref is not None:
                    try:
                        payload = host.get(item.ref)
                    except transport_errors() as err:  # sender died, GPU unreachable
                        self.queue.fail.remote(self.name, item.task_id,  # sample it again
                                               f"{type(err).__name__}: {_first_line(err)}")
                        continue
                    sample = unpack_sample(payload)
                    rec.fetch_s = time.perf_counter() - t1
                else:  # time-sharing: sample (S) and mark (M) on this device
                    sample, s, m = self.local_sampler.sample(epoch, item.task_id, plan)
                    rec.S, rec.M, rec.fetch_s = s, m, 0.0
                if self._reads is not None and plan is None:  # a training mini-batch's rows
                    self._reads.record(sample.input_nodes)
            return item.task_id, sample, rec
        return None

    def _fetch(self, epoch: int, generation: int, plan: Optional[EvalPlan] = None
               ) -> Optional[_Batch]:
        """The next task with its features extracted (None: epoch over).

        With the disk tier the Trainer keeps up to ``1 + W`` tasks leased ahead (the GIDS window
        buffer, §3.4: their nodes hold future-reuse counts in the device cache): it waits for the
        first, then takes only what is already queued, never waiting on tasks it holds itself.
        """
        if self.tiers is None or plan is not None:  # evaluation chunks: no look-ahead
            got = self._take(epoch, generation, plan)
            return None if got is None else self._extract(*got)
        if not self._ahead:
            got = self._take(epoch, generation)
            if got is None:
                return None
            self._lease_ahead(got)
        while len(self._ahead) < 1 + self.lookahead:
            got = self._take(epoch, generation, wait=False)
            if got is None:
                break
            self._lease_ahead(got)
        return self._extract(*self._ahead.popleft())

    def _lease_ahead(self, got: tuple[int, Sample, TaskRecord]) -> None:
        self._ahead.append(got)
        self.tiers.enter_window(got[1].input_nodes)

    def _extract(self, task_id: int, sample: Sample, rec: TaskRecord) -> _Batch:
        """Extract the sample's features (cache hits, host or disk misses) and labels; the
        batch's record is ``rec`` with the Extract's time and counters."""
        t2 = time.perf_counter()
        counts: dict[str, Any] = {}
        with self.copies.scope():
            # Split host/cache and index labels on the host before anything moves: only the
            # gathered rows, labels and the sample cross to the device, on the copy stream
            # from pinned memory, overlapping the training of the previous batch.
            if self.tiers is None:
                x, counts = self.kind.extract(self.store, sample)
                self._device_rows += int(counts.get("tier_rows", {}).get("local", 0))
            else:
                x = self.tiers.extract([sample.input_nodes]
                                       + [s.input_nodes for _, s, _ in self._ahead])
            labels, sample, ready = self._to_device(sample)
        if ready is not None:
            ready.synchronize()  # this thread waits for its own copies, not for training
        if self.tiers is not None:  # rows from the CPU buffer and from storage cross over
            d = self.tiers.take_stats()
            host = d["cpu_rows"] + d["storage_rows"]
            counts = {"hits": d["device_rows"], "misses": host,
                      "host_bytes": host * self.tiers.row_bytes, "disk": d}
        rec = replace(rec, **counts, extract_s=time.perf_counter() - t2)
        return _Batch(task_id, sample, x, labels, rec, ready)

    def _to_device(self, sample: Sample) -> tuple[torch.Tensor, Sample, Any]:
        """Labels (the task's: the seeds' classes, a pair sample's pair labels) and sample
        on the device through the copy stream, and its event."""
        labels = self.copies.h2d(self.step.labels(sample, self.labels))
        # ids a CUDA Sampler narrowed to int32 for the host copy are widened on the device
        sample = to_device(sample, self.copies.h2d)
        return labels, sample, self.copies.record()

    def _adopt(self, claim: Any) -> None:
        """Take a claim's weights (when they changed) and version."""
        if claim.weights is not None:
            unflatten_into(claim.weights.to(self.device), self.params)
        self._version = claim.version

    def _claim(self) -> Optional[float]:
        """Take a slot of the server's current step (and its weights when they changed), unless
        the last push already brought one; returns the seconds it waited for other Trainers' work
        (:func:`~fgnn.exchange.ps.step_wait`), or None when stopped first."""
        if self._next_claim is not None:
            self._adopt(self._next_claim)
            self._next_claim = None
            return 0.0
        lost = 0.0  # attempts that found no slot within the server's wait: waits as well
        while not self._stop.is_set():
            t0, w0 = time.perf_counter(), time.time()
            got = host.get(self.ps.claim.remote(self.name, self._version, _GET_TIMEOUT_S,
                                               self._incarnation))
            if got is not None:
                seen = time.perf_counter() - t0
                self._adopt(got)
                return step_wait(got.ready_at, w0, seen) + lost
            lost += time.perf_counter() - t0
        return None

    def _backward(self, epoch: int, batch: _Batch, to_host: bool = False
                  ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        """Forward and backward of one task on the current weights, then the finiteness
        check (:func:`checked_step`): ``(loss as a 0-d host tensor, flat gradient on the host
        with to_host, else None)``. A non-finite loss or gradient raises
        :class:`NonFiniteLoss` before any gradient leaves this Trainer, under either
        exchange."""
        self.copies.wait(batch.ready, batch.tensors())
        for p in self.params:
            p.grad = None
        seed_task_rng(self.seed, epoch, batch.task_id)
        loss = forward_backward(self.model, self.step.loss, batch.sample,
                                _as_float32(batch.x), batch.labels)
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]
        grad, value = checked_step(loss, grads, epoch, batch.task_id, to_host)
        return torch.tensor(value), grad

    def _train(self, epoch: int, batch: _Batch, has_next: Callable[[], bool] = _no_next
               ) -> Optional[TaskRecord]:
        """Claim a slot, forward, backward, push the gradient (None: stopped before a slot).

        ``has_next()``: whether this Trainer holds its next task by now, so the push may also
        claim a slot for it (one round trip less per task). It is asked just before the push,
        after the forward and backward passes, which its prefetch had to fetch the task in."""
        if self.exchange is not None:
            return self.exchange.train(epoch, batch.task_id, int(batch.labels.numel()),
                                       batch.rec, lambda: self._backward(epoch, batch)[0],
                                       self._stop, self.faults.delay_s, has_next())
        t0 = time.perf_counter()
        waited = self._claim()
        if waited is None:
            return None
        t1 = time.perf_counter()
        loss, grad = self._backward(epoch, batch, to_host=True)
        if self.faults.delay_s > 0:
            time.sleep(self.faults.delay_s)
        t2 = time.perf_counter()
        reply = host.get(self.ps.step.remote(epoch, batch.task_id, grad, self.name,
                                            int(batch.labels.numel()),
                                            self._version if has_next() else None,
                                            self._incarnation, time.time()))
        applied, self._next_claim = reply.applied, reply.claim
        if applied and self.faults.crash_after_apply and not _reconstructed():
            os._exit(1)  # fault injection: the gradient is applied, the ack never sent
        if applied and self.faults.oom_after_apply and not _reconstructed():
            exhaust_memory()  # fault injection: the same, ended by the kernel's OOM killer
        t3 = time.perf_counter()
        # sync_s: the gradient exchange (the claim's reply less its wait for other Trainers'
        # work, ps.step_wait; the push); step_wait_s: waiting for other Trainers' work
        return replace(batch.rec, loss=float(loss.detach()), applied=bool(applied),
                       train_s=t3 - t0 - waited, sync_s=(t1 - t0 - waited) + (t3 - t2),
                       step_wait_s=waited,
                       exchange_parts={"x_claim_s": t1 - t0 - waited, "x_push_s": t3 - t2})

    @torch.no_grad()
    def _score(self, batch: _Batch, plan: EvalPlan) -> TaskRecord:
        """Forward one evaluation chunk in eval mode: correct, count and summed loss."""
        t0 = time.perf_counter()
        self.copies.wait(batch.ready, batch.tensors())
        self.model.eval()
        try:
            out = self.model(batch.sample.blocks, _as_float32(batch.x))
            scored = self.step.score(self.model, out, batch.sample, batch.labels)
        finally:
            self.model.train()
        return replace(batch.rec, **scored, split=plan.task(batch.task_id)[0],
                       eval_s=time.perf_counter() - t0, train_s=0.0, sync_s=0.0,
                       step_wait_s=0.0)

    def score_layerwise(self, graph: Any, idx: Any, weights: Optional[torch.Tensor] = None
                        ) -> tuple[int, int, float]:
        """Score the vertices ``idx`` with every neighbour, layer by layer, on this device
        (:func:`fgnn.evaluation.evaluate_layerwise`); returns ``(correct, count, loss_sum)``.

        Args:
            graph: the topology payload (the object store maps it; Trainers hold no topology).
            idx: the vertex ids to score.
            weights: flat weights to score; None takes the server's current weights.
        """
        from fgnn.evaluation import evaluate_layerwise

        if weights is None and self.exchange is not None:
            weights = flatten(self.params)  # this device holds the current weights
        elif weights is None:
            _, weights = host.get(self.ps.weights.remote())
        self._version = -1
        unflatten_into(weights.to(self.device), self.params)
        rows = self._host if self._host is not None else open_features(self._features)
        if not isinstance(rows, (torch.Tensor, np.ndarray)):
            rows = np.asarray(rows)
        s = evaluate_layerwise(self.model, graph_from_payload(graph), rows, self.labels,
                               tensor_from(idx), self.device)
        return s.correct, s.count, s.loss_sum

    # ------------------------------------------------------------------ the loop
    def run_epoch(self, epoch: int, policy: Optional[StandbyPolicy] = None,
                  plan: Optional[EvalPlan] = None, weights: Optional[torch.Tensor] = None,
                  measure: bool = False) -> dict[str, Any]:
        """Train until the epoch's tasks are all acknowledged (or, for a standby, until the
        profit of the next fetch is not positive); with ``plan``, score an evaluation pass.

        Args:
            epoch: the epoch (or evaluation pass), as started on the queue and the server.
            policy: switching rule of a standby Trainer; None for a normal Trainer.
            plan: the evaluation pass whose chunks to score (forward only, no gradients), or
                None to train.
            weights: flat weights to score with (e.g. the best-validation ones); None takes the
                server's current weights.
            measure: measure the training step's device memory (the warm-up epoch).

        Returns:
            ``{"name", "role", "batches", "time_s", "switched", "declined", "memory"}``
            (``declined``: a standby stopped because the profit of its next fetch was not
            positive); ``memory`` is the
            :class:`~fgnn.executors._memory.StepMemoryMeter` report when measured (plus the
            local sampler's working set in time-sharing mode), else None.
        """
        t_start = time.perf_counter()
        generation, saved = self._begin_run(epoch, plan, weights)
        meter = StepMemoryMeter(self.model, self.device, policy is None) if measure else None

        def step(b: _Batch, has_next: Callable[[], bool] = _no_next) -> Optional[TaskRecord]:
            run = ((lambda x: self._train(epoch, x, has_next)) if plan is None
                   else (lambda x: self._score(x, plan)))
            return run(b) if meter is None else meter.run(run, b)
        declined = False
        if policy is None:
            batches, last_ack = self._run_pipelined(step, epoch, generation, plan)
        else:
            batches, last_ack, declined = self._run_standby(step, policy, epoch, generation,
                                                            plan)
        if last_ack is not None:
            host.get(last_ack)
        memory = self._memory_report(meter, batches)
        if saved is not None:  # the collective member's own weights, after other weights
            unflatten_into(saved, self.params)
        return {"name": self.name, "role": self.role, "batches": batches,
                "time_s": time.perf_counter() - t_start, "switched": batches > 0,
                "declined": declined, "memory": memory}

    def _begin_run(self, epoch: int, plan: Optional[EvalPlan], weights: Optional[torch.Tensor]
                   ) -> tuple[int, Optional[torch.Tensor]]:
        """Register with the queue and take the run's weights (:meth:`_load_weights`); returns
        the queue's generation and the weights to put back after the run (or None)."""
        self._stop.clear()
        self._next_claim = None
        if self.tiers is not None:
            self._ahead.clear()
            self.tiers.drop_staged()
        generation = host.get(self.queue.register.remote(self.name))
        self._incarnation = generation
        saved = self._load_weights(epoch, plan, weights, generation)
        return generation, saved

    def _run_pipelined(self, step: Callable[..., Optional[TaskRecord]], epoch: int,
                       generation: int, plan: Optional[EvalPlan]) -> tuple[int, Any]:
        """A normal Trainer's loop, pipelined: extract ``i + 1`` while training ``i``; returns
        the batches done and the last acknowledgement's ref."""
        batches, last_ack = 0, None
        with ThreadPoolExecutor(1, thread_name_prefix=f"{self.name}-prefetch",
                                initializer=bind_device, initargs=(self.device,)) as pool:
            nxt: Future = pool.submit(self._fetch, epoch, generation, plan)
            while True:
                t0 = time.perf_counter()
                batch = nxt.result()
                stall = time.perf_counter() - t0  # what the prefetch did not hide
                if batch is None:
                    break
                nxt = pool.submit(self._fetch, epoch, generation, plan)
                if self.exchange is not None and plan is None:  # its slot, while this computes
                    nxt.add_done_callback(self.exchange.prefetched)
                rec = step(batch, functools.partial(_holds_task, nxt))
                if rec is None:
                    break
                rec.stall_s = stall
                last_ack = self._ack(batch.task_id, rec)
                batches += 1
            self._stop.set()
        return batches, last_ack

    def _run_standby(self, step: Callable[..., Optional[TaskRecord]],
                     policy: StandbyPolicy, epoch: int, generation: int,
                     plan: Optional[EvalPlan]) -> tuple[int, Any, bool]:
        """A standby's loop: decide per fetch whether it profits (FGNN §5.3); returns the
        batches done, the last acknowledgement's ref and whether it declined a fetch."""
        batches, busy, last_ack = 0, 0.0, None
        while not self._stop.is_set():
            remaining = host.get(self.queue.qsize.remote())
            measured = busy / batches if batches else None
            if not policy.should_fetch(remaining, measured):
                return batches, last_ack, True
            t0 = time.perf_counter()
            batch = self._fetch(epoch, generation, plan)
            if batch is None:
                break
            stall = time.perf_counter() - t0
            rec = step(batch)
            if rec is None:
                break
            rec.stall_s = stall
            busy += time.perf_counter() - t0 - rec.wait_s - rec.step_wait_s
            last_ack = self._ack(batch.task_id, rec)
            batches += 1
        return batches, last_ack, False

    def _memory_report(self, meter: Optional[StepMemoryMeter], batches: int
                       ) -> Optional[dict[str, Any]]:
        """The measured step memory (plus the local sampler's working set), or None."""
        if meter is None or batches == 0:
            return None
        memory = meter.report()
        if self.local_sampler is not None and getattr(self.local_sampler, "_built", False):
            memory["sampler"] = self.local_sampler.working_set()
        return memory

    def _load_weights(self, epoch: int, plan: Optional[EvalPlan], weights: Any,
                      generation: int) -> Optional[torch.Tensor]:
        """Take this run's weights: the server's (or ``weights``), enrolled for training; with
        the collective exchange, join its epoch (training) or score on the member's own weights
        unless ``weights`` are given. Returns the member's weights to put back after scoring
        with others (else None)."""
        if self.exchange is not None:
            if plan is None:
                self.exchange.begin(epoch)
            if plan is None or weights is None:
                return None
            saved = flatten(self.params)
            unflatten_into(weights.to(self.device), self.params)
            return saved
        if plan is None:  # claims of an earlier, dead incarnation no longer count
            host.get(self.ps.enroll.remote(self.name, generation))
        if weights is None:
            self._version, weights = host.get(self.ps.weights.remote())
        else:
            self._version = -1  # not the server's: the next claim must bring its weights
        unflatten_into(weights.to(self.device), self.params)
        return None

    def exchange_begin(self, epoch: int) -> None:
        """Join the collective exchange's ``epoch`` (the runtime calls it on every Trainer and
        standby at the epoch's start: a standby reduces every step, so it holds the current
        weights when it switches to training)."""
        if self.exchange is not None:
            self.exchange.begin(epoch)

    def exchange_state(self) -> dict[str, Any]:
        """This Trainer's weights and optimizer state under the collective exchange (the
        ledger reads them for checkpoints and the final model)."""
        if self.exchange is None:
            raise ValueError(f"{self.name} has no collective exchange")
        return self.exchange.state()

    def _ack(self, task_id: int, rec: TaskRecord) -> Any:
        if rec.deferred:
            return None  # the collective exchange acknowledges it once its step is applied
        self.metrics.stage_seconds("extract", rec.extract_s)
        self.metrics.cache(rec.hits, rec.misses, rec.host_bytes)
        if not rec.evaluation:
            self.metrics.stage_seconds("train", rec.train_s)
            self.metrics.batch_done(rec.extract_s + rec.train_s)
        return self.queue.ack.remote(self.name, task_id, rec)


def _resolved(replica: Any) -> Optional[dict[str, Any]]:
    """A replica's export: given, or ``[ref]`` of the filling Trainer's call (fetched here, so
    a filler that died leaves this Trainer to fill its own, not failed with it)."""
    if not isinstance(replica, list):
        return replica
    import ray

    try:
        return ray.get(replica[0])
    except Exception as err:  # noqa: BLE001 - no replica: this Trainer fills its own
        log.warning("the cache replica is not there (%s): filling this Trainer's own", err)
        return None
