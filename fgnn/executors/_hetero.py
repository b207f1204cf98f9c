"""Typed graphs through the factored runtime (internal): node classification on a
:class:`~fgnn.hetero.dataset.HeteroDataset`.

What changes against a homogeneous job, and where:

* **Payloads** -- the topology travels as one CSR payload per relation (:func:`graph_payload`),
  the features as one matrix per node type that has features (:func:`features_payload`).
* **Samplers** -- a :class:`~fgnn.hetero.sampler.HeteroKHop` with per-relation fanouts draws a
  :class:`~fgnn.hetero.sampler.HeteroSample` around each task's seeds of the target type, from
  the same per-task generator as a homogeneous task
  (:func:`~fgnn.executors._common.task_generator`); :func:`fgnn.executors.sampler.pack_sample`
  carries it through the object store. PreSC counts visits per ``(type, id)``.
* **Caches** -- :class:`HeteroCachePlanner`: hotness per node type (PreSC visits from the
  warm-up epochs, degree, random), ONE byte budget across the types
  (:func:`fgnn.hetero.cache.choose_cached_rows`, ``split="global"``: visits per byte), the same
  rows on every Trainer (a standby, whose device also holds the topology, gets the rows of a
  budget smaller by the topology's bytes). The Samplers mark nothing: a Trainer's
  :class:`~fgnn.hetero.cache.HeteroFeatureStore` knows its rows.
* **Trainers** -- extract per type through the store (:func:`extract_typed`: hit/miss counts
  per node type in each task's record, summed per epoch into ``EpochStats.typed_cache``), train
  :class:`~fgnn.models.hetero_sage.HeteroGraphSAGE` and exchange gradients like any job.

Typed link prediction (``task="link"``) is :mod:`fgnn.executors._typed_link`.

What a typed job refuses (one line each, :func:`check_job`): samplers other
than ``khop``, time-sharing mode, hot-first reordering, the disk tier, layer-wise evaluation,
the ``wrpr`` policy and models other than ``sage``.
"""

from __future__ import annotations

import time
from typing import Any, Optional

import numpy as np
import torch

from fgnn.config import JobConfig
from fgnn.data.dataset import Dataset
from fgnn.executors._caches import CachePlanner
from fgnn.executors._typed import features_payload, graph_nbytes, graph_payload
from fgnn.hetero.dataset import HeteroDataset
from fgnn.hetero.graph import HeteroGraph
from fgnn.hetero.sampler import HeteroKHop

__all__ = ["is_hetero", "TypedJobError", "check_job", "check_homogeneous", "build_sampler", "build_model",
           "graph_payload", "features_payload", "degree_hotness", "HeteroCachePlanner",
           "POLICIES"]

#: Cache policies a typed job takes.
POLICIES = ("presc", "degree", "random", "none")


def is_hetero(dataset: Any) -> bool:
    """Whether ``dataset`` is a typed dataset."""
    return isinstance(dataset, HeteroDataset)


class TypedJobError(ValueError):
    """A setting a typed job cannot use: ``field`` (dotted, ``sampler.relation_fanouts``), its
    ``value`` and ``why`` (:class:`fgnn.job.Job` turns it into a ``JobConfigError``, the CLI
    into ``argument --flag: ...``)."""

    def __init__(self, field: str, value: Any, why: str) -> None:
        self.field, self.value, self.why = field, value, why
        super().__init__(f"JobConfig.{field}: {why}")


