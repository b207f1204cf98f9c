"""Heterogeneous graphs: the typed link-prediction and recommendation tasks, and one import for
the typed pieces that live with their homogeneous twins.

The typed graph is :mod:`fgnn.graph.hetero`, the typed dataset and loaders are in :mod:`fgnn.data`
(:mod:`~fgnn.data.dataset_hetero`, :mod:`~fgnn.data.convert_hetero`,
:mod:`~fgnn.data.synthetic_hetero`, :mod:`~fgnn.data.useritem`), the typed samplers in
:mod:`fgnn.sampling` (:mod:`~fgnn.sampling.hetero`, :mod:`~fgnn.sampling.walks_hetero`) and the
typed feature cache in :mod:`fgnn.cache.hetero`; this package re-exports their public names
(see docs/own-graph.md and docs/architecture.md). Its own modules are the typed link split
(:mod:`fgnn.hetero.link`), the typed link task (:mod:`fgnn.hetero.link_task`) and the PinSAGE
recommender's task (:mod:`fgnn.hetero.recsys`).
"""

from fgnn.cache.hetero import HeteroFeatureStore, choose_cached_rows, hetero_presc_hotness
from fgnn.data.convert_hetero import from_dgl_hetero, from_pyg_hetero
from fgnn.data.dataset_hetero import HeteroDataset
from fgnn.graph.hetero import EdgeType, HeteroGraph, format_edge_type, row_bytes_of
from fgnn.sampling.base import HeteroBlock
from fgnn.sampling.hetero import HeteroKHop

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
