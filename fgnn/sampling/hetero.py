"""Typed k-hop neighbourhood sampling with per-relation fanouts (PyG's ``num_neighbors`` dict).

At each hop every node of type ``d`` already in the sample draws ``fanouts[(s, r, d)][hop]``
distinct uniform neighbours of type ``s`` through each relation ``(s, r, d)`` (the uniform
primitive :func:`fgnn.sampling.khop.sample_uniform`), and the new nodes of each type are
deduplicated and numbered after the ones already there by one
:class:`~fgnn.sampling.remap.Remapper` per node type. Local ids are per node type: the seeds take
``0 .. B-1`` of their type, and within each type the nodes a layer aggregates into are a prefix of
those it reads from (the homogeneous block layout of :mod:`fgnn.sampling.base`, per type).
"""

from __future__ import annotations

from typing import Callable, Mapping, Optional, Sequence, Union

import torch

from fgnn.graph.hetero import EdgeType, HeteroGraph, format_edge_type
from fgnn.sampling.base import HeteroBlock, Sample, Sampler
from fgnn.sampling.khop import sample_uniform
from fgnn.sampling.remap import Remapper

__all__ = ["HeteroKHop", "EdgeFilter"]


FanoutSpec = Union[Sequence[int], Mapping[EdgeType, Sequence[int]]]
#: ``drop(relation, nbr, dst)``: ``(Q,)`` bool, True where the drawn message edge ``nbr -> dst``
#: (global ids of the relation's source and destination types) is to be kept; None keeps all.
EdgeFilter = Callable[[EdgeType, torch.Tensor, torch.Tensor], Optional[torch.Tensor]]


