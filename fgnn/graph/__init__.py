"""Graph topology, the bottom layer every fgnn component shares: the homogeneous CSR graph
(:class:`CSRGraph`) and the typed graph with one CSR per relation (:class:`HeteroGraph`)."""

from fgnn.graph.csr import CSRGraph, TopologyFiles
from fgnn.graph.hetero import EdgeType, HeteroGraph, format_edge_type

__all__ = ["CSRGraph", "TopologyFiles", "EdgeType", "HeteroGraph", "format_edge_type"]
