"""The CUDA twin of the k-hop selection kernels: bounded launches and host syncs (issue 18).

What bounds a sampler on a GPU is the number of kernel launches and of host syncs, so no Python
loop runs over the fanout here: a uniform hop is Floyd's algorithm for every row and step at
once (:func:`~fgnn.sampling.checks.floyd_subsets`: a sort finds repeated draws, pointer jumping
resolves the chains in ``ceil(log2 fanout)`` rounds; one host sync), and a weighted hop decides
all ``max_rounds * fanout`` rejection proposals of every row at once (one sort per row), with
an exact Efraimidis-Spirakis finish for the rows left short. The kernels run on any device; the
public functions (:func:`fgnn.sampling.khop.sample_uniform`, :func:`~fgnn.sampling.khop.
sample_weighted`) pick them for non-CPU tensors (:mod:`fgnn.sampling.kernels`).
"""

from __future__ import annotations

from typing import Optional

import torch

from fgnn.graph import CSRGraph
from fgnn.sampling.checks import floyd_subsets, rand, row_bounds, segment_arange

__all__ = ["uniform_cuda", "weighted_cuda", "weighted_keys"]


def uniform_cuda(graph: CSRGraph, rows: torch.Tensor, fanout: int,
                 generator: Optional[torch.Generator]) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`fgnn.sampling.khop.sample_uniform` with a constant number of launches and one
    host sync (the number of sampled edges), O(fanout log fanout) work per row; edges come in
    row order, each row's contiguous (rows with ``deg <= fanout`` in CSR order)."""
    start, deg = row_bounds(graph, rows)
    row_index, off = floyd_subsets(deg, deg.clamp(max=fanout), generator)
    pos = start.index_select(0, row_index) + off
    return graph.indices.index_select(0, pos).long(), row_index


def weighted_cuda(graph: CSRGraph, rows: torch.Tensor, fanout: int,
                  generator: Optional[torch.Generator], row_max: torch.Tensor,
                  max_rounds: int) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`fgnn.sampling.khop.sample_weighted` (non-empty ``rows`` and graph) with every
    rejection proposal decided at once: no Python loop over the fanout or the rounds."""
    dev = rows.device
    start, deg = row_bounds(graph, rows)
    k = min(fanout, int(deg.max()))  # picks per row; a fanout above every degree takes all
    if k == 0:
        empty = torch.empty(0, dtype=torch.int64, device=dev)
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
    """:func:`weighted_cuda`'s result from its ``(R, k)`` picks (``-1`` unused): the big
    rows the rejection proposals left short finish with :func:`weighted_keys`, then every pick
    becomes a ``(neighbour, row_index)`` pair.
    """
    npick = (picks >= 0).sum(1)
    short = big & (npick < k)
    n_short, short_edges = torch.stack([short.sum(), torch.where(short, deg, 0).sum()]).tolist()
    if n_short:  # exact continuation with exponential keys over the unpicked offsets
        extra_row, extra_off = weighted_keys(graph, start, deg, picks, npick,
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


def weighted_keys(graph: CSRGraph, start: torch.Tensor, deg: torch.Tensor,
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
