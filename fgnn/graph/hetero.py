"""Heterogeneous graphs: node types, relations ``(src_type, rel, dst_type)`` and a CSR per relation.

Ids are local to each node type (``0 .. num_nodes[t] - 1``), as in PyG's ``HeteroData`` and DGL
heterographs. Relation ``(s, r, d)`` is stored as a :class:`~fgnn.graph.CSRGraph` whose row ``v``
(a node of type ``d``) lists the nodes of type ``s`` it aggregates from, the same convention as
the homogeneous graph. A ``CSRGraph`` is square, so a relation's CSR spans
``max(num_nodes[s], num_nodes[d])`` ids: rows past ``num_nodes[d]`` are empty and no index
reaches ``num_nodes[s]``; every homogeneous sampling primitive then runs on it unchanged.

:meth:`HeteroGraph.to_homogeneous` gives the documented global-id scheme: node types in
``node_types`` order, type ``t`` at offset ``offsets[t]`` (global id = offset + local id).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

import numpy as np
import torch

from fgnn.graph.arrays import as_cpu_tensor
from fgnn.graph.csr import CSRGraph

__all__ = ["EdgeType", "HeteroGraph", "format_edge_type", "row_bytes_of"]

#: A relation ``(src_type, rel, dst_type)``, PyG's ``EdgeType``.
EdgeType = tuple[str, str, str]


def format_edge_type(et: EdgeType) -> str:
    """``"user-rates->item"``, how errors name a relation."""
    return f"{et[0]}-{et[1]}->{et[2]}"


@dataclass
class HeteroGraph:
    """A typed graph: node counts, a CSR per relation, features per node type, optional labels.

    Attributes:
        num_nodes: node type -> number of nodes (ids local to the type).
        relations: relation ``(s, r, d)`` -> CSR over ``max(num_nodes[s], num_nodes[d])`` ids,
            row = destination node of type ``d``, indices = source nodes of type ``s``.
        features: node type -> ``(num_nodes[t], F_t)`` float features; a type missing here has
            none (models give it learned embeddings).
        labels: optional ``(num_nodes[target_type],)`` int64 class ids of the target type.
        target_type: the node type ``labels`` belong to (required with labels).
        meta: free-form provenance.

    Raises:
        ValueError: one line naming the type, relation or field that is wrong.
    """

    num_nodes: dict[str, int]
    relations: dict[EdgeType, CSRGraph]
    features: dict[str, torch.Tensor] = field(default_factory=dict)
    labels: Optional[torch.Tensor] = None
    target_type: Optional[str] = None
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.num_nodes = dict(self.num_nodes)
        self.relations = {tuple(k): v for k, v in self.relations.items()}  # type: ignore[misc]
        self.features = dict(self.features)
        self.validate()

    # ------------------------------------------------------------------ properties
    @property
    def node_types(self) -> list[str]:
        """Node types in insertion order."""
        return list(self.num_nodes)

    @property
    def edge_types(self) -> list[EdgeType]:
        """Relations in insertion order."""
        return list(self.relations)

    def num_edges(self, et: EdgeType) -> int:
        """Edges of relation ``et``."""
        return self._rel(et).num_edges

    def edge_index(self, et: EdgeType) -> torch.Tensor:
        """``(2, E)`` int64 ``[source, destination]`` local ids of relation ``et``."""
        return self._rel(et).edge_index()

    def feat_dim(self, ntype: str) -> Optional[int]:
        """Feature size of ``ntype``, ``None`` for a type without features."""
        x = self.features.get(ntype)
        return None if x is None else int(x.shape[1])

    def _rel(self, et: EdgeType) -> CSRGraph:
        et = tuple(et)  # type: ignore[assignment]
        if et not in self.relations:
            raise ValueError(f"HeteroGraph has no relation {et!r}; relations: "
                             f"{[format_edge_type(e) for e in self.relations]}")
        return self.relations[et]

    # ------------------------------------------------------------------ validation
    def validate(self) -> None:
        """Check types, shapes and ranges; raise ``ValueError`` naming the type/relation/field."""
        if not self.num_nodes:
            raise ValueError("HeteroGraph.num_nodes is empty: at least one node type is needed")
        for t, n in self.num_nodes.items():
            if not isinstance(t, str) or not t:
                raise ValueError(f"HeteroGraph: node type names must be non-empty strings, got "
                                 f"{t!r}")
            if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
                raise ValueError(f"HeteroGraph.num_nodes[{t!r}] must be a non-negative int, got "
                                 f"{n!r}")
            self.num_nodes[t] = int(n)
        for et, csr in self.relations.items():
            self._check_relation(et, csr)
        for t, x in self.features.items():
            if t not in self.num_nodes:
                raise ValueError(f"HeteroGraph.features[{t!r}]: unknown node type (types: "
                                 f"{self.node_types})")
            if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dim() != 2:
                raise ValueError(f"HeteroGraph.features[{t!r}] must be a 2-D float tensor, got "
                                 f"{getattr(x, 'dtype', type(x).__name__)} of shape "
                                 f"{tuple(getattr(x, 'shape', ()))}")
            if x.shape[0] != self.num_nodes[t]:
                raise ValueError(f"HeteroGraph.features[{t!r}] has {x.shape[0]} rows, expected "
                                 f"num_nodes[{t!r}]={self.num_nodes[t]}")
        self._check_labels()

    def _check_relation(self, et: Any, csr: Any) -> None:
        if (not isinstance(et, tuple) or len(et) != 3
                or not all(isinstance(p, str) and p for p in et)):
            raise ValueError(f"HeteroGraph: a relation must be a (src_type, rel, dst_type) tuple "
                             f"of non-empty strings, got {et!r}")
        name = format_edge_type(et)
        for end, t in (("source", et[0]), ("destination", et[2])):
            if t not in self.num_nodes:
                raise ValueError(f"HeteroGraph relation {name}: unknown {end} node type {t!r} "
                                 f"(types: {self.node_types})")
        if not isinstance(csr, CSRGraph):
            raise ValueError(f"HeteroGraph relation {name} must be a CSRGraph, got "
                             f"{type(csr).__name__}")
        ns, nd = self.num_nodes[et[0]], self.num_nodes[et[2]]
        if csr.num_nodes != max(ns, nd):
            raise ValueError(f"HeteroGraph relation {name}: CSR spans {csr.num_nodes} ids, "
                             f"expected max(num_nodes[{et[0]!r}], num_nodes[{et[2]!r}])="
                             f"{max(ns, nd)}")
        if int(csr.indptr[nd]) != csr.num_edges:
            raise ValueError(f"HeteroGraph relation {name}: rows past num_nodes[{et[2]!r}]={nd} "
                             f"hold edges (a destination id outside the type)")
        if csr.num_edges and int(csr.indices.max()) >= ns:
            raise ValueError(f"HeteroGraph relation {name}: source id {int(csr.indices.max())} "
                             f"is outside num_nodes[{et[0]!r}]={ns}")

    def _check_labels(self) -> None:
        if self.labels is None:
            if self.target_type is not None and self.target_type not in self.num_nodes:
                raise ValueError(f"HeteroGraph.target_type {self.target_type!r} is not a node "
                                 f"type (types: {self.node_types})")
            return
        if self.target_type not in self.num_nodes:
            raise ValueError(f"HeteroGraph.labels need target_type naming a node type, got "
                             f"{self.target_type!r} (types: {self.node_types})")
        y = self.labels
        n = self.num_nodes[self.target_type]
        if not isinstance(y, torch.Tensor) or y.dtype != torch.int64 or y.shape != (n,):
            raise ValueError(f"HeteroGraph.labels must be an int64 tensor of shape ({n},) (one "
                             f"per {self.target_type!r} node), got "
                             f"{getattr(y, 'dtype', type(y).__name__)} of shape "
                             f"{tuple(getattr(y, 'shape', ()))}")
        if y.numel() and int(y.min()) < 0:
            raise ValueError(f"HeteroGraph.labels holds a negative class id {int(y.min())}")

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_edge_index(cls, num_nodes: Mapping[str, int],
                        edge_index: Mapping[EdgeType, Any],
                        features: Optional[Mapping[str, Any]] = None,
                        labels: Optional[Any] = None, target_type: Optional[str] = None,
                        meta: Optional[dict[str, Any]] = None) -> "HeteroGraph":
        """Build from ``(2, E)`` ``[source, destination]`` local ids per relation (PyG's
        ``edge_index_dict``).

        Args:
            num_nodes: node type -> count.
            edge_index: relation -> ``(2, E)`` integer tensor or array.
            features: node type -> ``(N_t, F_t)`` features (float64 / integer are cast to
                float32); types left out have none.
            labels: ``(N_target,)`` or ``(N_target, 1)`` class ids of ``target_type``.
            target_type: node type of ``labels``.
            meta: provenance.

        Raises:
            ValueError: one line naming the relation or type on malformed input.
        """
        nn_ = {}
        for t, n in num_nodes.items():
            if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
                raise ValueError(f"num_nodes[{t!r}] must be a non-negative int, got {n!r}")
            nn_[t] = int(n)
        rels: dict[EdgeType, CSRGraph] = {}
        for et, ei in edge_index.items():
            et = tuple(et)
            if len(et) != 3 or any(p not in nn_ for p in (et[0], et[2])):
                raise ValueError(f"edge_index key {et!r} must be (src_type, rel, dst_type) with "
                                 f"known node types {list(nn_)}")
            name = format_edge_type(et)
            ei = as_cpu_tensor(ei, f"relation {name} edge_index")
            ns, nd = nn_[et[0]], nn_[et[2]]
            if ei.dim() != 2 or ei.shape[0] != 2:
                raise ValueError(f"relation {name}: edge_index must have shape (2, E), got "
                                 f"{tuple(ei.shape)}")
            if ei.is_floating_point() or ei.dtype == torch.bool:
                raise ValueError(f"relation {name}: edge_index must hold integers, got dtype "
                                 f"{ei.dtype}")
            ei = ei.long()
            for row, t, n in ((0, et[0], ns), (1, et[2], nd)):
                if ei.shape[1] and (int(ei[row].min()) < 0 or int(ei[row].max()) >= n):
                    bad = int(ei[row].min()) if int(ei[row].min()) < 0 else int(ei[row].max())
                    raise ValueError(f"relation {name}: edge_index[{row}] holds id {bad}, "
                                     f"outside num_nodes[{t!r}]={n}")
            size = max(ns, nd)
            rels[et] = CSRGraph.from_edge_index(
                ei, num_nodes=size, index_dtype=torch.int32 if size < 2 ** 31 else torch.int64)
        feats = {t: _as_float(x, f"features[{t!r}]") for t, x in (features or {}).items()
                 if x is not None}
        y = None
        if labels is not None:
            y = as_cpu_tensor(labels, "labels")
            if y.dim() == 2 and y.shape[1] == 1:
                y = y[:, 0]
            if y.is_floating_point() or y.dtype == torch.bool:
                raise ValueError(f"labels must hold integer class ids, got dtype {y.dtype}")
            y = y.long()
        return cls(nn_, rels, feats, y, target_type, dict(meta or {}))

    # ------------------------------------------------------------------ views
    def to_homogeneous(self, edge_types: Optional[list[EdgeType]] = None
                       ) -> tuple[CSRGraph, dict[str, int]]:
        """One CSR over all node types, global id = ``offsets[type] + local id``.

        Args:
            edge_types: relations to include (default all).

        Returns:
            ``(graph, offsets)``: the merged topology (row = destination) and the offset of each
            node type, in ``node_types`` order.
        """
        offsets, total = {}, 0
        for t in self.node_types:
            offsets[t] = total
            total += self.num_nodes[t]
        parts = []
        for et in (self.edge_types if edge_types is None else [tuple(e) for e in edge_types]):
            ei = self.edge_index(et)  # type: ignore[arg-type]
            parts.append(torch.stack([ei[0] + offsets[et[0]], ei[1] + offsets[et[2]]]))
        ei = torch.cat(parts, 1) if parts else torch.empty(2, 0, dtype=torch.int64)
        return CSRGraph.from_edge_index(
            ei, num_nodes=total,
            index_dtype=torch.int32 if total < 2 ** 31 else torch.int64), offsets

    def __repr__(self) -> str:
        rels = ", ".join(f"{format_edge_type(e)}: {c.num_edges}" for e, c in
                         self.relations.items())
        return f"HeteroGraph(num_nodes={self.num_nodes}, relations={{{rels}}})"


def row_bytes_of(graph: HeteroGraph) -> dict[str, int]:
    """Bytes of one feature row per node type (0 for a type without features)."""
    out = {}
    for t in graph.node_types:
        x = graph.features.get(t)
        out[t] = 0 if x is None else int(x.shape[1]) * x.element_size()
    return out


def _as_float(value: Any, what: str) -> torch.Tensor:
    x = as_cpu_tensor(value, what)
    if x.dtype == torch.bool or x.is_complex():
        raise ValueError(f"{what} must be numeric, got dtype {x.dtype}")
    if x.dtype not in (torch.float32, torch.float16):
        x = x.to(torch.float32)
    return x.contiguous()
