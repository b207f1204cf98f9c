"""Heterogeneous graphs: typed topology, conversions from PyG / DGL, typed k-hop sampling and
the synthetic user-item recommender graph, the typed feature cache, and the typed dataset the
runtime trains (:class:`HeteroDataset`; see docs/own-graph.md and docs/concepts.md)."""

from fgnn.hetero.cache import (HeteroFeatureStore, choose_cached_rows, hetero_presc_hotness,
                               row_bytes_of)
from fgnn.hetero.convert import from_dgl_hetero, from_pyg_hetero
from fgnn.hetero.dataset import HeteroDataset
from fgnn.hetero.graph import EdgeType, HeteroGraph, format_edge_type
from fgnn.hetero.sampler import HeteroKHop
from fgnn.sampling.base import HeteroBlock

__all__ = [
    "EdgeType",
    "HeteroGraph",
    "HeteroDataset",
    "format_edge_type",
    "from_pyg_hetero",
    "from_dgl_hetero",
    "HeteroKHop",
    "HeteroBlock",
    "HeteroFeatureStore",
    "choose_cached_rows",
    "hetero_presc_hotness",
    "row_bytes_of",
]
