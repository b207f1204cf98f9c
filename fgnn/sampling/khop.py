"""k-hop random / weighted neighbourhood sampling (FGNN §2, Fig. 7 ``class KHOP``, §7.1).

Per hop, every vertex of the frontier draws ``fanout`` distinct neighbours from its CSR row (a
vertex with fewer neighbours keeps all of them), then the new vertices are deduplicated and
renumbered (:class:`~fgnn.sampling.remap.Remapper`). The frontier of the next hop is every vertex
of the sample so far (the destination vertices of a layer are a prefix of its sources, see
:mod:`fgnn.sampling.base`), as in GNNLab and DGL blocks.

Uniform selection uses a vectorised form of Floyd's variant of Fisher-Yates sampling: O(fanout)
random numbers and O(fanout log fanout) work per vertex whatever its degree, the balanced-work
property FGNN §7.3(1) credits its Fisher-Yates variant with over reservoir sampling (whose work
grows with the degree). Weighted selection (probability proportional to the edge weight,
without replacement, i.e. successive sampling) runs by vectorised rejection against each row's
largest weight, O(max_rounds · fanout) work per vertex, with an exact Efraimidis–Spirakis
exponential-key fallback for the rare rows the rejection proposals leave short.

Launches and host syncs (what bounds a sampler on a GPU) do not grow with the fanout: no Python
loop runs over it, and a uniform hop syncs twice (its edge count, the remap's new vertices).
:class:`fgnn.monitor.dispatch_count.DispatchCounter` counts both; ``bench/sampling.py`` reports
them per sample.

Throughput (``bench/sampling.py``) is limited by random reads: each sampled edge costs a few
gathers (``indptr``, ``indices``, the remap scratch array) and O(fanout) vector operations.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from fgnn.config import FRONTIERS
from fgnn.graph import CSRGraph
from fgnn.sampling._util import check_fanouts, check_seeds, floyd_subsets, rand, segment_arange
from fgnn.sampling.base import Sample, Sampler
from fgnn.sampling.remap import Remapper, sample_layers

__all__ = ["KHop", "row_max_weights", "sample_uniform", "sample_weighted"]


def _row_bounds(graph: CSRGraph, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    start = graph.indptr.index_select(0, rows)
    deg = graph.indptr.index_select(0, rows + 1) - start
    return start, deg


def sample_uniform(graph: CSRGraph, rows: torch.Tensor, fanout: int,
                   generator: Optional[torch.Generator] = None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw ``min(fanout, deg)`` distinct neighbours of each vertex in ``rows`` uniformly.

    Floyd's algorithm for every row and step at once (:func:`~fgnn.sampling._util.
    floyd_subsets`): no Python loop over ``fanout``, one host sync (the number of sampled
    edges), O(fanout log fanout) work per row whatever its degree. Rows with
    ``deg <= fanout`` keep all their neighbours, in CSR order.

    Args:
        graph: topology (on the device of ``rows``).
        rows: ``(R,)`` int64 vertex ids.
        fanout: neighbours per vertex, > 0.
        generator: random source on the graph's device.

    Returns:
        ``(neighbours, row_index)``: ``(E,)`` int64 global neighbour ids and ``(E,)`` int64
        positions in ``rows`` of the vertex that sampled them (in row order; each row's edges
        are contiguous).
    """
    start, deg = _row_bounds(graph, rows)
    row_index, off = floyd_subsets(deg, deg.clamp(max=fanout), generator)
    pos = start.index_select(0, row_index) + off
    return graph.indices.index_select(0, pos).long(), row_index


def row_max_weights(graph: CSRGraph) -> torch.Tensor:
    """``(N,)`` largest edge weight per row (0 for an empty row), for :func:`sample_weighted`."""
    if graph.weights is None:
        raise ValueError("row_max_weights needs edge weights, got graph.weights=None")
    return torch.segment_reduce(graph.weights, "max", lengths=graph.degrees(), initial=0.0)