def check_job(config: JobConfig, dataset: HeteroDataset) -> None:
    """Refuse what a typed job does not support, in one line naming the field.

    Raises:
        TypedJobError: naming the field, e.g. ``JobConfig.model.name: 'gcn' is not supported on
            the typed dataset ...``, or an unknown relation in ``sampler.relation_fanouts``.
    """
    from fgnn.cache.hotness import parse_policy

    c = config
    bad = [("task", c.task, c.task not in ("node", "link"), "(node or link)"),
           ("sampler.kind", c.sampler.kind, c.sampler.kind != "khop",
            "(typed samples are uniform k-hop, per relation)"),
           ("sampler.frontier", c.sampler.frontier, c.sampler.frontier != "all", "(use all)"),
           ("runtime.mode", c.runtime.mode, c.runtime.mode == "time-sharing",
            "(use factored or single)"),
           ("runtime.sample_transport", c.runtime.sample_transport,
            c.runtime.sample_transport == "cuda_ipc", "(use object_store)"),
           ("cache.reorder", c.cache.reorder, c.cache.reorder != "none", ""),
           ("disk.feature_tier", c.disk.feature_tier, c.disk.feature_tier != "memory", ""),
           ("train.eval_mode", c.train.eval_mode, c.train.eval_mode != "sampled", ""),
           ("cache.policy", c.cache.policy,
            c.cache.policy != "none" and parse_policy(c.cache.policy)[0] not in POLICIES,
            f"(typed caches rank by {', '.join(POLICIES)})"),
           ("save_model", c.save_model, c.save_model is not None,
            "(fgnn.load_model rebuilds homogeneous models)"),
           ("model.name", c.model.name, c.model.name != "sage",
            "(typed graphs train the relational GraphSAGE of fgnn.models.hetero_sage: "
            "--model sage)")]
    for field, value, wrong, hint in bad:
        if wrong:
            raise TypedJobError(field, value, f"{value!r} is not supported on the typed dataset "
                                              f"{dataset.name!r} {hint}".rstrip())
    try:
        dataset.resolve_fanouts(c.sampler.fanouts, c.sampler.relation_fanouts)
    except ValueError as exc:
        why = str(exc).split(": ", 1)[-1]
        raise TypedJobError("sampler.relation_fanouts", c.sampler.relation_fanouts,
                            why) from None
    if c.task == "link":
        from fgnn.executors._typed_link import check_link

        check_link(c, dataset)


def check_homogeneous(config: JobConfig, dataset: Dataset) -> None:
    """Per-relation fanouts need relations.

    Raises:
        TypedJobError: ``relation_fanouts`` set for a homogeneous dataset.
    """
    if config.sampler.relation_fanouts:
        raise TypedJobError("sampler.relation_fanouts", config.sampler.relation_fanouts,
                            f"needs a typed dataset; {dataset.name!r} has one relation (use "
                            f"--fanouts)")


def build_sampler(config: JobConfig, dataset: HeteroDataset) -> HeteroKHop:
    """The job's typed sampler: ``sampler.fanouts`` for every relation, replaced for those
    ``sampler.relation_fanouts`` names."""
    return HeteroKHop(dataset.resolve_fanouts(config.sampler.fanouts,
                                              config.sampler.relation_fanouts))


def build_model(config: JobConfig, dataset: HeteroDataset, num_layers: int) -> torch.nn.Module:
    """The relational GraphSAGE of ``config.model`` on ``dataset`` (learned embeddings for the
    types without features)."""
    from fgnn.models.hetero_sage import HeteroGraphSAGE

    return HeteroGraphSAGE(dataset.graph, dataset.num_classes, dataset.target_type,
                           num_layers=num_layers, hidden=config.model.hidden,
                           dropout=config.model.dropout)


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

    def _budgets(self) -> tuple[int, int]:
        """Bytes of cache for a Trainer and for a device that also holds the topology:
        ``cache_ratio`` times all feature bytes, else the device's budget
        (``device_memory_gib``, or 1 GiB on a logical device) less its model and step, capped
        by ``cache_ratio``."""
        from fgnn.hetero.cache import feature_bytes

        cfg, g = self.config.cache, self.dataset.graph
        total = feature_bytes(g)
        cap = cfg.cache_ratio
        if cfg.device_memory_gib is None and cap is not None:
            full = int(cap * total)
        else:
            device = int((cfg.device_memory_gib or 1.0) * 2 ** 30)
            used = (self.step_peak_bytes or 0) + (self._model_bytes or 0)
            full = max(0, min(total if cap is None else int(cap * total), device - used))
        return full, max(0, full - graph_nbytes(g))

    def choose(self, memory_reports: dict[str, Any]) -> None:
        """After the warm-up: the hotness (PreSC: the Samplers' visits), the two budgets, the
        rows under each (:func:`~fgnn.hetero.cache.choose_cached_rows`), then every Trainer
        fills its store."""
        import ray

        from fgnn.hetero.cache import choose_cached_rows, feature_bytes, row_bytes_of

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
        full, resident = self._budgets()
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
        refs["placement"] = ray.put(_numpy(self.cached))
        refs["placement_resident"] = ray.put(_numpy(self.resident_cached))
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

    def typed_allocation(self) -> dict[str, Any]:
        """The report's ``allocation.typed_cache``: the split, the budgets and the rows and
        bytes each node type caches (every Trainer; ``resident``: a standby)."""
        from fgnn.hetero.cache import row_bytes_of

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
