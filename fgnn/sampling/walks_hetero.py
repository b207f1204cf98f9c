"""Item-to-item random walks through the other node type (item -> user -> item), PinSAGE's
neighbourhoods on a bipartite graph (Ying et al., KDD 2018, §3.2 and §3.3).

Walks run on the merged topology of the two relations (:meth:`HeteroGraph.to_homogeneous`) with
the uniform walker of :func:`fgnn.sampling.random_walk.random_walks`; every other step lands on
an item. The visits to the other type are dropped, and the ``top_k`` most visited items become a
vertex's neighbours with their visit counts as weights (:func:`random_walk_topk`, importance
pooling). Item ids are local to the item type.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from fgnn.graph.hetero import EdgeType, HeteroGraph, format_edge_type
from fgnn.sampling.base import Sample
from fgnn.sampling.random_walk import random_walk_topk, random_walks
from fgnn.sampling.remap import Remapper, sample_layers

__all__ = ["ItemWalkSampler"]


class ItemWalkSampler:
    """PinSAGE neighbourhoods of one node type through another.

    Args:
        graph: the bipartite typed graph.
        to_other: relation from the other type into the item type's neighbours, e.g.
            ``("item", "interacted_by", "user")`` (rows = users, listing their items).
        to_item: the reverse relation, e.g. ``("user", "interacts", "item")``.
        num_walks: walks per vertex and layer.
        hops: item-to-item hops per walk (each is two steps: item -> other -> item).
        top_k: most visited items kept as neighbours.
        num_layers: blocks per sample.

    Raises:
        ValueError: when the relations are not two opposite relations of ``graph``, or an
            argument is not a positive int.
    """

    def __init__(self, graph: HeteroGraph, to_other: EdgeType, to_item: EdgeType,
                 num_walks: int = 20, hops: int = 2, top_k: int = 10,
                 num_layers: int = 2) -> None:
        to_other, to_item = tuple(to_other), tuple(to_item)
        for et in (to_other, to_item):
            if et not in graph.relations:
                raise ValueError(f"ItemWalkSampler: the graph has no relation "
                                 f"{format_edge_type(et)}")
        if to_other[0] != to_item[2] or to_other[2] != to_item[0] or to_other[0] == to_other[2]:
            raise ValueError(f"ItemWalkSampler: {format_edge_type(to_other)} and "
                             f"{format_edge_type(to_item)} must link two types both ways")
        for name, v in (("num_walks", num_walks), ("hops", hops), ("top_k", top_k),
                        ("num_layers", num_layers)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"ItemWalkSampler: {name} must be a positive int, got {v!r}")
        self.item_type = to_other[0]
        self.num_items = graph.num_nodes[self.item_type]
        self.homo, offsets = graph.to_homogeneous([to_other, to_item])
        self.offset = offsets[self.item_type]
        self.num_walks, self.hops, self.top_k, self.num_layers = num_walks, hops, top_k, num_layers
        self._remap = Remapper()

    @classmethod
    def on_topology(cls, homo: Any, num_items: int, offset: int = 0, num_walks: int = 20,
                    hops: int = 2, top_k: int = 10, num_layers: int = 2,
                    item_type: str = "item") -> "ItemWalkSampler":
        """The same walks on an already merged topology: ``homo`` (a
        :class:`~fgnn.graph.CSRGraph`) holds both directions of every interaction, the items
        are vertices ``[offset, offset + num_items)`` and every other vertex is of the other
        type (the layout of :mod:`fgnn.data.useritem`: items first, ``offset`` 0).

        Raises:
            ValueError: when an argument is not a positive int or the items do not fit.
        """
        for name, v in (("num_walks", num_walks), ("hops", hops), ("top_k", top_k),
                        ("num_layers", num_layers), ("num_items", num_items)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"ItemWalkSampler: {name} must be a positive int, got {v!r}")
        if offset < 0 or offset + num_items > homo.num_nodes:
            raise ValueError(f"ItemWalkSampler: items [{offset}, {offset + num_items}) do not "
                             f"fit a topology of {homo.num_nodes} vertices")
        self = cls.__new__(cls)
        self.item_type, self.num_items, self.homo, self.offset = item_type, num_items, homo, offset
        self.num_walks, self.hops, self.top_k, self.num_layers = num_walks, hops, top_k, num_layers
        self._remap = Remapper()
        return self

    def walk_counts(self, items: torch.Tensor, top_k: int, num_walks: Optional[int] = None,
                    generator: Optional[torch.Generator] = None
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The ``top_k`` items most visited from each of ``items`` (the start excluded).

        Returns:
            ``(neighbours, row_index, counts)`` as :func:`random_walk_topk`, item-local ids,
            ordered by row, then count descending.
        """
        visits = random_walks(self.homo, items + self.offset, num_walks or self.num_walks,
                              2 * self.hops, generator)
        local = visits - self.offset
        local = torch.where((visits >= 0) & (local >= 0) & (local < self.num_items), local,
                            torch.full_like(local, -1))
        return random_walk_topk(local, items, top_k)

    def sample(self, seeds: torch.Tensor, generator: Optional[torch.Generator] = None) -> Sample:
        """``num_layers`` random-walk blocks around ``seeds`` (distinct item ids); block weights
        are visit counts.

        Raises:
            ValueError: on seeds outside the item type or repeated.
        """
        if seeds.dim() != 1 or seeds.dtype not in (torch.int32, torch.int64):
            raise ValueError(f"seeds must be a 1-D int tensor, got {seeds.dtype} of shape "
                             f"{tuple(seeds.shape)}")
        seeds = seeds.long()
        if seeds.numel() and (int(seeds.min()) < 0 or int(seeds.max()) >= self.num_items):
            raise ValueError(f"seeds must lie in [0, {self.num_items}) of type "
                             f"{self.item_type!r}")

        def select(frontier: torch.Tensor, layer: int):
            return self.walk_counts(frontier, self.top_k, generator=generator)

        return sample_layers(self._remap, seeds, self.num_items, self.num_layers, select)

    def __repr__(self) -> str:
        return (f"ItemWalkSampler(item_type={self.item_type!r}, num_walks={self.num_walks}, "
                f"hops={self.hops}, top_k={self.top_k}, num_layers={self.num_layers})")
