"""Typed samples and stores inside the executors (internal; :mod:`fgnn.runtime.cache_plan_typed`
describes the typed job): topology and feature payloads per relation and node type, packing a
typed payloads for the object store, PreSC visits per type, and a
Trainer's typed Extract with hit/miss counts per node type."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import torch

from fgnn.executors.task_record import TaskRecord
from fgnn.executors.transport import tensor_from
from fgnn.graph import CSRGraph
from fgnn.graph.hetero import HeteroGraph
from fgnn.sampling.base import Sample

__all__ = ["graph_payload", "graph_from_payload", "features_payload", "graph_nbytes",
           "new_visits", "extract_typed", "build_store", "sum_typed"]


# ---------------------------------------------------------------------------- payloads
def graph_payload(graph: HeteroGraph) -> dict[str, Any]:
    """Numpy arrays of every relation's CSR, the node counts and the target type (no features:
    the Samplers never read them)."""
    from fgnn.executors.common import graph_payload as csr_payload

    return {"num_nodes": dict(graph.num_nodes), "target_type": graph.target_type,
            "relations": {et: csr_payload(c) for et, c in graph.relations.items()}}


def graph_from_payload(payload: Any, device: torch.device | str = "cpu") -> HeteroGraph:
    """The typed topology of :func:`graph_payload` on ``device``."""
    if isinstance(payload, HeteroGraph):
        rels = payload.relations
    else:
        rels = {}
        for et, p in payload["relations"].items():
            w = p.get("weights")
            rels[et] = CSRGraph._trusted(tensor_from(p["indptr"]), tensor_from(p["indices"]),
                                         None if w is None else tensor_from(w))
    meta = payload if isinstance(payload, dict) else {"num_nodes": payload.num_nodes,
                                                      "target_type": payload.target_type}
    return HeteroGraph(meta["num_nodes"], {et: c.to(device) for et, c in rels.items()},
                       target_type=meta["target_type"])


def features_payload(dataset: Any) -> dict[str, np.ndarray]:
    """Node type -> ``(N_t, F_t)`` numpy features, for the types that have features."""
    return {t: (x.cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x))
            for t, x in dataset.graph.features.items()}


def graph_nbytes(graph: HeteroGraph) -> int:
    """Bytes of every relation's CSR."""
    return sum(c.nbytes() for c in graph.relations.values())


# ---------------------------------------------------------------------------- samples
def new_visits(graph: HeteroGraph, device: torch.device) -> dict[str, torch.Tensor]:
    """Zeroed PreSC visit counts per node type."""
    return {t: torch.zeros(n, dtype=torch.int32, device=device)
            for t, n in graph.num_nodes.items()}


# ---------------------------------------------------------------------------- extraction
def extract_typed(store: Any, sample: Sample) -> tuple[dict[str, torch.Tensor],
                                                             dict[str, Any]]:
    """A Trainer's Extract of a typed sample: the model inputs per type through its
    :class:`~fgnn.cache.hetero.HeteroFeatureStore`, and the counters of its
    :class:`~fgnn.executors.task_record.TaskRecord` (``hits``, ``misses``, ``host_bytes``, the
    tiers, and ``typed``: node type -> ``[hits, misses]`` for every type with features)."""
    x = store.extract(sample)
    stats = store.reset_stats()
    hits = sum(s.hits for s in stats.values())
    misses = sum(s.misses for s in stats.values())
    host = sum(s.bytes["host"] for s in stats.values())
    local = sum(s.bytes["device"] for s in stats.values())
    return x, {"hits": hits, "misses": misses, "host_bytes": host,
               "tier_rows": {"local": hits, "peer": 0, "host": misses},
               "tier_bytes": {"local": local, "peer": 0, "host": host},
               "typed": {t: [int(s.hits), int(s.misses)] for t, s in stats.items()}}


def build_store(host: dict[str, Any], cached: Optional[dict[str, Any]], device: str) -> Any:
    """A Trainer's typed store over ``host`` (node type -> matrix) caching ``cached`` ids."""
    from fgnn.cache.hetero import HeteroFeatureStore

    feats = {t: tensor_from(x) for t, x in host.items()}
    ids = {t: tensor_from(v).long() for t, v in (cached or {}).items()}
    return HeteroFeatureStore(feats, ids, device)


def sum_typed(recs: list[TaskRecord]) -> Optional[dict[str, dict[str, int]]]:
    """An epoch's typed counters: node type -> ``{"hits", "misses"}`` summed over its task
    records (None when no record is typed)."""
    out: dict[str, dict[str, int]] = {}
    for r in recs:
        for t, (h, m) in (r.typed or {}).items():
            d = out.setdefault(t, {"hits": 0, "misses": 0})
            d["hits"] += int(h)
            d["misses"] += int(m)
    return out or None
