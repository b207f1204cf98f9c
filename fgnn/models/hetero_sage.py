"""Relational GraphSAGE on typed samples: one SAGE layer per relation, summed over the relations
into each destination type (PyG's ``to_hetero(GraphSAGE, metadata, aggr="sum")``).

For a destination node ``v`` of type ``d``::

    h_v' = sum_{r = (s, ., d)} ( W_self^r h_v + W_neigh^r mean_{u in N_r(v)} h_u + b^r )

A node type without features enters through a learned ``nn.Embedding`` indexed by its ids
(``x[t]`` is then the ``(M_t,)`` int64 ``input_nodes[t]``). Aggregation uses the native
``index_add_`` helpers of :mod:`fgnn.models.aggregate`; no torch-scatter is needed.
"""

from __future__ import annotations

from typing import Mapping, Optional, Sequence

import torch
from torch import nn

from fgnn.graph.hetero import EdgeType, HeteroGraph, format_edge_type
from fgnn.sampling.base import HeteroBlock, Sample
from fgnn.models.aggregate import Activation, resolve_activation, weighted_mean

__all__ = ["HeteroSAGEConv", "HeteroGraphSAGE", "hetero_inputs"]


def _key(et: EdgeType) -> str:
    return "__".join(et)  # ModuleDict keys must be strings without dots


class HeteroSAGEConv(nn.Module):
    """One relational SAGE-mean layer.

    Args:
        edge_types: the relations it passes messages over.
        in_dims: node type -> input size.
        out_dim: output size of every destination type.

    Shapes:
        ``h[t]`` ``(S_t, in_dims[t])`` with ``S_t >= block.num_src[t]`` -> ``out[d]``
        ``(block.num_dst[d], out_dim)`` for every destination type ``d`` of ``edge_types``.
    """

    def __init__(self, edge_types: Sequence[EdgeType], in_dims: Mapping[str, int],
                 out_dim: int) -> None:
        super().__init__()
        self.edge_types = [tuple(et) for et in edge_types]
        self.out_dim = out_dim
        for et in self.edge_types:
            for t in (et[0], et[2]):
                if t not in in_dims:
                    raise ValueError(f"HeteroSAGEConv: relation {format_edge_type(et)} needs "
                                     f"in_dims[{t!r}]")
        self.lin_self = nn.ModuleDict({_key(et): nn.Linear(in_dims[et[2]], out_dim)
                                       for et in self.edge_types})
        self.lin_neigh = nn.ModuleDict({_key(et): nn.Linear(in_dims[et[0]], out_dim, bias=False)
                                        for et in self.edge_types})

    def forward(self, block: HeteroBlock, h: Mapping[str, torch.Tensor]
                ) -> dict[str, torch.Tensor]:
        out: dict[str, torch.Tensor] = {}
        for et in self.edge_types:
            s, _, d = et
            nd = block.num_dst.get(d, 0)
            if nd == 0:
                continue
            if s not in h or d not in h:
                raise ValueError(f"HeteroSAGEConv: relation {format_edge_type(et)} needs input "
                                 f"rows of {s!r} and {d!r}, got types {sorted(h)}")
            hs = h[s][:block.num_src.get(s, 0)]
            src, dst = block.edges.get(et, (hs.new_empty(0, dtype=torch.int64),) * 2)
            neigh = weighted_mean(hs, src, dst, nd)
            y = self.lin_self[_key(et)](h[d][:nd]) + self.lin_neigh[_key(et)](neigh)
            out[d] = y if d not in out else out[d] + y
        return out

    def extra_repr(self) -> str:
        rels = ", ".join(format_edge_type(et) for et in self.edge_types)
        return f"out_dim={self.out_dim}, relations=[{rels}], aggr='mean', group='sum'"


class HeteroGraphSAGE(nn.Module):
    """Relational GraphSAGE with learned embeddings for feature-less types and a class head on
    the target type.

    Args:
        graph: supplies node types, relations, feature sizes and node counts (embedding tables).
        num_classes: classes C of the target type.
        target_type: the type whose embeddings the head maps to logits.
        num_layers: layers = blocks per sample.
        hidden: hidden size (also the learned embedding size).
        dropout: dropout between layers.
        activation: non-linearity between layers.

    Shapes:
        ``x`` as :func:`hetero_inputs` builds it -> ``(B, C)`` logits of the seeds.
    """

    def __init__(self, graph: HeteroGraph, num_classes: int, target_type: str,
                 num_layers: int = 2, hidden: int = 64, dropout: float = 0.5,
                 activation: Activation = "relu") -> None:
        super().__init__()
        if target_type not in graph.num_nodes:
            raise ValueError(f"HeteroGraphSAGE: target_type {target_type!r} is not a node type "
                             f"(types: {graph.node_types})")
        for name, v in (("num_classes", num_classes), ("num_layers", num_layers),
                        ("hidden", hidden)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"HeteroGraphSAGE: {name} must be a positive int, got {v!r}")
        self.target_type, self.num_layers = target_type, num_layers
        self.embed = nn.ModuleDict({t: nn.Embedding(graph.num_nodes[t], hidden)
                                    for t in graph.node_types if graph.feat_dim(t) is None})
        dims = {t: graph.feat_dim(t) or hidden for t in graph.node_types}
        self.layers = nn.ModuleList()
        for _ in range(num_layers):
            self.layers.append(HeteroSAGEConv(graph.edge_types, dims, hidden))
            dims = {t: hidden for t in graph.node_types}
        self.head = nn.Linear(hidden, num_classes)
        self.dropout = nn.Dropout(dropout)
        self.activation = resolve_activation(activation)

    def forward(self, blocks: Sequence[HeteroBlock], x: Mapping[str, torch.Tensor]
                ) -> torch.Tensor:
        h = self.encode(blocks, x)
        if self.target_type not in h:
            raise ValueError(f"HeteroGraphSAGE: no relation reaches target type "
                             f"{self.target_type!r} in the last layer")
        return self.head(h[self.target_type])

    def encode(self, blocks: Sequence[HeteroBlock], x: Mapping[str, torch.Tensor]
               ) -> dict[str, torch.Tensor]:
        """The last layer's outputs before the head: node type -> ``(num_dst[t], hidden)``
        rows of the last block's destination nodes (the seeds of each type)."""
        if len(blocks) != self.num_layers:
            raise ValueError(f"HeteroGraphSAGE: got {len(blocks)} blocks but num_layers="
                             f"{self.num_layers}")
        h = {t: (self.embed[t](v) if t in self.embed else v) for t, v in x.items()}
        for i, (layer, block) in enumerate(zip(self.layers, blocks)):
            if i > 0:
                h = {t: self.dropout(self.activation(v)) for t, v in h.items()}
            h = layer(block, h)
        return h


def hetero_inputs(graph: HeteroGraph, sample: Sample,
                  device: Optional[torch.device] = None) -> dict[str, torch.Tensor]:
    """The ``x`` of :class:`HeteroGraphSAGE` for ``sample``: feature rows of
    ``input_nodes[t]`` for a type with features, the ids themselves for one without."""
    out = {}
    for t, ids in sample.input_nodes.items():
        x = graph.features.get(t)
        out[t] = ids if x is None else x.index_select(0, ids)
        if device is not None:
            out[t] = out[t].to(device)
    return out
