"""The CPU twin of the k-hop selection kernels: chosen for work per edge (issue 28).

On a CPU a launch or a host sync costs microseconds, so what bounds a hop is the number of
vector passes over its edges. These kernels split a hop's rows by degree (one sync): rows with
at most ``fanout`` neighbours keep them all (no random numbers, a few passes), and only the
rows with more run Floyd's algorithm (uniform) or rejection rounds (weighted), each a Python
loop over the fanout on ``(fanout, rows)`` matrices. That is the algorithm of commit c58204e,
before the launch/sync work of issue 18 moved the CUDA twin (:mod:`fgnn.sampling.khop_cuda`)
to about twice the passes per edge.

Above :data:`LOOP_FANOUT` the loop's O(fanout²) comparisons per row would outgrow the CUDA
twin's O(fanout log fanout), so larger fanouts run the CUDA twin on the CPU too.
"""

from __future__ import annotations

from typing import Optional

import torch

from fgnn.graph import CSRGraph
from fgnn.sampling.checks import rand, row_bounds
from fgnn.sampling.khop_cuda import uniform_cuda, weighted_cuda, weighted_keys

__all__ = ["LOOP_FANOUT", "floyd_columns", "uniform_cpu", "weighted_cpu", "whole_rows"]

#: The largest fanout the CPU twin loops over; larger ones run the CUDA twin's kernels.
LOOP_FANOUT = 32


