"""Typed graphs through the factored runtime (internal): node classification on a
:class:`~fgnn.data.dataset_hetero.HeteroDataset`.

What changes against a homogeneous job, and where:

* **Payloads** -- the topology travels as one CSR payload per relation (:func:`graph_payload`),
  the features as one matrix per node type that has features (:func:`features_payload`).
* **Samplers** -- a :class:`~fgnn.sampling.hetero.HeteroKHop` with per-relation fanouts draws a
  typed :class:`~fgnn.sampling.base.Sample` around each task's seeds of the target type, from
  the same per-task generator as a homogeneous task
  (:func:`~fgnn.executors.common.task_generator`); :func:`fgnn.executors.transport.pack_sample`
  carries it through the object store. PreSC counts visits per ``(type, id)``.
* **Caches** -- :class:`HeteroCachePlanner`: hotness per node type (PreSC visits from the
  warm-up epochs, degree, random), ONE byte budget across the types
  (:func:`fgnn.cache.hetero.choose_cached_rows`, ``split="global"``: visits per byte), the same
  rows on every Trainer (a standby, whose device also holds the topology, gets the rows of a
  budget smaller by the topology's bytes). The Samplers mark nothing: a Trainer's
  :class:`~fgnn.cache.hetero.HeteroFeatureStore` knows its rows.
* **Trainers** -- extract per type through the store (:func:`extract_typed`: hit/miss counts
  per node type in each task's record, summed per epoch into ``EpochStats.typed_cache``), train
  :class:`~fgnn.models.hetero_sage.HeteroGraphSAGE` and exchange gradients like any job.

Typed link prediction (``task="link"``) is :class:`fgnn.tasks.link_typed.TypedLinkTask`.

What a typed job refuses (one line each, :func:`fgnn.tasks.checks.check_typed`): samplers other
than ``khop``, time-sharing mode, hot-first reordering, the disk tier, layer-wise evaluation,
the ``wrpr`` policy and models other than ``sage``.
"""

from __future__ import annotations

import time
from typing import Any, Optional

import numpy as np
import torch

from fgnn.data.dataset import Dataset
from fgnn.runtime.cache_plan import CachePlanner
from fgnn.executors.typed import graph_nbytes
from fgnn.graph.hetero import HeteroGraph

__all__ = ["degree_hotness", "HeteroCachePlanner"]



# ---------------------------------------------------------------------------- caches
def degree_hotness(graph: HeteroGraph) -> dict[str, torch.Tensor]:
    """Per node type, how many destination rows list each node over all relations (its
    chance to be drawn as a neighbour)."""
    hot = {t: torch.zeros(n, dtype=torch.float32) for t, n in graph.num_nodes.items()}
    for (s, _, _), csr in graph.relations.items():
        hot[s] += torch.bincount(csr.indices.long(), minlength=graph.num_nodes[s]).float()
    return hot


