"""Typed samples and stores inside the executors (internal; :mod:`fgnn.executors._hetero`
describes the typed job): topology and feature payloads per relation and node type, packing a
:class:`~fgnn.hetero.sampler.HeteroSample` for the object store, PreSC visits per type, and a
Trainer's typed Extract with hit/miss counts per node type."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import torch

from fgnn.executors._common import tensor_from
from fgnn.graph import CSRGraph
from fgnn.hetero.graph import HeteroGraph
from fgnn.hetero.sampler import HeteroBlock, HeteroSample

__all__ = ["graph_payload", "graph_from_payload", "features_payload", "graph_nbytes", "pack",
           "unpack", "new_visits", "count_visits", "extract_typed", "build_store", "sum_typed",
           "is_typed_payload"]


def is_typed_payload(payload: Any) -> bool:
    """Whether a topology payload (or graph) is typed."""
    return isinstance(payload, HeteroGraph) or (isinstance(payload, dict)
                                                and "relations" in payload)


# ---------------------------------------------------------------------------- payloads
def graph_payload(graph: HeteroGraph) -> dict[str, Any]:
    """Numpy arrays of every relation's CSR, the node counts and the target type (no features:
    the Samplers never read them)."""
    from fgnn.executors._common import graph_payload as csr_payload

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
def pack(sample: HeteroSample) -> dict[str, Any]:
    """A typed sample as numpy arrays (``"typed": True``), for the object store."""
    def a(t: torch.Tensor) -> np.ndarray:
        return t.detach().cpu().numpy()

    return {"typed": True, "seed_type": sample.seed_type, "seeds": a(sample.seeds),
            "task_id": sample.task_id,
            "pairs": None if sample.pairs is None else a(sample.pairs),
            "input_nodes": {t: a(v) for t, v in sample.input_nodes.items()},
            "blocks": [({et: (a(s), a(d)) for et, (s, d) in b.edges.items()}, b.num_src,
                        b.num_dst) for b in sample.blocks]}


def unpack(packed: dict[str, Any]) -> HeteroSample:
    """Inverse of :func:`pack` (tensors over the read-only object-store buffers)."""
    t = tensor_from
    blocks = [HeteroBlock({et: (t(s), t(d)) for et, (s, d) in edges.items()}, dict(ns),
                          dict(nd)) for edges, ns, nd in packed["blocks"]]
    return HeteroSample(packed["seed_type"], t(packed["seeds"]), blocks,
                        {k: t(v) for k, v in packed["input_nodes"].items()},
                        int(packed["task_id"]),
                        None if packed.get("pairs") is None else t(packed["pairs"]))


def new_visits(graph: HeteroGraph, device: torch.device) -> dict[str, torch.Tensor]:
    """Zeroed PreSC visit counts per node type."""
    return {t: torch.zeros(n, dtype=torch.int32, device=device)
            for t, n in graph.num_nodes.items()}


def count_visits(visits: dict[str, torch.Tensor], sample: HeteroSample) -> None:
    """Add one visit to every ``(type, id)`` of the sample's inputs (no repeats within one)."""
    for t, ids in sample.input_nodes.items():
        visits[t][ids] += 1


# ---------------------------------------------------------------------------- extraction
def extract_typed(store: Any, sample: HeteroSample) -> tuple[dict[str, torch.Tensor],
                                                             dict[str, Any]]:
    """A Trainer's Extract of a typed sample: the model inputs per type through its
    :class:`~fgnn.hetero.cache.HeteroFeatureStore`, and the task record's counters (``hits``,
    ``misses``, host ``bytes``, the tiers, and ``typed``: node type -> ``[hits, misses]`` for
    every type with features)."""
    x = store.extract(sample)
    stats = store.reset_stats()
    hits = sum(s.hits for s in stats.values())
    misses = sum(s.misses for s in stats.values())
    host = sum(s.bytes["host"] for s in stats.values())
    local = sum(s.bytes["device"] for s in stats.values())
    return x, {"hits": hits, "misses": misses, "bytes": host, "local": hits, "peer": 0,
               "host": misses, "tier_bytes": {"local": local, "peer": 0, "host": host},
               "typed": {t: [int(s.hits), int(s.misses)] for t, s in stats.items()}}


def build_store(host: dict[str, Any], cached: Optional[dict[str, Any]], device: str) -> Any:
    """A Trainer's typed store over ``host`` (node type -> matrix) caching ``cached`` ids."""
    from fgnn.hetero.cache import HeteroFeatureStore

    feats = {t: tensor_from(x) for t, x in host.items()}
    ids = {t: tensor_from(v).long() for t, v in (cached or {}).items()}
    return HeteroFeatureStore(feats, ids, device)


def sum_typed(recs: list[dict[str, Any]]) -> Optional[dict[str, dict[str, int]]]:
    """An epoch's typed counters: node type -> ``{"hits", "misses"}`` summed over its task
    records (None when no record is typed)."""
    out: dict[str, dict[str, int]] = {}
    for r in recs:
        for t, (h, m) in r.get("typed", {}).items():
            d = out.setdefault(t, {"hits": 0, "misses": 0})
            d["hits"] += int(h)
            d["misses"] += int(m)
    return out or None