def sample_weighted(graph: CSRGraph, rows: torch.Tensor, fanout: int,
                    generator: Optional[torch.Generator] = None,
                    row_max: Optional[torch.Tensor] = None, max_rounds: int = 4
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw ``fanout`` neighbours per row with probability proportional to the edge weights.

    Successive sampling without replacement: each draw picks an unpicked neighbour ``j`` with
    probability ``w_j / Σ_unpicked w``. It runs by rejection, vectorised over the rows and the
    proposals (no Python loop over ``fanout``): propose a uniform offset, accept it with
    probability ``w_j / max_w(row)`` unless already picked; an accepted proposal follows exactly
    the successive-sampling law, and the work per row is O(max_rounds · fanout) whatever its
    degree (the balanced work FGNN §7.3(1) asks of a sampler). Rows still short after
    ``max_rounds · fanout`` proposals (skewed
    weights, or fewer positive weights than ``fanout``) finish exactly with Efraimidis-Spirakis
    keys ``E_j / w_j`` over their unpicked neighbours (the continuation of the same process).
    Edges of weight 0 are never drawn; a row with at most ``fanout`` neighbours keeps all of its
    positive-weight ones.

    Args:
        graph, rows, fanout, generator: as :func:`sample_uniform`.
        row_max: ``(N,)`` per-row maximum weight (:func:`row_max_weights`); computed (O(E))
            when omitted, so callers sampling repeatedly should cache it.
        max_rounds: rejection proposals per row, in multiples of ``fanout``, before the exact
            fallback.

    Returns:
        As :func:`sample_uniform`.

    Raises:
        ValueError: if ``graph`` has no edge weights.
    """
    if graph.weights is None:
        raise ValueError("weighted sampling needs edge weights, got graph.weights=None")
    dev = rows.device
    empty = torch.empty(0, dtype=torch.int64, device=dev)
    if graph.num_edges == 0 or rows.numel() == 0:
        return empty, empty
    if row_max is None:
        row_max = row_max_weights(graph)
    start, deg = _row_bounds(graph, rows)
    k = min(fanout, int(deg.max()))  # picks per row; a fanout above every degree takes all
    if k == 0:
        return empty, empty
    last = graph.num_edges - 1
    cols = torch.arange(k, device=dev)
    # rows with deg <= fanout keep every positive-weight edge
    pos_s = (start.unsqueeze(1) + cols).clamp_(max=last)
    keep_s = (cols < deg.unsqueeze(1)) & (graph.weights.index_select(0, pos_s.view(-1))
                                          .view_as(pos_s) > 0)
    big = deg > fanout
    picks = torch.where(keep_s & ~big.unsqueeze(1), cols.expand_as(pos_s), -1)
    if max_rounds > 0:  # all rows' proposals at once; only the big rows' picks are kept
        picks = torch.where(big.unsqueeze(1),
                            _weighted_rejection(graph, start, deg, row_max.index_select(0, rows),
                                                k, max_rounds, generator), picks)
    return _weighted_finish(graph, start, deg, picks, big, k, generator)


def _weighted_finish(graph: CSRGraph, start: torch.Tensor, deg: torch.Tensor,
                     picks: torch.Tensor, big: torch.Tensor, k: int,
                     generator: Optional[torch.Generator]) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`sample_weighted`'s result from its ``(R, k)`` picks (``-1`` unused): the big
    rows the rejection proposals left short finish with :func:`_weighted_keys`, then every pick
    becomes a ``(neighbour, row_index)`` pair.
    """
    npick = (picks >= 0).sum(1)
    short = big & (npick < k)
    n_short, short_edges = torch.stack([short.sum(), torch.where(short, deg, 0).sum()]).tolist()
    if n_short:  # exact continuation with exponential keys over the unpicked offsets
        extra_row, extra_off = _weighted_keys(graph, start, deg, picks, npick,
                                              torch.nonzero(short).squeeze(1), short_edges, k,
                                              generator)
    else:
        extra_row = extra_off = torch.empty(0, dtype=torch.int64, device=start.device)
    flat = torch.nonzero(picks.view(-1) >= 0).squeeze(1)
    row_index = torch.cat([torch.div(flat, k, rounding_mode="floor"), extra_row])
    pos = start.index_select(0, row_index) + torch.cat([picks.view(-1).index_select(0, flat),
                                                        extra_off])
    return graph.indices.index_select(0, pos).long(), row_index


def _weighted_rejection(graph: CSRGraph, start: torch.Tensor, deg: torch.Tensor,
                        wmax: torch.Tensor, k: int, rounds: int,
                        generator: Optional[torch.Generator]) -> torch.Tensor:
    """``(R, k)`` offsets picked by ``rounds * k`` rejection proposals per row, ``-1`` unused.

    Proposal ``c`` of a row (uniform offset ``j``) is accepted with probability
    ``w_j / max_w`` unless an earlier accepted proposal of the row drew ``j``; the first ``k``
    accepted proposals are the picks, in order: the successive-sampling law, decided for every
    proposal at once (one sort per row finds the repeats).
    """
    dev = start.device
    n = rounds * k
    d = deg.clamp(min=1).unsqueeze(1)
    u = rand((2, deg.numel(), n), generator, dev)
    prop = torch.minimum((u[0] * d).long(), d - 1)
    w = graph.weights.index_select(
        0, (prop + start.unsqueeze(1)).clamp_(max=graph.num_edges - 1).view(-1)).view_as(prop)
    accept = (u[1] * wmax.double().unsqueeze(1) < w.double()) & (deg > 0).unsqueeze(1)
    col = torch.arange(n, device=dev)
    val = torch.where(accept, prop, -1 - col)  # rejected proposals never repeat anything
    srt, order = torch.sort(val, dim=1, stable=True)
    repeat = torch.zeros_like(accept)
    repeat.scatter_(1, order[:, 1:], srt[:, 1:] == srt[:, :-1])
    fresh = accept & ~repeat
    slot = torch.cumsum(fresh, 1) - 1
    slot = torch.where(fresh & (slot < k), slot, k)  # k = the discarded column
    picks = torch.full((deg.numel(), k + 1), -1, dtype=torch.int64, device=dev)
    picks.scatter_(1, slot, torch.where(slot < k, prop, -1))
    return picks[:, :k]


def _weighted_keys(graph: CSRGraph, start: torch.Tensor, deg: torch.Tensor,
                   picks: torch.Tensor, npick: torch.Tensor, active: torch.Tensor,
                   num_edges: int, k: int, generator: Optional[torch.Generator]
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """The rest of the picks of rows ``active`` by Efraimidis-Spirakis keys ``E_j / w_j``
    over their unpicked offsets (the continuation of successive sampling).

    Returns:
        ``(row, offset)`` of the extra picks (rows as positions in ``start``).
    """
    dev = start.device
    a_deg = deg.index_select(0, active)
    row_f, off_f = segment_arange(a_deg, num_edges)
    w = graph.weights.index_select(
        0, start.index_select(0, active).index_select(0, row_f) + off_f).double()
    taken = (picks.index_select(0, active).index_select(0, row_f)
             == off_f.unsqueeze(1)).any(1)
    key = torch.empty_like(w).exponential_(generator=generator).div_(w)
    excluded = torch.isinf(key) | taken
    key = torch.where(excluded, torch.ones_like(key), key / (1.0 + key))
    order = torch.argsort(key.add_(row_f.double()))  # by row, then key
    row_o = row_f.index_select(0, order)
    seg = torch.cumsum(a_deg, 0) - a_deg
    rank = torch.arange(order.numel(), device=dev) - seg.index_select(0, row_o)
    need = (k - npick.index_select(0, active)).index_select(0, row_o)
    sel = order.index_select(0, torch.nonzero(
        (rank < need) & ~excluded.index_select(0, order)).squeeze(1))
    return active.index_select(0, row_f.index_select(0, sel)), off_f.index_select(0, sel)


class KHop(Sampler):
    """k-hop random (or edge-weighted) neighbourhood sampler (FGNN Fig. 7, §7.1).

    Args:
        fanouts: neighbours per vertex per hop in the paper's order, the seeds' hop first
            (GCN: ``(15, 10, 5)``, GraphSAGE: ``(10, 25)``).
        weighted: draw proportionally to ``graph.weights`` (without replacement).
        replace: draw with replacement (repeated neighbours become repeated edges). Only the
            uniform sampler supports it.
        frontier: which vertices draw neighbours at each hop
            (:func:`~fgnn.sampling.remap.sample_layers`): ``"all"`` vertices of the sample so
            far (DGL blocks, GNNLab; the default), or only the ``"new"`` ones of the previous
            hop, each layer aggregating over every edge sampled up to its hop (PyG's
            ``NeighborLoader``).

    Example::

        sample = KHop([15, 10, 5]).sample(graph, seeds, torch.Generator().manual_seed(0))
        sample.blocks[0]  # input layer: the last hop sampled

    Raises:
        ValueError: on empty or non-positive ``fanouts``, ``weighted`` with ``replace``, or
            another ``frontier``.
    """

    def __init__(self, fanouts: Sequence[int], weighted: bool = False,
                 replace: bool = False, frontier: str = "all") -> None:
        self.fanouts = check_fanouts(fanouts)
        if frontier not in FRONTIERS:
            raise ValueError(f"KHop: frontier must be one of {', '.join(FRONTIERS)}, got "
                             f"{frontier!r}")
        self.frontier = frontier
        if weighted and replace:
            raise ValueError("KHop: weighted=True with replace=True is not supported, got "
                             "replace=True")
        self.weighted = bool(weighted)
        self.replace = bool(replace)
        self.num_layers = len(self.fanouts)
        self._remap = Remapper()
        self._row_max: Optional[torch.Tensor] = None
        self._row_max_of: Optional[torch.Tensor] = None

    def __repr__(self) -> str:
        extra = "" if self.frontier == "all" else f", frontier={self.frontier!r}"
        return (f"{type(self).__name__}(fanouts={list(self.fanouts)}, weighted={self.weighted}, "
                f"replace={self.replace}{extra})")

    def _select(self, graph: CSRGraph, rows: torch.Tensor, hop: int,
                generator: Optional[torch.Generator]
                ) -> tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]:
        """Neighbours of ``rows`` for ``hop``: ``(global ids, row positions, edge weights)``."""
        k = self.fanouts[hop]
        if self.weighted:
            if self._row_max_of is not graph.weights:  # cache per weight tensor
                self._row_max, self._row_max_of = row_max_weights(graph), graph.weights
            nbr, dst = sample_weighted(graph, rows, k, generator, self._row_max)
        elif self.replace:
            nbr, dst = _sample_with_replacement(graph, rows, k, generator)
        else:
            nbr, dst = sample_uniform(graph, rows, k, generator)
        return nbr, dst, None

    def check_graph(self, graph: CSRGraph) -> None:
        """Raise ``ValueError`` if ``graph`` cannot be sampled by this sampler."""
        if self.weighted and graph.weights is None:
            raise ValueError(f"{self!r} needs edge weights, got a graph with weights=None")

    def sample(self, graph: CSRGraph, seeds: torch.Tensor,
               generator: Optional[torch.Generator] = None) -> Sample:
        """Sample ``len(fanouts)`` hops around ``seeds``; see :class:`~fgnn.sampling.base.Sampler`.

        Raises:
            ValueError: on bad ``seeds`` (dtype, shape, device, range, repeats) or a graph
                without weights for a weighted sampler.
        """
        seeds = check_seeds(graph, seeds, values=False)  # range, repeats: in the first hop's sync
        self.check_graph(graph)
        return sample_layers(self._remap, seeds, graph.num_nodes, self.num_layers,
                             lambda frontier, hop: self._select(graph, frontier, hop, generator),
                             self.frontier)


def _sample_with_replacement(graph: CSRGraph, rows: torch.Tensor, fanout: int,
                             generator: Optional[torch.Generator]
                             ) -> tuple[torch.Tensor, torch.Tensor]:
    """``fanout`` independent uniform draws per row (rows without neighbours draw nothing)."""
    dev = rows.device
    start, deg = _row_bounds(graph, rows)
    off = (rand((rows.numel(), fanout), generator, dev) * deg.unsqueeze(1)).long()
    torch.minimum(off, (deg - 1).clamp(min=0).unsqueeze(1), out=off)
    keep = torch.nonzero((deg > 0).repeat_interleave(fanout)).squeeze(1)  # one host sync
    pos = (start.unsqueeze(1) + off).view(-1).index_select(0, keep)
    return (graph.indices.index_select(0, pos).long(),
            torch.div(keep, fanout, rounding_mode="floor"))