class HeteroKHop(Sampler):
    """Uniform typed k-hop sampler without replacement.

    Args:
        fanouts: either one list (the same fanouts for every relation) or a dict relation ->
            list, all of one length (the number of layers), the seeds' hop first. A fanout of 0
            skips the relation at that hop; a relation left out of the dict is never sampled.

    Raises:
        ValueError: on an empty, negative, non-int or ragged fanout spec (naming the relation).
    """

    def __init__(self, fanouts: FanoutSpec) -> None:
        if isinstance(fanouts, Mapping):
            spec = {tuple(et): _check_list(v, format_edge_type(tuple(et)))
                    for et, v in fanouts.items()}
            if not spec:
                raise ValueError("HeteroKHop: fanouts dict is empty")
            lengths = {len(v) for v in spec.values()}
            if len(lengths) != 1:
                got = {format_edge_type(k): list(v) for k, v in spec.items()}
                raise ValueError(f"HeteroKHop: every relation needs the same number of fanouts "
                                 f"(one per layer), got {got}")
            self._per_rel: Optional[dict[EdgeType, tuple[int, ...]]] = spec  # type: ignore
            self._all: Optional[tuple[int, ...]] = None
            self.num_layers = lengths.pop()
        else:
            self._all = _check_list(fanouts, "all relations")
            self._per_rel = None
            self.num_layers = len(self._all)
        self._remap: dict[str, Remapper] = {}

    def fanouts(self, graph: HeteroGraph) -> dict[EdgeType, tuple[int, ...]]:
        """The fanouts per relation of ``graph`` this sampler uses.

        Raises:
            ValueError: when the dict names a relation ``graph`` lacks.
        """
        if self._per_rel is None:
            return {et: self._all for et in graph.edge_types}  # type: ignore[misc]
        for et in self._per_rel:
            if et not in graph.relations:
                raise ValueError(f"HeteroKHop: fanouts name relation {format_edge_type(et)}, "
                                 f"which the graph lacks (relations: "
                                 f"{[format_edge_type(e) for e in graph.edge_types]})")
        return dict(self._per_rel)

    def sample(self, graph: HeteroGraph, seeds: torch.Tensor,  # type: ignore[override]
               generator: Optional[torch.Generator] = None) -> Sample:
        """The :class:`~fgnn.sampling.base.Sampler` contract: ``num_layers`` typed hops around
        ``seeds``, local ids of the graph's target type (:meth:`sample_type`)."""
        return self.sample_type(graph, graph.target_type, seeds, generator)

    def sample_type(self, graph: HeteroGraph, seed_type: str, seeds: torch.Tensor,
                    generator: Optional[torch.Generator] = None) -> Sample:
        """Sample ``num_layers`` typed hops around ``seeds`` (local ids of ``seed_type``).

        Raises:
            ValueError: on an unknown ``seed_type``, bad or repeated seeds, or a fanout dict
                naming a relation the graph lacks.
        """
        if seed_type not in graph.num_nodes:
            raise ValueError(f"HeteroKHop: seed_type {seed_type!r} is not a node type (types: "
                             f"{graph.node_types})")
        return self.sample_seeds(graph, {seed_type: seeds}, generator)

    def sample_seeds(self, graph: HeteroGraph, seeds: Mapping[str, torch.Tensor],
                     generator: Optional[torch.Generator] = None,
                     keep: Optional[EdgeFilter] = None) -> Sample:
        """Sample around seeds of several node types at once (a typed link sample: the
        sources and the destinations of its pairs); each type's seeds take local ids
        ``0 .. B_t-1`` of that type. The sample's ``seed_type`` / ``seeds`` are the first
        entry's.

        Args:
            graph: the typed graph.
            seeds: node type -> ``(B_t,)`` distinct local ids (at least one entry).
            generator: random source.
            keep: an :data:`EdgeFilter` applied to every relation's draw before its new nodes
                are numbered (the exclusion of seed edges, :mod:`fgnn.link.hetero`).

        Raises:
            ValueError: on an unknown node type, bad or repeated seeds, or a fanout dict
                naming a relation the graph lacks.
        """
        for t in seeds:
            if t not in graph.num_nodes:
                raise ValueError(f"HeteroKHop: seed type {t!r} is not a node type (types: "
                                 f"{graph.node_types})")
        fan = self.fanouts(graph)
        given = {t: _check_seeds(v, t, graph.num_nodes[t]) for t, v in seeds.items()}
        rms = {t: self._remap.setdefault(t, Remapper()) for t in graph.node_types}
        started: list[Remapper] = []
        try:
            for t, rm in rms.items():
                first = given.get(t)
                rm.begin(first if first is not None else next(iter(given.values())).new_empty(0),
                         graph.num_nodes[t])
                started.append(rm)
            blocks = [self._hop(graph, fan, rms, hop, generator, keep)
                      for hop in range(self.num_layers)]
            input_nodes = {t: rm.end() for t, rm in rms.items()}
        except BaseException:
            for rm in started:
                rm.abort()
            raise
        blocks.reverse()
        seed_type = next(iter(given))
        return Sample(given[seed_type], blocks, input_nodes, seed_type=seed_type)

    @staticmethod
    def _hop(graph: HeteroGraph, fan: Mapping[EdgeType, Sequence[int]],
             rms: Mapping[str, Remapper], hop: int, generator: Optional[torch.Generator],
             keep: Optional[EdgeFilter]) -> HeteroBlock:
        """One hop: every relation draws into the nodes already sampled of its destination
        type (``keep`` filters the draw), the new sources numbered per type."""
        frontier = {t: rm.nodes() for t, rm in rms.items()}
        edges = {}
        for et, f in fan.items():
            k = f[hop]
            dst_rows = frontier[et[2]]
            if k == 0 or dst_rows.numel() == 0:
                continue
            nbr, row = sample_uniform(graph.relations[et], dst_rows, k, generator)
            mask = None if keep is None else keep(et, nbr, dst_rows.index_select(0, row))
            if mask is not None:
                nbr, row = nbr[mask], row[mask]
            edges[et] = (rms[et[0]].add(nbr), row)
        return HeteroBlock(edges, {t: rm.size for t, rm in rms.items()},
                           {t: int(v.numel()) for t, v in frontier.items()})

    def __repr__(self) -> str:
        if self._per_rel is None:
            return f"HeteroKHop(fanouts={list(self._all or ())})"
        spec = {format_edge_type(k): list(v) for k, v in self._per_rel.items()}
        return f"HeteroKHop(fanouts={spec})"


def _check_list(value: Sequence[int], name: str) -> tuple[int, ...]:
    if isinstance(value, int) or not hasattr(value, "__iter__"):
        raise ValueError(f"HeteroKHop: fanouts of {name} must be a list of ints >= 0, got "
                         f"{value!r}")
    out = tuple(value)
    if not out or any(isinstance(f, bool) or not isinstance(f, int) or f < 0 for f in out):
        raise ValueError(f"HeteroKHop: fanouts of {name} must be a non-empty list of ints >= 0, "
                         f"got {value!r}")
    return out


def _check_seeds(seeds: torch.Tensor, seed_type: str, n: int) -> torch.Tensor:
    if not isinstance(seeds, torch.Tensor) or seeds.dtype not in (torch.int32, torch.int64) \
            or seeds.dim() != 1:
        raise ValueError(f"seeds must be a 1-D int32/int64 tensor, got "
                         f"{getattr(seeds, 'dtype', type(seeds).__name__)} of shape "
                         f"{tuple(getattr(seeds, 'shape', ()))}")
    if seeds.numel() and (int(seeds.min()) < 0 or int(seeds.max()) >= n):
        bad = int(seeds.min()) if int(seeds.min()) < 0 else int(seeds.max())
        raise ValueError(f"seeds holds vertex {bad}, outside num_nodes[{seed_type!r}]={n}")
    return seeds.long()
