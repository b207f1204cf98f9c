"""k-hop random / weighted neighbourhood sampling (FGNN §2, Fig. 7 ``class KHOP``, §7.1).

Per hop, every vertex of the frontier draws ``fanout`` distinct neighbours from its CSR row (a
vertex with fewer neighbours keeps all of them), then the new vertices are deduplicated and
renumbered (:class:`~fgnn.sampling.remap.Remapper`). The frontier of the next hop is every vertex
of the sample so far (the destination vertices of a layer are a prefix of its sources, see
:mod:`fgnn.sampling.base`), as in GNNLab and DGL blocks.

Uniform selection uses a vectorised form of Floyd's variant of Fisher-Yates sampling: O(fanout)
random numbers and O(fanout²) comparisons per vertex whatever its degree, the balanced-work
property FGNN §7.3(1) credits its Fisher-Yates variant with over reservoir sampling (whose work
grows with the degree). Weighted selection (probability proportional to the edge weight, without
replacement, i.e. successive sampling) runs by vectorised rejection against each row's largest
weight, O(fanout · max/mean weight) work per vertex, with an exact Efraimidis–Spirakis
exponential-key fallback for the rare rows the rejection rounds leave short.

Throughput (``bench/sampling.py``) is limited by random reads: each sampled edge costs a few
gathers (``indptr``, ``indices``, the remap scratch array) and O(fanout) vector operations.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from fgnn.config import FRONTIERS
from fgnn.graph import CSRGraph
from fgnn.sampling._util import check_fanouts, check_seeds, rand, segment_arange
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

    Floyd's algorithm, run for all rows at once: for step ``i`` with ``j = deg - fanout + i``,
    draw ``t`` uniform in ``[0, j]``; keep ``t`` unless an earlier step kept it, else keep ``j``.
    The kept offsets are a uniform ``fanout``-subset of ``[0, deg)``. Rows with
    ``deg <= fanout`` keep all their neighbours (no random numbers).

    Args:
        graph: topology (on the device of ``rows``).
        rows: ``(R,)`` int64 vertex ids.
        fanout: neighbours per vertex, > 0.
        generator: random source on the graph's device.

    Returns:
        ``(neighbours, row_index)``: ``(E,)`` int64 global neighbour ids and ``(E,)`` int64
        positions in ``rows`` of the vertex that sampled them (the rows with more than
        ``fanout`` neighbours first, then the others; each row's edges are contiguous).
    """
    k = fanout
    start, deg = _row_bounds(graph, rows)
    is_big = deg > k
    big = torch.nonzero(is_big).squeeze(1)
    # rows with deg > k: exactly k Floyd offsets each, no mask needed
    sel = _floyd(deg.index_select(0, big), k, generator)  # (k, B)
    pos = (sel.t() + start.index_select(0, big).unsqueeze(1)).reshape(-1)
    row_index = big.repeat_interleave(k)
    if big.numel() < rows.numel():  # rows with deg <= k: every neighbour
        row_s, off_s = segment_arange(torch.where(is_big, torch.zeros_like(deg), deg))
        pos = torch.cat([pos, start.index_select(0, row_s) + off_s])
        row_index = torch.cat([row_index, row_s])
    nbr = graph.indices.index_select(0, pos).long()
    return nbr, row_index


