"""The cache side of the runtime (internal): hotness, per-device plans, placement, filling.

:class:`CachePlanner` is a part of :class:`~fgnn.runtime.driver.Runtime`; it holds the cache
state of the job (hotness, plans, placement) and is passed the executors
(:class:`~fgnn.runtime.workers.WorkerGroup`) and services it acts on. The order of a run: a
sampling-free hotness map on the driver while the executors start (or PreSC's visit counts from
the warm-up epochs, FGNN §6.3); after the warm-up, each device's cache plan from the
Trainers' measured steps (FGNN §6.1, :func:`fgnn.cache.budget.plan_device_cache`), the placement
over the final layout (Song & Jiang §3.2) and its holder bits for the Samplers' M step; then every
executor fills its cache, again after a restart, and the Trainers map each other's buffers as
their peer tier (:mod:`fgnn.executors.peers`). Hot-first reordering (DataTiering Algorithm 2)
happens before anything ships; the locality sampler's scale is adapted once per epoch (Song &
Jiang Algorithm 2).
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from typing import Any, Callable, Optional

import numpy as np
import torch

from fgnn.config import JobConfig
from fgnn.data.dataset import Dataset
from fgnn.runtime.faults import Watchdog
from fgnn.runtime.partition import FeaturePartitioning
from fgnn.runtime.workers import Services, WorkerGroup, _Exec
from fgnn.monitor.stats import EpochStats
from fgnn.sampling.base import Sampler
from fgnn.sampling.locality import LocalityAwareKHop

__all__ = ["CachePlanner"]

log = logging.getLogger(__name__)


class CachePlanner:
    """Hotness, cache plans, placement and filling.

    ``bounds_eval_chunk`` (a class attribute): whether the sizing may shrink an evaluation
    chunk the user did not set (a subclass that counts chunks in other units says no).

    Args:
        config: the job.
        dataset: the loaded dataset (:meth:`reorder` replaces it by the renumbered one).
        sampler: the job's sampler (PreSC pre-samples with it; the locality sampler's scale).
        step_tasks: R, tasks per mini-batch.
        evaluate: whether the run scores evaluation chunks (their excess is budgeted).
        services: the job's services (object-store refs of hotness, placement, cache map).
        workers: the executors whose caches it fills.
        watchdog: the driver's deadline.

    Attributes:
        hotness: the hotness map in force (None before it is known).
        cache_plans: ``full`` and ``resident`` device plans after the warm-up.
        alpha_full, alpha_resident: cached fraction of a Trainer's device, and of a device that
            also holds the topology.
        budget_bytes, step_peak_bytes: the full device's budget and the measured step peak.
        placement_name, placement: the cache placement over the devices (None: no cache).
        reordering, reorder_info: the hot-first renumbering and its report (None without).
        hotness_s, sizing_s, cache_fill_s: seconds of the hotness map, sizing and placement,
            and cache filling.
        peer_exports: device -> its Trainer's last buffer export (``handle``, ``node``,
            ``why``: :meth:`TrainerExecutor.export_cache`).
        peer_opened: Trainer name -> where it reads each peer from (``sources``, ``reasons``).
    """

    bounds_eval_chunk = True

    def __init__(self, config: JobConfig, dataset: Dataset, sampler: Sampler, step_tasks: int,
                 evaluate: bool, services: Services, workers: WorkerGroup,
                 watchdog: Watchdog) -> None:
        self.config, self.dataset, self.sampler = config, dataset, sampler
        self.step_tasks, self.do_evaluate = step_tasks, evaluate
        self.services, self.workers, self.watchdog = services, workers, watchdog
        self.disk_tier = config.disk.feature_tier == "disk"
        self.hotness: Any = None
        self.cache_plans: dict[str, Any] = {}
        self.alpha_full = self.alpha_resident = 0.0
        self.budget_bytes, self.step_peak_bytes = 0, None
        self.placement_name, self.placement = "none", None
        self.reordering: Any = None
        self.reorder_info: Optional[dict[str, Any]] = None
        self.reorder_dir: Optional[str] = None
        self.hotness_s = self.sizing_s = self.cache_fill_s = 0.0
        self.chosen = False
        """Whether the cache is chosen (before: executors train without one)."""
        self.counting = False
        """Whether the Samplers count visits (PreSC's warm-up epochs)."""
        part = config.cache.feature_partition
        self.partitioning = (None if part == "replicate" else
                             FeaturePartitioning(part, config.cache.feature_replicate_ratio))
        """The node-level feature partition (None: every row on every node)."""
        self.say: Callable[[str], None] = lambda line: None
        """Prints one line of the job (the runtime sets its timeline's)."""
        self.peer_exports: dict[int, dict[str, Any]] = {}
        self.peer_opened: dict[str, dict[str, Any]] = {}
        self._peers_stale = False
        workers.reinstall = self.install
        from fgnn.evaluation import eval_chunk

        self.eval_chunk = eval_chunk(config.train, dataset.feature_row_bytes)
        """Seeds of an evaluation chunk: the job's, or fewer once the sizing bounds it."""
        self.eval_chunk_auto = False
        """Whether the user left the chunk unset (the runtime says), so the sizing may shrink
        it to leave the cache room (:meth:`_bound_eval_chunk`)."""
        self.cache_empty: Optional[dict[str, Any]] = None
        """Why the plan caches no row (:func:`fgnn.cache.eval_bound.empty_cache_reason`)."""

    def policy_hotness(self, presample: bool = False) -> None:
        """The hotness map of a policy that needs no sampling (degree, WRPR, random), on the
        driver while the executors start (``hotness_s``); PreSC counts visits in the warm-up
        epochs instead (FGNN §6.3) -- unless ``presample``, when the driver pre-samples it
        (hot-first reordering needs the order before any epoch)."""
        cfg, ds = self.config, self.dataset
        if self.hotness is not None:  # computed already (for the reordering)
            return
        t0 = time.perf_counter()
        if self.policy != "none" and (self.policy != "presc" or presample):
            from fgnn.cache.hotness import compute_hotness

            gen = torch.Generator().manual_seed(cfg.train.seed + 7919)
            kw: dict[str, Any] = {"generator": gen} if self.policy == "random" else {}
            if self.policy == "presc":  # mini-batches of one task (B / R seeds), as trained
                kw.update(sampler=self.sampler, epochs=self.warmup_epochs,
                          batch_size=-(-cfg.train.batch_size // self.step_tasks))
            self.hotness = compute_hotness(self.policy, ds.graph, ds.train_idx, **kw).float()
        self.hotness_s = time.perf_counter() - t0

    @property
    def policy(self) -> str:
        """The hotness policy in force: time-sharing, the conventional baseline, caches by
        degree; ``presc#K`` is ``presc`` with ``cache.presample_epochs = K``."""
        if self.config.runtime.mode == "time-sharing":
            return "degree"
        if self.config.cache.policy == "none":  # no cache (parse_policy knows only rankings)
            return "none"
        from fgnn.cache.hotness import parse_policy

        return parse_policy(self.config.cache.policy)[0]

    @property
    def warmup_epochs(self) -> int:
        """Epochs at the start of the run that train without the feature cache: the PreSC#K
        pre-sampling (K epochs, FGNN §6.3: "we run the first K epochs of an end-to-end training
        pipeline for presampling without features cache"), else one, which measures T_s, T_t
        (§5.3) and each Trainer's memory (§6.1)."""
        return self.config.cache.presample_epochs if self.policy == "presc" else 1

    def _size_caches(self, memory_reports: dict[str, Any]) -> None:
        """Each executor's cache plan from the warm-up measurements (FGNN §6.1): the device
        budget less the terms of :func:`fgnn.cache.sizing.device_terms` (model, measured step
        peak, an evaluation chunk's excess, gather, fragmentation, CUDA contexts, NCCL
        buffers; the topology, sampling working set and queued CUDA IPC samples where the
        device samples too) and a margin. An evaluation chunk the user did not set is first
        shrunk to leave the cache its room (:meth:`_bound_eval_chunk`); a plan that caches no
        row says why (``cache_empty``, one line)."""
        from fgnn.cache.budget import plan_device_cache
        from fgnn.cache.eval_bound import empty_cache_reason

        cfg, ds = self.config, self.dataset
        n, row = ds.num_nodes, ds.feature_row_bytes
        reports = list(memory_reports.values())
        worst = {k: max((r.get(k) or 0 for r in reports), default=0)
                 for k in ("model_bytes", "step_peak_bytes", "gather_bytes")}
        cuda = any(r.get("device_total_bytes") for r in reports)
        cap = cfg.cache.cache_ratio
        ctx = self._term_context(reports, cuda)
        if cfg.cache.device_memory_gib is None and not cuda and cap is not None:
            # a ratio and no budget on a logical device: the ratio is the cache, and a device
            # that also holds the topology gives up the topology's bytes
            budget = int(cap * n * row)
            graph = {"graph": ds.graph.nbytes()}
            plans = {"full": plan_device_cache(budget, {}, num_nodes=n, row_bytes=row,
                                               margin_bytes=0),
                     "resident": plan_device_cache(budget, graph, num_nodes=n, row_bytes=row,
                                                   margin_bytes=0)}
        else:
            budget = self._device_budget(reports)
            ratio = self._bound_eval_chunk(worst, ctx, budget)
            full, resident = self._terms(worst, ctx, ratio)
            plans = {"full": plan_device_cache(budget, full, num_nodes=n, row_bytes=row,
                                               max_alpha=cap),
                     "resident": plan_device_cache(budget, resident, num_nodes=n,
                                                   row_bytes=row, max_alpha=cap)}
        self.cache_plans = plans
        self.alpha_full = self.cache_plans["full"].alpha
        self.alpha_resident = self.cache_plans["resident"].alpha
        self.budget_bytes = self.cache_plans["full"].budget_bytes
        self.step_peak_bytes = worst["step_peak_bytes"]
        self.cache_empty = empty_cache_reason(plans["full"], self.policy, cap)
        if self.cache_empty is not None:
            self.say(self.cache_empty["line"])

    def _eval_ratio(self, chunk: int) -> float:
        """:func:`~fgnn.cache.sizing.eval_ratio` of an evaluation chunk of ``chunk`` seeds."""
        from fgnn.cache.sizing import eval_ratio

        cfg = self.config
        return eval_ratio(chunk, cfg.train.batch_size, self.step_tasks,
                          self.do_evaluate and cfg.train.eval_mode != "layerwise")

    def _term_context(self, reports: list[dict[str, Any]], cuda: bool) -> dict[str, Any]:
        """What :meth:`_terms` needs besides the ratio, gathered once: the GPU terms, the
        Samplers' working sets and the queued CUDA IPC samples."""
        sets = [r["sampler"] for r in reports if r.get("sampler")]
        samplers = self.workers.alive("sampler")
        if samplers:
            sets += self.watchdog.get([e.handle.working_set.remote() for e in samplers],
                                      "a Sampler")
        return {"cuda": cuda, "common": self._gpu_terms(reports, cuda), "sets": sets,
                "ipc_queue": self._ipc_queue(reports)}

    def _terms(self, worst: dict[str, int], ctx: dict[str, Any], ratio: float
               ) -> tuple[dict[str, int], dict[str, int]]:
        """The terms of a Trainer's device (``full``) and of a device that samples too
        (``resident``) for evaluation chunks ``ratio`` times a training task."""
        from fgnn.cache.sizing import device_terms, sampler_bytes

        cuda, common = ctx["cuda"], ctx["common"]
        shares = 1 if self.config.runtime.mode == "time-sharing" else 2  # Sampler + standby
        sampler = max((sampler_bytes(w, ratio) for w in ctx["sets"]), default=0)
        full = device_terms(worst, ratio=ratio, cuda=cuda, **common)
        resident = device_terms(worst, ratio=ratio, cuda=cuda, processes=shares,
                                graph_bytes=self.dataset.graph.nbytes(), sampler=sampler,
                                ipc_queue=ctx["ipc_queue"], **common)
        return full, resident

    def _bound_eval_chunk(self, worst: dict[str, int], ctx: dict[str, Any], budget: int
                          ) -> float:
        """The evaluation ratio the plans budget: the chunk in force's, unless the user did not
        set the chunk (:attr:`eval_chunk_auto`) and its excess would crowd out the cache; then
        the chunk shrinks (:attr:`eval_chunk`, :func:`fgnn.cache.eval_bound.
        bounded_eval_ratio`) and the runtime evaluates in chunks of that many seeds."""
        from fgnn.cache.budget import SIZING_MARGIN_FRACTION, SIZING_MARGIN_MIN_BYTES
        from fgnn.cache.eval_bound import bounded_eval_ratio, chunk_for_ratio

        cfg, ds = self.config, self.dataset
        ratio = self._eval_ratio(self.eval_chunk)
        if not (self.eval_chunk_auto and self.bounds_eval_chunk) or ratio <= 1.0:
            return ratio
        margin = max(SIZING_MARGIN_MIN_BYTES, int(SIZING_MARGIN_FRACTION * budget))
        cap = 1.0 if cfg.cache.cache_ratio is None else cfg.cache.cache_ratio
        wanted = int(cap * ds.num_nodes) * ds.feature_row_bytes
        bounded = ratio
        for base, wide in zip(self._terms(worst, ctx, 1.0), self._terms(worst, ctx, ratio)):
            used = sum(base.values())
            bounded = min(bounded, bounded_eval_ratio(
                ratio, sum(wide.values()) - used, budget - used - margin, wanted))
        if bounded < ratio:
            self.eval_chunk = min(self.eval_chunk, chunk_for_ratio(
                bounded, cfg.train.batch_size, self.step_tasks))
            ratio = self._eval_ratio(self.eval_chunk)
        return ratio

    def _device_budget(self, reports: list[dict[str, Any]]) -> int:
        """``--device-memory``, else on a GPU each Trainer's :func:`~fgnn.cache.sizing.
        gpu_budget` (its share of the GPU, at most what was free plus what it held; the
        smallest), else a logical device's share of the host's memory, at most 1 GiB
        (:func:`~fgnn.cache.budget.logical_device_bytes`, as the memory plan counts it)."""
        from fgnn.cache.budget import logical_device_bytes
        from fgnn.cache.sizing import gpu_budget
        from fgnn.data.memory import host_memory_limit

        cfg = self.config
        if cfg.cache.device_memory_gib is not None:
            return int(cfg.cache.device_memory_gib * 2 ** 30)
        gpus = [gpu_budget(r["device_total_bytes"], self.services.gpus_per_device,
                           r.get("device_free_bytes"), r.get("process_bytes") or 0)
                for r in reports if r.get("device_total_bytes")]
        if gpus:
            return min(gpus)
        trainers = len(self.workers.alive("trainer"))
        return logical_device_bytes(trainers, host_memory_limit())

    def _gpu_terms(self, reports: list[dict[str, Any]], cuda: bool) -> dict[str, Any]:
        """Terms every GPU device has: the measured context (the largest, None when no
        process could measure it) and, with ``--exchange collective``, one NCCL communicator
        (:func:`~fgnn.cache.sizing.nccl_buffer_bytes`; members sharing a GPU sum over gloo
        and have none, :mod:`fgnn.exchange.groups`)."""
        from fgnn.cache.sizing import NCCL_BUFFSIZE, nccl_buffer_bytes

        if not cuda:
            return {}
        ctx = [int(r["context_bytes"]) for r in reports if r.get("context_bytes") is not None]
        rt = self.config.runtime
        members = 1 if rt.mode == "single" else rt.devices
        nccl = 0
        if rt.exchange == "collective" and self.services.gpus_per_device >= 1:
            buffsize = int(os.environ.get("NCCL_BUFFSIZE", NCCL_BUFFSIZE))
            nccl = nccl_buffer_bytes(members, buffsize=buffsize)
        return {"context_bytes": max(ctx) if ctx else None, "nccl": nccl}

    def _ipc_queue(self, reports: list[dict[str, Any]]) -> int:
        """Queued CUDA IPC samples on a Sampler's device (:func:`~fgnn.cache.sizing.
        ipc_queue_bytes`): the queue's bound (a whole epoch in ``single`` mode), each the
        largest sample a Sampler made in the warm-up; 0 with the object store."""
        from fgnn.cache.sizing import ipc_queue_bytes

        rt = self.config.runtime
        if rt.sample_transport != "cuda_ipc":
            return 0
        largest = max((int(r["sampler"].get("max_sample_bytes") or 0) for r in reports
                       if r.get("sampler")), default=0)
        samplers = self.workers.alive("sampler")
        if samplers:
            largest = max([largest] + [int(w.get("max_sample_bytes") or 0) for w in
                                       self.watchdog.get([e.handle.working_set.remote()
                                                          for e in samplers], "a Sampler")])
        queued = rt.queue_size
        if rt.mode == "single":  # the queue holds the whole epoch (its training tasks)
            batches = -(-int(self.dataset.train_idx.numel()) // self.config.train.batch_size)
            queued = max(queued, batches * self.step_tasks)
        return ipc_queue_bytes(queued, largest)

    def choose(self, memory_reports: dict[str, Any]) -> None:
        """After the warm-up epochs: the hotness map (PreSC: the Samplers' visit counts over
        the K epochs), each executor's cache plan, the cache map; then every executor fills its
        cache (``cache_fill_s``)."""
        ds = self.dataset
        t0 = time.perf_counter()
        if self.policy == "presc" and self.reorder_info is None:
            samplers = self.workers.alive("sampler")
            counts = [c for c in self.watchdog.get(
                [e.handle.take_visits.remote() for e in samplers], "a Sampler")
                if c is not None]
            self.hotness = _mean_visits(counts, self.warmup_epochs)
        self._size_caches(memory_reports)
        self.services.refs["hotness"] = (None if self.hotness is None
                                         else self.services.put(self.hotness.numpy()))
        self._place_caches()
        if self.partitioning is not None:
            self._partition_features()
        if self.reorder_info is not None:  # cached <=> id < C (DataTiering §3.2)
            cached = (torch.zeros(ds.num_nodes, dtype=torch.bool) if self.placement is None
                      else self.placement.holder_bits() != 0)
            c = int(cached.sum())
            self.reorder_info["cached_prefix"] = c
            self.reorder_info["cache_is_prefix"] = bool(cached[:c].all())
        self.sizing_s = time.perf_counter() - t0
        self.chosen = True
        self.fill(self.workers.execs)

    def _partition_features(self) -> None:
        """Plan the node partition from the hotness in force, start the feature servers and
        assign the Trainers to nodes (:mod:`fgnn.runtime.partition`); :meth:`install` then
        gives every Trainer its node's host tier before its cache fill."""
        from ray.util.placement_group import placement_group_table

        bundles = placement_group_table(self.services.pg).get("bundles_to_node_id", {})
        trainers = [e for e in self.workers.execs if e.alive and e.role != "sampler"]
        self.partitioning.start(self.hotness, self.dataset.num_nodes,
                                self.services.refs["features"],
                                {int(k): v for k, v in bundles.items()}, trainers, self.say)

    @property
    def _counting_reads(self) -> bool:
        return self.partitioning is not None and self.partitioning.counts_reads

    def count_reads(self) -> None:
        """At the start of the warm-up: every Trainer counts the feature rows it reads until its
        node's host tier is installed (a ``hotness`` partition's per-node access counts,
        :mod:`fgnn.runtime.partition`); nothing without one."""
        if self._counting_reads:
            n = self.dataset.num_nodes
            self.watchdog.get([e.handle.count_reads.remote(n) for e in self.workers.execs
                               if e.alive and e.role != "sampler"], "a Trainer")

    def collect_reads(self) -> None:
        """After each warm-up epoch's training (before a re-layout may stop a Trainer): take
        every Trainer's counts into the partition's, by device."""
        if not self._counting_reads:
            return
        import ray

        got = {}
        for e in [e for e in self.workers.execs if e.alive and e.role != "sampler"]:
            try:  # a Trainer that died since keeps none (restarted, it counts again)
                got[e.device] = self.watchdog.get(e.handle.take_reads.remote(), "a Trainer")
            except ray.exceptions.RayActorError:
                continue
        self.partitioning.add_reads(got)

    def partition_traffic(self) -> Optional[list[dict[str, Any]]]:
        """Per node, the last epoch's feature traffic by tier and remote wait (None: no
        partition, or before it starts)."""
        part = self.partitioning
        if part is None or part.partition is None:
            return None
        live = [e for e in self.workers.execs if e.alive and e.name in part.node_of]
        got = self.watchdog.get([e.handle.take_traffic.remote() for e in live], "a Trainer")
        return part.take_epoch({e.name: g for e, g in zip(live, got)})

    def extra_allocation(self) -> dict[str, Any]:
        """What this planner adds to the report's ``allocation``: the peer tier
        (``peer_tier``) and the node partition (``feature_partition``) when there are; a typed
        planner adds ``typed_cache``."""
        out: dict[str, Any] = {}
        peers = self.peer_report()
        if peers is not None:
            out["peer_tier"] = peers
        part = self.partitioning
        if part is not None and part.partition is not None:
            out["feature_partition"] = part.report()
        return out

    def reorder(self) -> Dataset:
        """Hot-first renumbering at load (DataTiering Algorithm 2), before anything is shipped:
        from here on every id the job uses -- topology, features, labels, splits, hotness, cache
        map, the Samplers' seeds and the evaluation -- is a new id; ``self.reordering`` maps
        them back. The order is the hotness of the policy in force, computed first (PreSC#K
        pre-samples on the driver for it, since the order must exist before any epoch)."""
        from fgnn.cache.reorder import reorder_dataset

        policy = self.policy
        self.policy_hotness(presample=True)
        if self.hotness is None:
            raise ValueError("cache.reorder='hot-first' orders vertices by hotness, but the cache "
                             f"policy in force is {policy!r}")
        t0 = time.perf_counter()
        workdir = None
        if (isinstance(self.dataset.features, np.memmap)  # on disk: a reordered copy on disk
                or getattr(self.dataset.graph, "files", None) is not None):
            self.reorder_dir = workdir = tempfile.mkdtemp(prefix="fgnn-reorder-")
        self.dataset, self.reordering = reorder_dataset(self.dataset, self.hotness, workdir)
        self.hotness = self.hotness[self.reordering.perm]
        self.reorder_info = {"kind": "hot-first", "score": policy,
                             "seconds": time.perf_counter() - t0}
        return self.dataset

    def _place_caches(self) -> None:
        """Place the cached rows over the final layout (Song & Jiang §3;
        :func:`~fgnn.cache.placement.job_placement`): the Trainers share the configured
        placement (``cache.placement``) with ``⌊α N⌋`` rows each; a standby Trainer (or every
        device in time-sharing mode) has the smaller ``α`` of a device that also holds the
        topology. The holder bits of the result are the Samplers' M-step map. The warm-up epochs
        end after the allocation's re-layout, so the layout no longer changes; the disk tier's
        device cache is dynamic (GIDS window buffering): nothing to place or mark."""
        from fgnn.cache.feature_store import num_cached_rows
        from fgnn.cache.placement import job_placement

        cfg, n = self.config, self.dataset.num_nodes
        rt, n_g = cfg.runtime, self.services.num_devices
        live = {(e.role, e.device) for e in self.workers.execs if e.alive}
        if rt.mode == "time-sharing":
            trainers, standbys = list(range(n_g)), []
            cap = num_cached_rows(self.alpha_resident, n)
        else:
            trainers = sorted(d for r, d in live if r == "trainer")
            standbys = sorted(d for r, d in live if r == "standby")
            cap = num_cached_rows(self.alpha_full, n)
        if (self.hotness is None or self.disk_tier
                or max(self.alpha_full, self.alpha_resident) <= 0):
            self.placement_name, self.placement = "none", None
        else:
            self.placement_name, self.placement = job_placement(
                self.hotness, n_g, trainers, cap, standbys,
                num_cached_rows(self.alpha_resident, n), cfg.cache.placement,
                cfg.cache.peer_cost)
        put = self.services.put
        self.services.refs["placement"] = put(self.placement)
        self.services.refs["cache_map"] = (None if self.placement is None
                                           else put(self.placement.holder_bits().numpy()))

    def install(self, execs: list[_Exec]) -> list[tuple[_Exec, Any]]:
        """Send the chosen cache to ``execs`` (Trainers fill theirs, Samplers mark against the
        map); returns ``(executor, ref)`` of the calls (none before the cache is chosen). Also
        used after an executor restarts, and a restarted Sampler counts visits again during the
        warm-up (a Trainer its reads, for a ``hotness`` partition)."""
        if not self.chosen:
            n = self.dataset.num_nodes
            return ([(e, e.handle.count_visits.remote()) for e in execs
                     if e.role == "sampler" and self.counting]
                    + [(e, e.handle.count_reads.remote(n)) for e in execs
                       if e.role != "sampler" and self._counting_reads])
        out, refs = [], self.services.refs
        fills = self._replica_exports()
        for e in execs:
            if e.role == "sampler":
                out.append((e, e.handle.set_cache_map.remote(refs["cache_map"])))
            else:
                if self.partitioning is not None and e.name in self.partitioning.node_of:
                    out.append((e, self.partitioning.install(e)))
                resident = e.role == "standby" or self.config.runtime.mode == "time-sharing"
                alpha = self.alpha_resident if resident else self.alpha_full
                peers = self._offers(e.device) if self.peer_exports else None
                self._peers_stale |= bool(self.peer_exports)  # its peers map it next epoch
                key = self._replica_key(e.device)
                replica = None if key is None else fills.get(key)
                out.append((e, e.handle.load_cache.remote(refs["placement"], refs["hotness"],
                                                          alpha, peers,
                                                          holders=refs.get("cache_map"),
                                                          replica=replica)))
                if key is not None and replica is None:  # it fills: the next ones map it
                    fills[key] = [e.handle.export_cache.remote()]
        return out

    def _replica_key(self, device: int) -> Optional[int]:
        """Which buffer of the placement ``device`` caches, when Trainers holding the same ids
        (Rule 1's replicas, one tensor in the placement) can share one copy: logical devices,
        whose caches are host memory, through Ray (shared-memory segments); else None."""
        if (self.placement is None or self.disk_tier or self.services.in_process
                or self.config.cache.peer_tier == "host"
                or any(str(d).startswith("cuda") for d in self.workers.devices)
                or not self.placement.buffers[device].numel()):
            return None
        return id(self.placement.buffers[device])

    def _replica_exports(self) -> dict[int, Any]:
        """Buffer -> the last export of a Trainer holding it (for a Trainer installed again
        after a restart: its replica is mapped, not filled)."""
        out: dict[int, Any] = {}
        for d, x in self.peer_exports.items():
            key = self._replica_key(d)
            if key is not None and x.get("handle") is not None:
                out.setdefault(key, {k: x.get(k) for k in ("handle", "node", "why")})
        return out

    def fill(self, execs: list[_Exec]) -> None:
        """Send the cache to ``execs`` and wait until they hold it (``cache_fill_s``)."""
        import ray

        t0 = time.perf_counter()
        pending = self.install([e for e in execs if e.alive])
        while pending:
            e, ref = pending.pop(0)
            try:
                self.watchdog.get(ref, f"the executor {e.name}")
            except ray.exceptions.RayActorError as err:
                # restarting (e.g. it died at the end of the warm-up epoch): it gets its cache
                # again once back; gone for good: the job goes on without it
                if self.workers.failed(e, err):
                    pending += [(e2, r) for e2, r in self.workers.last_reinstall]
        self.share_peers()
        self.cache_fill_s += time.perf_counter() - t0

    # ------------------------------------------------------------------ the peer tier
    def _peer_rows(self) -> list[int]:
        """Rows the placement gives each device ([] without a shared placement)."""
        if self.placement is None or self.disk_tier:
            return []
        return [int(b.numel()) for b in self.placement.buffers]

    def _trainers(self) -> list[_Exec]:
        return [e for e in self.workers.execs if e.alive and e.role != "sampler"]

    def _offers(self, device: int) -> dict[int, Any]:
        """What the Trainer on ``device`` is offered from the last exports
        (:func:`~fgnn.executors.peers.offers_for`)."""
        from fgnn.executors.peers import offers_for

        names = {e.device: e.name for e in self._trainers()}
        return offers_for(device, self.peer_exports, self._peer_rows(), names)

    def share_peers(self) -> None:
        """The Trainers' peer tier (:mod:`fgnn.executors.peers`): each Trainer exports its
        buffer, then opens those of the others on its Ray node; what each reads from where is
        the report's ``allocation.peer_tier``. With ``cache.peer_tier = "host"`` nothing is
        exchanged: every peer is read from the host copy."""
        from fgnn.executors.peers import host_reads

        rows, trainers = self._peer_rows(), self._trainers()
        self._peers_stale = False
        if sum(1 for r in rows if r) < 2 or len(trainers) < 2:
            return  # no Trainer has a peer to read from
        if self.config.cache.peer_tier == "host":
            self.peer_opened = {e.name: host_reads(rows, e.device, "cache.peer_tier is host")
                                for e in trainers}
            return
        import ray

        exports, opened = {}, {}
        calls = [(e, e.handle.export_cache.remote()) for e in trainers]
        for e, ref in calls:
            try:
                exports[e.device] = {**self.watchdog.get(ref, f"the executor {e.name}"),
                                     "name": e.name}
            except ray.exceptions.RayActorError as err:
                self._peers_stale = True  # offered again at the next epoch's start
                self.workers.failed(e, err)
        self.peer_exports = exports
        calls = [(e, e.handle.open_peers.remote(self._offers(e.device))) for e in trainers
                 if e.device in exports]
        for e, ref in calls:
            try:
                opened[e.name] = self.watchdog.get(ref, f"the executor {e.name}")
            except ray.exceptions.RayActorError as err:
                self._peers_stale = True
                self.workers.failed(e, err)
        self.peer_opened = opened
        for name, r in sorted(opened.items()):
            for d, why in sorted(r["reasons"].items()):
                log.warning("%s reads peer device %d's cached rows from the host copy: %s",
                            name, d, why)

    def refresh_peers(self) -> None:
        """At an epoch's start: offer the buffers again when a Trainer restarted since the
        last exchange (its peers still map its old buffer)."""
        if self._peers_stale:
            self.share_peers()

    def release_peers(self) -> None:
        """After the executors are gone: remove the shared-memory segments they exported on
        this host (a Trainer killed at the job's end cannot)."""
        from fgnn.cache.peer_share import discard

        for x in self.peer_exports.values():
            if x.get("handle") is not None:
                discard(x["handle"])
        self.peer_exports = {}

    def peer_report(self) -> Optional[dict[str, Any]]:
        """The report's ``allocation.peer_tier`` (None when no Trainer has a peer)."""
        from fgnn.executors.peers import peer_report

        if not self.peer_opened:
            return None
        out = peer_report(self.config.cache.peer_tier, self.peer_opened)
        # the buffers the Trainers hold: a replica maps its filler's (one copy a host)
        names = [x["handle"].name for x in self.peer_exports.values()
                 if x.get("handle") is not None]
        out["buffers"] = {"exported": len(names), "distinct": len(set(names))}
        return out

    def adapt_locality(self, stats: EpochStats) -> None:
        """Song & Jiang Algorithm 2 once per epoch: record the scale ``s`` the epoch sampled
        with, feed the epoch's data-loading share ``r`` (``stats.load_ratio``) to the
        controller, and send the new ``s`` to every executor that samples."""
        if not isinstance(self.sampler, LocalityAwareKHop):
            return
        stats.locality_scale = self.sampler.scale
        s = self.sampler.end_epoch(stats.load_ratio)
        self.watchdog.get([e.handle.set_scale.remote(s) for e in self.workers.execs
                           if e.alive and (e.role == "sampler" or self.config.runtime.mode
                                           == "time-sharing")], "a Sampler")

    def disk_layout(self) -> dict[str, Any]:
        """The disk tier of each Trainer (GIDS): the report's ``allocation.disk``."""
        from fgnn.cache.feature_store import num_cached_rows

        d, n = self.config.disk, self.dataset.num_nodes
        row = self.dataset.feature_row_bytes
        return {"io": d.io, "cache": d.cache, "window": d.window, "accumulator": d.accumulator,
                "cache_rows": num_cached_rows(self.alpha_full, n),
                "cpu_buffer_rows": int(d.cpu_buffer * n), "row_bytes": row,
                "file_bytes": n * row, "path": self.services.refs["features"].path}


def _mean_visits(counts: list[Any], epochs: int) -> Optional[torch.Tensor]:
    """The Samplers' visit counts summed and divided by the warm-up epochs, as float32: one
    ``(N,)`` array and the count being added (no stack of every Sampler's)."""
    if not counts:
        return None
    total = torch.as_tensor(counts[0]).to(torch.float32, copy=True)
    for c in counts[1:]:
        total += torch.as_tensor(c)
    return total.div_(epochs)