class HeteroCachePlanner(CachePlanner):
    """The cache side of a typed job: per-type hotness, one byte budget, the rows each Trainer
    caches (module docstring). Same interface and run order as :class:`CachePlanner`.

    Attributes (beside the base's):
        cached: node type -> ids every Trainer caches (None before the choice).
        resident_cached: the same for a standby (budget smaller by the topology).
        typed_budget: ``{"full", "resident"}`` bytes.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.partitioning is not None:
            raise ValueError(f"cache.feature_partition={self.config.cache.feature_partition!r} "
                             f"is not supported on a typed dataset (one feature matrix per node "
                             f"type); use replicate")
        self.cached: Optional[dict[str, torch.Tensor]] = None
        self.resident_cached: Optional[dict[str, torch.Tensor]] = None
        self.typed_budget = {"full": 0, "resident": 0}
        self._model_bytes: Optional[int] = None

    def policy_hotness(self, presample: bool = False) -> None:
        """Degree or random hotness per type on the driver (PreSC counts visits instead)."""
        if self.hotness is not None:
            return
        t0 = time.perf_counter()
        g = self.dataset.graph
        if self.policy == "degree":
            self.hotness = degree_hotness(g)
        elif self.policy == "random":
            from fgnn.cache.hotness import random_hotness

            gen = torch.Generator().manual_seed(self.config.train.seed + 7919)
            self.hotness = {t: random_hotness(n, gen) for t, n in g.num_nodes.items()}
        self.hotness_s = time.perf_counter() - t0

    def _budgets(self, reports: list[dict[str, Any]]) -> tuple[int, int]:
        """Bytes of cache for a Trainer and for a device that also holds the topology:
        ``cache_ratio`` times all feature bytes, else the device's budget less its model and
        step, capped by ``cache_ratio``. The budget is a homogeneous job's
        (:meth:`CachePlanner._device_budget`): ``device_memory_gib``, a GPU's share, or on a
        logical device its share of the host's limit (the cgroup's) over the Trainers, at most
        1 GiB."""
        from fgnn.cache.hetero import feature_bytes

        cfg, g = self.config.cache, self.dataset.graph
        total = feature_bytes(g)
        cap = cfg.cache_ratio
        if cfg.device_memory_gib is None and cap is not None:
            full = int(cap * total)
        else:
            device = self._device_budget(reports)
            used = (self.step_peak_bytes or 0) + (self._model_bytes or 0)
            full = max(0, min(total if cap is None else int(cap * total), device - used))
        return full, max(0, full - graph_nbytes(g))

    def choose(self, memory_reports: dict[str, Any]) -> None:
        """After the warm-up: the hotness (PreSC: the Samplers' visits), the two budgets, the
        rows under each (:func:`~fgnn.cache.hetero.choose_cached_rows`), then every Trainer
        fills its store."""
        from fgnn.cache.hetero import choose_cached_rows, feature_bytes, row_bytes_of

        t0 = time.perf_counter()
        reports = list(memory_reports.values())
        self.step_peak_bytes = max((r.get("step_peak_bytes") or 0 for r in reports), default=0)
        self._model_bytes = max((r.get("model_bytes") or 0 for r in reports), default=0)
        if self.policy == "presc":
            counts = [c for c in self.watchdog.get(
                [e.handle.take_visits.remote() for e in self.workers.alive("sampler")],
                "a Sampler") if c is not None]
            self.hotness = ({t: sum(c[t] for c in counts).float() / self.warmup_epochs
                             for t in counts[0]} if counts else None)
        full, resident = self._budgets(reports)
        self.typed_budget = {"full": full, "resident": resident}
        self.budget_bytes = full
        total = max(1, feature_bytes(self.dataset.graph))
        self.alpha_full, self.alpha_resident = full / total, resident / total
        rb = row_bytes_of(self.dataset.graph)
        if self.hotness is not None:
            self.cached = choose_cached_rows(self.hotness, rb, full)
            self.resident_cached = choose_cached_rows(self.hotness, rb, resident)
        self.placement_name = "replicated" if self.cached else "none"
        refs = self.services.refs
        refs["placement"] = self.services.put(_numpy(self.cached))
        refs["placement_resident"] = self.services.put(_numpy(self.resident_cached))
        refs["cache_map"] = None
        self.sizing_s = time.perf_counter() - t0
        self.chosen = True
        self.fill(self.workers.execs)

    def install(self, execs: list[Any]) -> list[tuple[Any, Any]]:
        """Trainers fill their typed stores (a standby the resident rows); Samplers count
        visits during the warm-up and mark nothing after it."""
        if not self.chosen:
            return [(e, e.handle.count_visits.remote()) for e in execs
                    if e.role == "sampler" and self.counting]
        refs = self.services.refs
        return [(e, e.handle.load_cache.remote(
            refs["placement_resident" if e.role == "standby" else "placement"]))
            for e in execs if e.role != "sampler"]

    def reorder(self) -> Dataset:  # noqa: D102 - refused by check_job first
        raise ValueError("cache.reorder='hot-first' is not supported on a typed dataset")

    def extra_allocation(self) -> dict[str, Any]:
        """The report's ``allocation.typed_cache`` (:meth:`typed_allocation`)."""
        return {"typed_cache": self.typed_allocation()}

    def typed_allocation(self) -> dict[str, Any]:
        """The report's ``allocation.typed_cache``: the split, the budgets and the rows and
        bytes each node type caches (every Trainer; ``resident``: a standby)."""
        from fgnn.cache.hetero import row_bytes_of

        rb = row_bytes_of(self.dataset.graph)

        def rows(chosen: Optional[dict[str, torch.Tensor]]) -> dict[str, int]:
            return {t: int((chosen or {}).get(t, torch.empty(0)).numel())
                    for t in self.dataset.graph.node_types}

        full, res = rows(self.cached), rows(self.resident_cached)
        return {"split": "global", "budget_bytes": self.typed_budget["full"],
                "resident_budget_bytes": self.typed_budget["resident"], "row_bytes": rb,
                "cached_rows": full, "resident_cached_rows": res,
                "cached_bytes": {t: full[t] * rb[t] for t in full}}


def _numpy(chosen: Optional[dict[str, torch.Tensor]]) -> Optional[dict[str, np.ndarray]]:
    return None if chosen is None else {t: v.numpy() for t, v in chosen.items()}