def _floyd(deg: torch.Tensor, k: int, generator: Optional[torch.Generator]) -> torch.Tensor:
    """``(k, R)`` distinct uniform offsets in ``[0, deg)`` per column (requires ``deg > k``).

    Floyd's algorithm vectorised over the rows: step ``i`` has ``j = deg - k + i`` and draws
    ``t ~ U{0..j}``; it keeps ``t`` unless an earlier step kept it, else ``j`` (never kept
    before, since every earlier pick is below ``j``).
    """
    if deg.numel() == 0:  # no row above the fanout (e.g. fanouts covering every degree)
        return torch.empty((k, 0), dtype=torch.int64, device=deg.device)
    n = (deg - (k - 1)).unsqueeze(0) + torch.arange(k, device=deg.device).unsqueeze(1)  # j + 1
    sel = (rand(tuple(n.shape), generator, deg.device) * n).long()
    torch.minimum(sel, n - 1, out=sel)  # guard float rounding at the top end
    for i in range(1, k):
        cur = sel[i]
        dup = sel[0] == cur
        for m in range(1, i):
            dup |= sel[m] == cur
        sel[i] = torch.where(dup, n[i] - 1, cur)
    return sel


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
    probability ``w_j / Σ_unpicked w``. It runs by rejection, vectorised over the rows: propose
    a uniform offset, accept it with probability ``w_j / max_w(row)`` unless already picked; an
    accepted proposal follows exactly the successive-sampling law, and the expected work per row
    is O(fanout · max_w / mean_w) whatever its degree (the balanced work FGNN §7.3(1) asks of a
    sampler). Rows still short after ``max_rounds`` rounds of ``fanout`` proposals (skewed
    weights, or fewer positive weights than ``fanout``) finish exactly with Efraimidis-Spirakis
    keys ``E_j / w_j`` over their unpicked neighbours (the continuation of the same process).
    Edges of weight 0 are never drawn; a row with at most ``fanout`` neighbours keeps all of its
    positive-weight ones.

    Args:
        graph, rows, fanout, generator: as :func:`sample_uniform`.
        row_max: ``(N,)`` per-row maximum weight (:func:`row_max_weights`); computed (O(E))
            when omitted, so callers sampling repeatedly should cache it.
        max_rounds: rejection rounds before the exact fallback.

    Returns:
        As :func:`sample_uniform`.

    Raises:
        ValueError: if ``graph`` has no edge weights.
    """
    if graph.weights is None:
        raise ValueError("weighted sampling needs edge weights, got graph.weights=None")
    if row_max is None:
        row_max = row_max_weights(graph)
    dev = rows.device
    k = fanout
    start, deg = _row_bounds(graph, rows)
    # Rows with deg <= fanout keep every positive-weight edge.
    small = deg <= k
    row_s, off_s = segment_arange(torch.where(small, deg, torch.zeros_like(deg)))
    pos_s = start.index_select(0, row_s) + off_s
    ok = graph.weights.index_select(0, pos_s) > 0
    pos_s, row_s = pos_s[ok], row_s[ok]

    big = torch.nonzero(~small).squeeze(1)
    b_start, b_deg = start.index_select(0, big), deg.index_select(0, big)
    b_wmax = row_max.index_select(0, rows.index_select(0, big)).double()
    picks = torch.full((big.numel(), k), -1, dtype=torch.int64, device=dev)  # offsets
    npick = torch.zeros(big.numel(), dtype=torch.int64, device=dev)
    active = torch.arange(big.numel(), device=dev)
    for _ in range(max_rounds):
        if active.numel() == 0:
            break
        a_deg, a_start = b_deg.index_select(0, active), b_start.index_select(0, active)
        a_wmax = b_wmax.index_select(0, active)
        a_picks, a_n = picks.index_select(0, active), npick.index_select(0, active)
        u = rand((2, k, active.numel()), generator, dev)
        prop = (u[0] * a_deg).long()
        torch.minimum(prop, a_deg - 1, out=prop)
        w = graph.weights.index_select(0, (prop + a_start).view(-1)).view(k, -1).double()
        accept_w = u[1] * a_wmax < w
        cols = torch.arange(k, device=dev)
        for c in range(k):
            cand = prop[c]
            fresh = ~(a_picks == cand.unsqueeze(1)).any(1)
            acc = accept_w[c] & fresh & (a_n < k)
            slot = torch.where(acc, a_n, torch.full_like(a_n, k))  # k = no write
            a_picks = torch.where(cols.unsqueeze(0) == slot.unsqueeze(1), cand.unsqueeze(1),
                                  a_picks)
            a_n = a_n + acc
        picks.index_copy_(0, active, a_picks)
        npick.index_copy_(0, active, a_n)
        active = active[a_n < k]
    if active.numel() > 0:  # exact continuation with exponential keys over unpicked offsets
        a_deg = b_deg.index_select(0, active)
        row_f, off_f = segment_arange(a_deg)
        w = graph.weights.index_select(
            0, b_start.index_select(0, active).index_select(0, row_f) + off_f).double()
        taken = (picks.index_select(0, active).index_select(0, row_f)
                 == off_f.unsqueeze(1)).any(1)
        key = torch.empty_like(w).exponential_(generator=generator).div_(w)
        key[taken] = float("inf")
        excluded = torch.isinf(key)
        key = torch.where(excluded, torch.ones_like(key), key / (1.0 + key))
        order = torch.argsort(key.add_(row_f.double()))  # by row, then key
        row_o = row_f.index_select(0, order)
        seg = torch.cumsum(a_deg, 0) - a_deg
        rank = torch.arange(order.numel(), device=dev) - seg.index_select(0, row_o)
        need = (k - npick.index_select(0, active)).index_select(0, row_o)
        sel = order[(rank < need) & ~excluded.index_select(0, order)]
        extra_row = active.index_select(0, row_f.index_select(0, sel))
        extra_off = off_f.index_select(0, sel)
    else:
        extra_row = extra_off = torch.empty(0, dtype=torch.int64, device=dev)
    got = picks >= 0
    flat = torch.nonzero(got.view(-1)).squeeze(1)
    b_row = torch.cat([torch.div(flat, k, rounding_mode="floor"), extra_row])
    b_off = torch.cat([picks.view(-1).index_select(0, flat), extra_off])
    pos = torch.cat([b_start.index_select(0, b_row) + b_off, pos_s])
    row_index = torch.cat([big.index_select(0, b_row), row_s])
    return graph.indices.index_select(0, pos).long(), row_index


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
        seeds = check_seeds(graph, seeds)
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
    row_index = torch.arange(rows.numel(), device=dev).unsqueeze(1).expand_as(off)
    keep = (deg > 0).unsqueeze(1).expand_as(off)
    pos = (start.unsqueeze(1) + off)[keep]
    return graph.indices.index_select(0, pos).long(), row_index[keep]
