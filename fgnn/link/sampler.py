"""Edge-seed sampling: negatives, then a k-hop neighbourhood of the endpoints with the seed
edges excluded, so that no target edge leaks into its own input.

Exclusion is a post-filter on each hop's sampled edges (:class:`ExcludingKHop`): the k-hop
sampler draws as usual, then every drawn edge that is a seed edge (and, with
``exclude="reverse"``, the reverse of one) is dropped. A vertex whose draw held a seed edge
keeps one neighbour fewer, as with GraphBolt's ``exclude_seed_edges``; with fanouts of at least
the degree (the full neighbourhood) the result equals sampling the graph without those edges.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import torch

from fgnn.graph import CSRGraph
from fgnn.link.edges import EdgeSet, check_pairs
from fgnn.link.negatives import uniform_negatives
from fgnn.sampling.base import Sample
from fgnn.sampling.khop import KHop

__all__ = ["EXCLUDE_MODES", "ExcludingKHop", "LinkSample", "LinkNeighborSampler"]

#: ``none``: keep seed edges in the neighbourhood (leaks the target); ``self``: drop the message
#: edge ``src -> dst`` of each seed; ``reverse``: also drop ``dst -> src`` (undirected graphs,
#: where both directions are the same edge).
EXCLUDE_MODES = ("none", "self", "reverse")


class ExcludingKHop(KHop):
    """:class:`~fgnn.sampling.khop.KHop` whose :meth:`sample` can drop given edges from every
    hop's draw (same arguments as ``KHop``)."""

    _exclude: Optional[EdgeSet] = None
    #: ``(N,)`` bool scratch, True at the endpoints of the excluded edges during a call (only
    #: edges between two marked vertices are looked up in the set).
    _mark: Optional[torch.Tensor] = None

    def sample(self, graph: CSRGraph, seeds: torch.Tensor,
               generator: Optional[torch.Generator] = None,
               exclude: Optional[EdgeSet] = None) -> Sample:
        """As :meth:`KHop.sample`; no sampled message edge ``u -> v`` (``u`` in row ``v``) is
        in ``exclude``, whose pairs are ``(u, v)``."""
        if exclude is None or len(exclude) == 0:
            return super().sample(graph, seeds, generator)
        n = graph.num_nodes
        if self._mark is None or self._mark.numel() != n or self._mark.device != graph.device:
            self._mark = torch.zeros(n, dtype=torch.bool, device=graph.device)
        ends = torch.cat([exclude.keys // exclude.num_nodes, exclude.keys % exclude.num_nodes])
        self._exclude = exclude
        self._mark[ends] = True
        try:
            return super().sample(graph, seeds, generator)
        finally:
            self._mark[ends] = False
            self._exclude = None

    def _select(self, graph, rows, hop, generator):  # noqa: D102 (KHop's hook, post-filtered)
        nbr, dst, w = super()._select(graph, rows, hop, generator)
        if self._exclude is not None and nbr.numel():
            v = rows.index_select(0, dst)
            cand = torch.nonzero(self._mark[nbr] & self._mark[v]).squeeze(1)
            drop = cand[self._exclude.contains(nbr[cand], v[cand])]
            if drop.numel():
                keep = torch.ones(nbr.numel(), dtype=torch.bool, device=nbr.device)
                keep[drop] = False
                nbr, dst = nbr[keep], dst[keep]
                w = None if w is None else w[keep]
        return nbr, dst, w


@dataclass
class LinkSample:
    """One mini-batch of link prediction.

    Attributes:
        sample: the node sample around every scored endpoint; its seeds are those endpoints.
        src, dst: ``(P + K,)`` int64 local ids (positions in ``sample.seeds``) of the scored
            pairs, the ``P`` positives first, then the ``K`` negatives.
        label: ``(P + K,)`` float, 1 for positives, 0 for negatives.
        num_pos: P.
        neg_pos_index: ``(K,)`` the positive each negative was drawn for.
    """

    sample: Sample
    src: torch.Tensor
    dst: torch.Tensor
    label: torch.Tensor
    num_pos: int
    neg_pos_index: torch.Tensor


class LinkNeighborSampler:
    """Edge seeds -> :class:`LinkSample` (PyG's ``LinkNeighborLoader``, GraphBolt's uniform
    negative sampler with ``exclude_seed_edges``).

    Args:
        fanouts: neighbours per hop, seeds' hop first (as :class:`KHop`).
        neg_ratio: uniform negatives per positive (the destination replaced), >= 1.
        exclude: one of :data:`EXCLUDE_MODES`.
        frontier: as :class:`KHop`.

    Raises:
        ValueError: on a bad ``exclude``, ``neg_ratio`` or ``fanouts``.
    """

    def __init__(self, fanouts: Sequence[int], neg_ratio: int = 1, exclude: str = "reverse",
                 frontier: str = "all") -> None:
        if exclude not in EXCLUDE_MODES:
            raise ValueError(f"exclude must be one of {', '.join(EXCLUDE_MODES)}, got "
                             f"{exclude!r}")
        if neg_ratio < 1:
            raise ValueError(f"neg_ratio must be >= 1, got {neg_ratio!r}")
        self.khop = ExcludingKHop(fanouts, frontier=frontier)
        self.num_layers = self.khop.num_layers
        self.neg_ratio, self.exclude = int(neg_ratio), exclude

    def __repr__(self) -> str:
        return (f"LinkNeighborSampler(fanouts={list(self.khop.fanouts)}, "
                f"neg_ratio={self.neg_ratio}, exclude={self.exclude!r})")

    def sample(self, graph: CSRGraph, pos: torch.Tensor,
               generator: Optional[torch.Generator] = None,
               known: Optional[EdgeSet] = None) -> LinkSample:
        """Negatives for ``pos``, then the neighbourhood of every endpoint.

        Args:
            graph: the message graph.
            pos: ``(2, P)`` positive edges ``[src, dst]``.
            generator: random source of negatives and neighbours.
            known: edges a negative must not be (``None``: unfiltered uniform negatives).

        Raises:
            ValueError: on malformed ``pos``.
        """
        n = graph.num_nodes
        pos = check_pairs(pos, n, "positive edges")
        neg = uniform_negatives(pos[0], n, self.neg_ratio, generator, known)
        src = torch.cat([pos[0], neg.src])
        dst = torch.cat([pos[1], neg.dst])
        seeds = torch.unique(torch.cat([src, dst]))          # sorted
        excluded = None
        if self.exclude != "none":
            excluded = EdgeSet(pos, n, undirected=self.exclude == "reverse")
        sample = self.khop.sample(graph, seeds, generator, exclude=excluded)
        label = torch.cat([torch.ones(pos.shape[1]), torch.zeros(neg.src.numel())])
        return LinkSample(sample=sample, src=torch.searchsorted(seeds, src),
                          dst=torch.searchsorted(seeds, dst), label=label,
                          num_pos=int(pos.shape[1]), neg_pos_index=neg.pos_index)
