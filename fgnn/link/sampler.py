"""Edge-seed sampling: negatives, then a k-hop neighbourhood of the endpoints with the seed
edges excluded, so that no target edge leaks into its own input.

Exclusion runs inside the neighbour draw where it can (:mod:`fgnn.link._fused`, switched by
:data:`FUSED_DRAW`): a row ``v`` with ``x`` excluded edges draws ``min(fanout, deg(v) - x)``
neighbours uniformly without replacement among its other neighbours, from a private copy of
the graph's slots in which the excluded slots are replaced, for one sample, by the row's free
tail neighbours; nothing is compacted after the draw, a hop costs no operation more than
without exclusion, and the per-batch set-up is one sort and about 30 small operations over the
batch's ``2P`` edges (no host sync). With fanouts of at least the degree (the full
neighbourhood) the result equals sampling the graph without those edges. The excluded edges'
CSR slots come from one ``searchsorted`` per batch, or once per set of training edges with
:meth:`LinkNeighborSampler.slots` (``fit_link`` and the runtime's link task do this).

Weighted or with-replacement draws, and graphs with a repeated ``(row, neighbour)`` pair or
unsorted rows, keep the post-filter of :mod:`fgnn.link._exclude` (:class:`ExcludingKHop`):
the k-hop sampler draws as usual, then every drawn edge that is a seed edge (and, with
``exclude="reverse"``, the reverse of one) is dropped, so a vertex whose draw held a seed edge
keeps one neighbour fewer, as with GraphBolt's ``exclude_seed_edges``; the neighbours it
keeps are a uniform draw among its other neighbours. Its look-up is a fixed handful of tensor
operations per hop: when every excluded row is a seed (always so for
:class:`LinkNeighborSampler`), a dense ``(seed row, seed neighbour)`` table of the batch after
the remap, or a hash table of ``row * N + neighbour`` keys beyond
:data:`~fgnn.link._exclude.TABLE_ROWS` seeds or when an excluded neighbour is off the seeds;
with ``frontier="new"`` only the seeds' own hop is looked at. Exclusion sets with rows outside
the seeds fall back to checking the sampled edges between endpoints of excluded edges against
the set's sorted keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import torch

from fgnn.graph import CSRGraph
from fgnn.link._exclude import TABLE_ROWS, HashPlan, SeedRowPlan, SeedTable, TablePlan
from fgnn.link._fused import FusedRows, sample_fused
from fgnn.link.edges import EdgeSet, check_pairs
from fgnn.link.negatives import uniform_negatives
from fgnn.sampling.checks import check_seeds
from fgnn.sampling.base import Sample
from fgnn.sampling.khop import KHop
from fgnn.sampling.remap import EdgeFilter, sample_layers

__all__ = ["EXCLUDE_MODES", "FUSED_DRAW", "ExcludingKHop", "LinkSample", "LinkNeighborSampler"]

#: Exclude inside the draw (:mod:`fgnn.link._fused`) when the sampler and graph allow it
#: (uniform draws without replacement; sorted rows without repeated pairs); False: always the
#: post-filter look-ups of :mod:`fgnn.link._exclude` (kept for the other cases).
FUSED_DRAW = True

#: ``none``: keep seed edges in the neighbourhood (leaks the target); ``self``: drop the message
#: edge ``src -> dst`` of each seed; ``reverse``: also drop ``dst -> src`` (undirected graphs,
#: where both directions are the same edge).
EXCLUDE_MODES = ("none", "self", "reverse")


class ExcludingKHop(KHop):
    """:class:`~fgnn.sampling.khop.KHop` whose :meth:`sample` can leave given edges out of
    every hop's draw (same arguments as ``KHop``; see the module docstring for the two
    ways)."""

    #: the fast path (module docstring): excluded edges keyed by seed row, during a call.
    _plan: Optional[SeedRowPlan] = None
    _table: Optional[SeedTable] = None
    _exclude: Optional[EdgeSet] = None
    #: ``(N,)`` bool scratch of the fallback, True at the endpoints of the excluded edges during
    #: a call (only edges between two marked vertices are looked up in the set).
    _mark: Optional[torch.Tensor] = None
    #: the in-draw exclusion's copy of the graph's slots (:mod:`fgnn.link._fused`), and
    #: whether it is on during a call.
    _fused: Optional[FusedRows] = None
    _fused_on = False

    def __getstate__(self) -> dict:
        """Pickle without the O(N) and O(E) scratch arrays (rebuilt on first use)."""
        state = dict(self.__dict__)
        for k in ("_table", "_mark", "_fused", "_fused_on"):
            state.pop(k, None)
        return state

    def _fused_rows(self, graph: CSRGraph) -> Optional[FusedRows]:
        """The in-draw exclusion's state for ``graph``, or None where it does not apply."""
        if not FUSED_DRAW or self.weighted or self.replace:
            return None
        if self._fused is None or not self._fused.is_for(graph):
            self._fused = FusedRows(graph)
        return self._fused if self._fused.ok else None

    def sample_excluding(self, graph: CSRGraph, seeds: torch.Tensor, pos: torch.Tensor,
                         both: bool, generator: Optional[torch.Generator] = None,
                         slots: Optional[torch.Tensor] = None) -> Optional[Sample]:
        """As :meth:`KHop.sample`, with the message edges ``pos[0] -> pos[1]`` (and their
        reverses when ``both``) out of every row's draw (each row draws among its other
        neighbours); None where the in-draw exclusion does not apply (see
        :data:`FUSED_DRAW`)."""
        fused = self._fused_rows(graph)
        if fused is None:
            return None
        seeds = check_seeds(graph, seeds, values=False)
        fused.begin(fused.slots_of(pos.long(), both) if slots is None else slots)
        self._fused_on = True
        try:
            return sample_layers(self._remap, seeds, graph.num_nodes, self.num_layers,
                                 lambda frontier, hop: self._select(graph, frontier, hop,
                                                                    generator),
                                 self.frontier)
        finally:
            self._fused_on = False
            fused.end()

    def sample(self, graph: CSRGraph, seeds: torch.Tensor,
               generator: Optional[torch.Generator] = None,
               exclude: Optional[EdgeSet] = None) -> Sample:
        """As :meth:`KHop.sample`; no sampled message edge ``u -> v`` (``u`` in row ``v``) is
        in ``exclude``, whose pairs are ``(u, v)``."""
        if exclude is None or len(exclude) == 0:
            return super().sample(graph, seeds, generator)
        n = exclude.num_nodes
        u, v = exclude.keys // n, exclude.keys % n
        fused = self.sample_excluding(graph, seeds, torch.stack([u, v]), False, generator)
        if fused is not None:
            return fused
        srt, order = seeds.long().sort()
        last = max(srt.numel() - 1, 0)
        at_v = torch.searchsorted(srt, v).clamp_(max=last)
        at_u = torch.searchsorted(srt, u).clamp_(max=last)
        if srt.numel() == 0 or not bool((srt[at_v] == v).all()):  # a row off the seeds
            return self._sample_marked(graph, seeds, generator, exclude)
        rows = order[at_v]
        if bool((srt[at_u] == u).all()):
            return self._sample_seed_pairs(graph, seeds.long(), generator, rows, order[at_u])
        return self._sample_planned(graph, seeds, generator,
                                    HashPlan(torch.add(u, rows, alpha=graph.num_nodes),
                                             seeds.numel(), graph.num_nodes))

    def _sample_seed_pairs(self, graph: CSRGraph, seeds: torch.Tensor,
                           generator: Optional[torch.Generator], rows: torch.Tensor,
                           nbrs: torch.Tensor, both: bool = False) -> Sample:
        """Exclude the message edges ``seeds[nbrs[i]] -> seeds[rows[i]]`` (local ids), and
        their reverses when ``both``."""
        b = int(seeds.numel())
        if b <= TABLE_ROWS:
            if self._table is None:
                self._table = SeedTable()
            self._table.ready(b, graph.device)
            plan = TablePlan(self._table, b, rows, nbrs, both)
            try:
                seeds = check_seeds(graph, seeds, values=False)
                self.check_graph(graph)
                return sample_layers(self._remap, seeds, graph.num_nodes, self.num_layers,
                                     lambda frontier, hop: self._select(graph, frontier, hop,
                                                                        generator),
                                     self.frontier, self._seed_filter(plan))
            finally:
                plan.close()
        if both:
            rows, nbrs = torch.cat([rows, nbrs]), torch.cat([nbrs, rows])
        return self._sample_planned(graph, seeds, generator,
                                    HashPlan(torch.add(seeds.index_select(0, nbrs), rows,
                                                       alpha=graph.num_nodes),
                                             b, graph.num_nodes))

    def _seed_filter(self, plan: SeedRowPlan) -> EdgeFilter:
        """``sample_layers``'s ``edge_filter``: ``plan`` on the frontiers holding the seeds
        (all with ``frontier="all"``, the first with ``"new"``)."""
        def run(src: torch.Tensor, dst: torch.Tensor, w: Optional[torch.Tensor], layer: int,
                num_frontier: int) -> tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]:
            if layer == 0 or self.frontier == "all":
                return plan.drop(src, dst, w, num_frontier)
            return src, dst, w
        return run

    def _sample_planned(self, graph: CSRGraph, seeds: torch.Tensor,
                        generator: Optional[torch.Generator], plan: SeedRowPlan) -> Sample:
        self._plan = plan
        try:
            return super().sample(graph, seeds, generator)
        finally:
            self._plan = None
            plan.close()

    def _sample_marked(self, graph: CSRGraph, seeds: torch.Tensor,
                       generator: Optional[torch.Generator], exclude: EdgeSet) -> Sample:
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
        if self._fused_on:
            nbr, dst = sample_fused(self._fused, rows, self.fanouts[hop], generator)
            return nbr, dst, None
        nbr, dst, w = super()._select(graph, rows, hop, generator)
        if self._plan is not None:
            if hop == 0 or self.frontier == "all":  # frontiers holding the seeds, first
                return self._plan.drop(nbr, dst, w, rows.numel())
            return nbr, dst, w
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

    def slots(self, graph: CSRGraph, pos: torch.Tensor) -> Optional[torch.Tensor]:
        """The CSR slots in ``graph`` of the message edges :meth:`sample` excludes for the
        seed edges ``pos`` ``(2, P)``: ``(P, 2)`` int64 (``(P, 1)`` with ``exclude="self"``), row
        ``i`` for ``pos[:, i]`` (None when nothing is excluded in the draw). Seed edges are
        fixed training edges: computing their slots once and passing a batch's rows to
        :meth:`sample` saves a search per batch."""
        fused = None if self.exclude == "none" else self.khop._fused_rows(graph)
        if fused is None:
            return None
        return fused.slots_of(check_pairs(pos, graph.num_nodes, "positive edges"),
                              self.exclude == "reverse")

    def sample(self, graph: CSRGraph, pos: torch.Tensor,
               generator: Optional[torch.Generator] = None,
               known: Optional[EdgeSet] = None,
               slots: Optional[torch.Tensor] = None) -> LinkSample:
        """Negatives for ``pos``, then the neighbourhood of every endpoint.

        Args:
            graph: the message graph.
            pos: ``(2, P)`` positive edges ``[src, dst]``.
            generator: random source of negatives and neighbours.
            known: edges a negative must not be (``None``: unfiltered uniform negatives).
            slots: the rows of :meth:`slots` for ``pos`` in ``graph`` (computed here when
                omitted).

        Raises:
            ValueError: on malformed ``pos``.
        """
        n = graph.num_nodes
        pos = check_pairs(pos, n, "positive edges")
        neg = uniform_negatives(pos[0], n, self.neg_ratio, generator, known)
        src = torch.cat([pos[0], neg.src])
        dst = torch.cat([pos[1], neg.dst])
        seeds = torch.unique(torch.cat([src, dst]))          # sorted
        loc_src, loc_dst = torch.searchsorted(seeds, src), torch.searchsorted(seeds, dst)
        p = int(pos.shape[1])
        if self.exclude == "none":
            sample = self.khop.sample(graph, seeds, generator)
        else:  # message edge src -> dst: row dst; its reverse: row src
            both = self.exclude == "reverse"
            sample = self.khop.sample_excluding(graph, seeds, pos, both, generator, slots)
            if sample is None:
                sample = self.khop._sample_seed_pairs(graph, seeds, generator, loc_dst[:p],
                                                      loc_src[:p], both)
        label = torch.cat([torch.ones(p), torch.zeros(neg.src.numel())])
        return LinkSample(sample=sample, src=loc_src, dst=loc_dst, label=label,
                          num_pos=p, neg_pos_index=neg.pos_index)