def uniform_cpu(graph: CSRGraph, rows: torch.Tensor, fanout: int,
                generator: Optional[torch.Generator]) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`fgnn.sampling.khop.sample_uniform` for CPU throughput: edges grouped by row (each
    row's contiguous), the rows with more than ``fanout`` neighbours first."""
    if fanout > LOOP_FANOUT:
        return uniform_cuda(graph, rows, fanout, generator)
    start, deg = row_bounds(graph, rows)
    is_big = deg > fanout
    big = torch.nonzero(is_big).squeeze(1)
    sel = floyd_columns(deg.index_select(0, big), fanout, generator)  # (fanout, B)
    pos_b = torch.empty((big.numel(), fanout), dtype=torch.int64, device=rows.device)
    torch.add(sel.t(), start.index_select(0, big).unsqueeze(1), out=pos_b)  # grouped by row
    row_s, pos_s = whole_rows(start, torch.where(is_big, 0, deg))  # the others: every edge
    pos = torch.cat([pos_b.view(-1), pos_s])
    row_index = torch.cat([big.repeat_interleave(fanout), row_s])
    return graph.indices.index_select(0, pos).long(), row_index


def whole_rows(start: torch.Tensor, counts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(row, pos)`` of the first ``counts[r]`` edges of every row ``r`` (CSR order): each
    edge's row and CSR position, in four passes over the edges."""
    row = torch.repeat_interleave(torch.arange(counts.numel(), device=counts.device), counts)
    base = start - (torch.cumsum(counts, 0) - counts)  # pos = base[row] + flat index
    pos = base.index_select(0, row).add_(torch.arange(row.numel(), device=counts.device))
    return row, pos


def floyd_columns(deg: torch.Tensor, k: int, generator: Optional[torch.Generator]
                  ) -> torch.Tensor:
    """``(k, R)`` distinct uniform offsets in ``[0, deg)`` per column (requires ``deg > k``).

    Floyd's algorithm vectorised over the rows, a Python loop over the steps: step ``i`` has
    ``j = deg - k + i`` and draws ``t ~ U{0..j}``; it keeps ``t`` unless an earlier step kept
    it, else ``j`` (never kept before, since every earlier pick is below ``j``).
    """
    j = (deg - k).unsqueeze(0) + torch.arange(k, device=deg.device).unsqueeze(1)  # (k, R)
    # t = a 62-bit random integer mod j + 1: bias below j / 2**62, and fewer passes than a
    # float64 draw scaled and truncated
    sel = torch.randint(0, 1 << 62, tuple(j.shape), generator=generator, device=deg.device)
    sel.remainder_(j + 1)
    for i in range(1, k):
        cur = sel[i]
        dup = (sel[0] == cur) if i == 1 else (sel[:i] == cur).any(0)
        torch.where(dup, j[i], cur, out=cur)  # in place: row i of sel
    return sel


def weighted_cpu(graph: CSRGraph, rows: torch.Tensor, fanout: int,
                 generator: Optional[torch.Generator], row_max: torch.Tensor,
                 max_rounds: int) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`fgnn.sampling.khop.sample_weighted` (non-empty ``rows`` and graph) for CPU
    throughput: the rows with at most ``fanout`` neighbours keep their positive-weight ones,
    the others run :func:`_rejection_rounds` and finish with exponential keys."""
    if fanout > LOOP_FANOUT:
        return weighted_cuda(graph, rows, fanout, generator, row_max, max_rounds)
    start, deg = row_bounds(graph, rows)
    small = deg <= fanout
    row_s, pos_s = whole_rows(start, torch.where(small, deg, 0))
    ok = torch.nonzero(graph.weights.index_select(0, pos_s) > 0).squeeze(1)
    pos_s, row_s = pos_s.index_select(0, ok), row_s.index_select(0, ok)
    big = torch.nonzero(~small).squeeze(1)
    b_start, b_deg = start.index_select(0, big), deg.index_select(0, big)
    wmax = row_max.index_select(0, rows.index_select(0, big)).double()
    picks, npick = _rejection_rounds(graph, b_start, b_deg, wmax, fanout, max_rounds,
                                     generator)
    short = torch.nonzero(npick < fanout).squeeze(1)
    if short.numel() > 0:  # exact continuation with exponential keys over unpicked offsets
        extra_row, extra_off = weighted_keys(graph, b_start, b_deg, picks, npick, short,
                                             int(b_deg.index_select(0, short).sum()), fanout,
                                             generator)
    else:
        extra_row = extra_off = torch.empty(0, dtype=torch.int64, device=rows.device)
    flat = torch.nonzero(picks.view(-1) >= 0).squeeze(1)
    b_row = torch.cat([torch.div(flat, fanout, rounding_mode="floor"), extra_row])
    b_off = torch.cat([picks.view(-1).index_select(0, flat), extra_off])
    pos = torch.cat([b_start.index_select(0, b_row) + b_off, pos_s])
    row_index = torch.cat([big.index_select(0, b_row), row_s])
    return graph.indices.index_select(0, pos).long(), row_index


def _rejection_rounds(graph: CSRGraph, start: torch.Tensor, deg: torch.Tensor,
                      wmax: torch.Tensor, k: int, rounds: int,
                      generator: Optional[torch.Generator]
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(picks, npick)``: up to ``k`` offsets per row (``(R, k)``, ``-1`` unused) from
    ``rounds`` rounds of ``k`` rejection proposals each (rows ``deg > k``).

    Proposal ``j`` (uniform) is accepted with probability ``w_j / max_w`` unless the row picked
    ``j`` already: the successive-sampling law, one proposal per row at a time; a round only
    proposes for the rows still short.
    """
    dev = start.device
    picks = torch.full((deg.numel(), k + 1), -1, dtype=torch.int64, device=dev)  # k: discard
    npick = torch.zeros(deg.numel(), dtype=torch.int64, device=dev)
    active = torch.arange(deg.numel(), device=dev)
    for _ in range(rounds):
        if active.numel() == 0:
            break
        a_deg = deg.index_select(0, active)
        a_picks, a_n = picks.index_select(0, active), npick.index_select(0, active)
        u = rand((2, k, active.numel()), generator, dev)
        prop = torch.minimum((u[0] * a_deg).long(), a_deg - 1)
        w = graph.weights.index_select(0, (prop + start.index_select(0, active)).view(-1))
        accept_w = u[1] * wmax.index_select(0, active) < w.view(k, -1).double()
        for c in range(k):
            cand = prop[c]
            acc = accept_w[c] & (a_n < k) & ~(a_picks[:, :k] == cand.unsqueeze(1)).any(1)
            a_picks.scatter_(1, torch.where(acc, a_n, k).unsqueeze(1), cand.unsqueeze(1))
            a_n += acc
        picks.index_copy_(0, active, a_picks)
        npick.index_copy_(0, active, a_n)
        active = active.index_select(0, torch.nonzero(a_n < k).squeeze(1))
    return picks[:, :k].contiguous(), npick
