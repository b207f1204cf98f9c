"""The Trainer executor (FGNN §5.2, Fig. 9): extract from cache + host, train, exchange gradients.

A Trainer dequeues sample refs from the global queue, extracts the input features through a
:class:`~fgnn.cache.feature_store.FeatureStore` (its own cache, peer devices' caches, host
memory; FGNN §6.1, Song & Jiang §3.2), split by the Sampler's M-step marks, runs
forward/backward, and pushes the gradient to the :class:`~fgnn.executors.ps.ParameterServer`,
which answers with the current weights (asynchronous updates with bounded staleness, §5.2).

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

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Optional

import torch
import torch.nn.functional as F
from torch import nn

from fgnn.executors._common import (MemmapFeatures, _device_tag, metrics_for, open_features,
                                    tensor_from)
from fgnn.executors.ps import flatten, unflatten_into
from fgnn.executors.sampler import unpack_sample
from fgnn.executors.scheduler import StandbyPolicy
from fgnn.cache.placement import Placement
from fgnn.sampling.base import Sample

__all__ = ["TrainerExecutor", "build_store"]

#: Seconds a ``get`` waits inside the queue before the Trainer re-checks its stop flag.
_GET_TIMEOUT_S = 1.0


def build_store(features: Any, placement: Optional[Placement], device_index: int,
                device: str = "cpu") -> Any:
    """The Trainer's feature store: the rows ``placement`` puts on device ``device_index``
    cached on ``device`` (FGNN §6.1 ``load_cache``), rows other devices cache in the peer tier
    (served from the host copy, counted as peer reads), the rest read from host memory.
    ``placement=None``: no cache."""
    from fgnn.cache.feature_store import FeatureStore

    if placement is None:
        return FeatureStore.single(features, None, device)
    return FeatureStore.from_placement(features, placement, int(device_index), device=device,
                                       peers_from_host=True)


@dataclass
class _Batch:
    """A fetched and extracted mini-batch."""

    task_id: int
    sample: Sample
    x: torch.Tensor
    labels: torch.Tensor
    rec: dict[str, Any]


class TrainerExecutor:
    """Trains on samples from the global queue.

    Args:
        features: ``(N, F)`` host feature matrix (tensor, numpy or memmap), or a
            :class:`~fgnn.executors._common.MemmapFeatures` naming a file that this Trainer maps
            itself (its host tier then reads rows from the file, not from the object store).
        labels: ``(N,)`` int64 labels.
        model: a model of the :mod:`fgnn.models` contract (weights come from the server).
        placement: the job's cache placement over its devices
            (:func:`~fgnn.cache.placement.job_placement`; a standby's own buffer is smaller, the
            topology shares its device), or None for no cache.
        device_index: this Trainer's device in ``placement`` (its bit in the M-step marks).
        ps: handle of the parameter server actor.
        queue: handle of the global queue actor.
        name: actor name (``fgnn-trainer-1``, ``fgnn-standby-0``).
        device: the training device (``"cpu"`` with Ray logical GPUs).
        role: ``"trainer"`` or ``"standby"``.
        local_sampler: a :class:`~fgnn.executors.sampler.SamplerExecutor` (in-process) to sample
            raw tasks itself (time-sharing mode), else None.
        delay_s: extra seconds per mini-batch (fault injection: a deliberately slow Trainer).
    """

    def __init__(self, features: Any, labels: Any, model: nn.Module,
                 placement: Optional[Placement], device_index: int, ps: Any, queue: Any,
                 name: str = "fgnn-trainer-0", device: str = "cpu", role: str = "trainer",
                 local_sampler: Any = None, delay_s: float = 0.0) -> None:
        torch.set_num_threads(1)
        if role not in ("trainer", "standby"):
            raise ValueError(f"role must be 'trainer' or 'standby', got {role!r}")
        self.name, self.role, self.device = name, role, torch.device(device)
        self.labels = tensor_from(labels)
        self.device_index = int(device_index)
        self._features_file = (features.path if isinstance(features, MemmapFeatures) else None)
        self._host = open_features(features)
        self.store = build_store(self._host, placement, self.device_index, str(self.device))
        self.model = model.to(self.device)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.ps, self.queue = ps, queue
        self.local_sampler = local_sampler
        self.delay_s = float(delay_s)
        self.metrics = metrics_for(role, _device_tag(name))
        self._stop = threading.Event()

    def ready(self) -> str:
        """Returns the name once the cache is loaded (the runtime waits on it)."""
        return self.name

    def load_cache(self, placement: Optional[Placement]) -> int:
        """Rebuild the cache for a new placement (the layout changed); returns the rows this
        device now caches."""
        self.store = build_store(self._host, placement, self.device_index, str(self.device))
        return self.cached_rows()

    def cached_rows(self) -> int:
        """Rows in this device's own cache."""
        bufs = self.store.buffers
        return int(bufs[self.store.local].shape[0]) if bufs else 0

    def set_scale(self, scale: float) -> None:
        """Forward the locality scale factor ``s`` to the in-process sampler (time-sharing)."""
        if self.local_sampler is not None:
            self.local_sampler.set_scale(scale)

    def host_info(self) -> dict[str, Any]:
        """Where this Trainer's host tier reads from: ``{"kind": "file" | "memory", "path",
        "source"}`` (``path`` is the mapped file, or None)."""
        return {"kind": "memory" if self._features_file is None else "file",
                "path": self._features_file, "source": type(self.store.host).__name__}

    def stop(self) -> None:
        """Ask a running :meth:`run_epoch` to finish after its current mini-batch."""
        self._stop.set()

    # ------------------------------------------------------------------ stages
    def _fetch(self, epoch: int, generation: int) -> Optional[_Batch]:
        """Dequeue the next task, load its sample and extract its features (None: epoch over)."""
        import ray

        rpc = wait = 0.0
        while not self._stop.is_set():
            t0 = time.perf_counter()
            status, item, waited = ray.get(self.queue.get.remote(
                self.name, generation, _GET_TIMEOUT_S))
            rpc += time.perf_counter() - t0 - waited
            wait += waited
            if status == "timeout":
                continue
            if status == "done":
                return None
            t1 = time.perf_counter()
            rec: dict[str, Any] = {"role": self.role, "wait_s": wait, "rpc_s": rpc,
                                   "producer": item.producer, "nbytes": item.nbytes}
            if item.ref is not None:
                try:
                    sample = unpack_sample(ray.get(item.ref))
                except ray.exceptions.RayError:  # owner (a Sampler) died: sample it again
                    self.queue.fail.remote(self.name, item.task_id)
                    continue
                rec["fetch_s"] = time.perf_counter() - t1
            else:  # time-sharing: sample (S) and mark (M) on this device
                sample, s, m = self.local_sampler.sample(epoch, item.task_id)
                rec.update(S=s, M=m, fetch_s=0.0)
            t2 = time.perf_counter()
            # Split local/peer/host from the M-step marks and index labels on the host before
            # anything moves: only the gathered rows and labels cross to the device (no
            # device->host sync per batch).
            x = self.store.gather(sample.input_nodes, sample.cached)
            labels = self.labels[sample.seeds.to(self.labels.device)].to(self.device)
            sample = sample.to(self.device)
            st = self.store.reset_stats()
            rec.update(extract_s=time.perf_counter() - t2, hits=st.hits + st.peer,
                       misses=st.misses, bytes=st.bytes["host"], local=st.hits, peer=st.peer,
                       host=st.misses, tier_bytes={"local": st.bytes["device"],
                                                   "peer": st.bytes["peer"],
                                                   "host": st.bytes["host"]})
            return _Batch(item.task_id, sample, x, labels, rec)
        return None

    def _train(self, epoch: int, batch: _Batch) -> dict[str, Any]:
        """Forward, backward, push the gradient, take the server's weights."""
        import ray

        t0 = time.perf_counter()
        self.model.train()
        for p in self.params:
            p.grad = None
        logits = self.model(batch.sample.blocks, batch.x)
        loss = F.cross_entropy(logits, batch.labels)
        loss.backward()
        grad = flatten([p.grad if p.grad is not None else torch.zeros_like(p)
                        for p in self.params]).cpu()
        if self.delay_s > 0:
            time.sleep(self.delay_s)
        t1 = time.perf_counter()
        applied, _, flat = ray.get(self.ps.step.remote(epoch, batch.task_id, grad, self.name))
        unflatten_into(flat.to(self.device), self.params)
        t2 = time.perf_counter()
        rec = dict(batch.rec)
        rec.update(loss=float(loss.detach()), applied=bool(applied), train_s=t2 - t0,
                   sync_s=t2 - t1)
        return rec

    # ------------------------------------------------------------------ the loop
    def run_epoch(self, epoch: int, policy: Optional[StandbyPolicy] = None) -> dict[str, Any]:
        """Train until the epoch's tasks are all acknowledged (or, for a standby, until the
        profit of the next fetch is not positive).

        Args:
            epoch: the epoch, as started on the queue and the server.
            policy: switching rule of a standby Trainer; None for a normal Trainer.

        Returns:
            ``{"name", "role", "batches", "time_s", "switched"}``.
        """
        import ray

        self._stop.clear()
        t_start = time.perf_counter()
        generation = ray.get(self.queue.register.remote(self.name))
        _, flat = ray.get(self.ps.weights.remote())
        unflatten_into(flat.to(self.device), self.params)
        batches, busy, last_ack = 0, 0.0, None
        if policy is None:  # pipelined: extract i + 1 while training i
            with ThreadPoolExecutor(1, thread_name_prefix=f"{self.name}-prefetch") as pool:
                nxt: Future = pool.submit(self._fetch, epoch, generation)
                while True:
                    t0 = time.perf_counter()
                    batch = nxt.result()
                    stall = time.perf_counter() - t0  # what the prefetch did not hide
                    if batch is None:
                        break
                    nxt = pool.submit(self._fetch, epoch, generation)
                    rec = self._train(epoch, batch)
                    rec["stall_s"] = stall
                    last_ack = self._ack(batch.task_id, rec)
                    batches += 1
                self._stop.set()
        else:  # standby: decide per fetch (FGNN §5.3)
            while not self._stop.is_set():
                remaining = ray.get(self.queue.qsize.remote())
                measured = busy / batches if batches else None
                if not policy.should_fetch(remaining, measured):
                    break
                t0 = time.perf_counter()
                batch = self._fetch(epoch, generation)
                if batch is None:
                    break
                stall = time.perf_counter() - t0
                rec = self._train(epoch, batch)
                rec["stall_s"] = stall
                busy += time.perf_counter() - t0 - rec["wait_s"]
                last_ack = self._ack(batch.task_id, rec)
                batches += 1
        if last_ack is not None:
            ray.get(last_ack)
        return {"name": self.name, "role": self.role, "batches": batches,
                "time_s": time.perf_counter() - t_start, "switched": batches > 0}

    def _ack(self, task_id: int, rec: dict[str, Any]) -> Any:
        self.metrics.stage_seconds("extract", rec["extract_s"])
        self.metrics.stage_seconds("train", rec["train_s"])
        self.metrics.cache(rec["hits"], rec["misses"], rec["bytes"])
        self.metrics.batch_done(rec["extract_s"] + rec["train_s"])
        return self.queue.ack.remote(self.name, task_id, rec)
