"""Random-walk neighbourhoods for PinSAGE (FGNN §7.1; Ying et al., KDD'18 §3.2).

For every vertex of a layer's frontier, ``num_walks`` walks of ``walk_length`` uniform steps start
at it; the ``top_k`` vertices the walks visit most often (the start vertex excluded) become its
neighbours, with the visit counts as edge weights (PinSAGE's importance pooling). FGNN §7.1:
3 layers, 5 neighbours from 4 walks of length 3 - the defaults here.

All walks of a hop advance together (one vector step per walk step); a walk that reaches a vertex
without neighbours stops. Visit counting and the top-k are dense over the ``num_walks *
walk_length`` visits of each frontier vertex (a sort within each row, then ``torch.topk``); ties
in the count go to the smaller vertex id, so the result is deterministic for a generator state.
"""

from __future__ import annotations

from typing import Optional

import torch

from fgnn.graph import CSRGraph
from fgnn.sampling.checks import check_seeds, rand
from fgnn.sampling.base import Sample, Sampler
from fgnn.sampling.remap import Remapper, sample_layers

__all__ = ["RandomWalk", "random_walk_topk", "random_walks"]


def random_walks(graph: CSRGraph, rows: torch.Tensor, num_walks: int, walk_length: int,
                 generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """Uniform random walks from every vertex of ``rows``.

    Returns:
        ``(R, num_walks * walk_length)`` int64 visited vertices, walk-major within a row
        (``[w0s1, w0s2, ..., w1s1, ...]``); ``-1`` after a walk stopped at a vertex without
        neighbours.
    """
    dev = rows.device
    r = rows.numel()
    if graph.num_edges == 0:
        return torch.full((r, num_walks * walk_length), -1, dtype=torch.int64, device=dev)
    cur = rows.repeat_interleave(num_walks)  # (R * W,)
    alive = torch.ones_like(cur, dtype=torch.bool)
    steps = []
    for _ in range(walk_length):
        start = graph.indptr.index_select(0, cur)
        deg = graph.indptr.index_select(0, cur + 1) - start
        alive &= deg > 0
        off = (rand((cur.numel(),), generator, dev) * deg).long()
        torch.minimum(off, (deg - 1).clamp_(min=0), out=off)
        nxt = graph.indices.index_select(0, (start + off).clamp_(max=graph.num_edges - 1)).long()
        cur = torch.where(alive, nxt, cur)  # a stopped walk stays put (masked below)
        steps.append(torch.where(alive, cur, torch.full_like(cur, -1)))
    visits = torch.stack(steps, 1)  # (R * W, L)
    return visits.view(r, num_walks * walk_length)


def random_walk_topk(visits: torch.Tensor, rows: torch.Tensor, top_k: int
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The ``top_k`` most visited vertices per row of ``visits``, start vertex excluded.

    Args:
        visits: ``(R, S)`` int64 visited vertices, ``-1`` for none (from :func:`random_walks`).
        rows: ``(R,)`` start vertices.
        top_k: neighbours kept per row.

    Returns:
        ``(neighbours, row_index, counts)``, each ``(E,)``: global ids, positions in ``rows``,
        and float32 visit counts; ordered by row, then by count descending, then by id.
    """
    r, s = visits.shape
    v = torch.where(visits == rows.unsqueeze(1), torch.full_like(visits, -1), visits)
    v = v.sort(dim=1).values  # equal vertices adjacent, -1 first
    first = torch.ones_like(v, dtype=torch.bool)
    first[:, 1:] = v[:, 1:] != v[:, :-1]
    # run length of each first element: index of the next first element minus own index
    col = torch.arange(s, device=v.device).expand(r, s)
    nxt = torch.where(first, col, torch.full_like(col, s))
    nxt = torch.cat([nxt[:, 1:], torch.full_like(nxt[:, :1], s)], 1)
    nxt = nxt.flip(1).cummin(1).values.flip(1)  # next first position strictly after
    count = torch.where(first & (v >= 0), nxt - col, torch.zeros_like(col))
    # score: count first, smaller vertex id (earlier column in the sorted row) second
    score = count * (s + 1) + (s - col)
    k = min(top_k, s)
    best = score.topk(k, dim=1, sorted=True).indices  # (R, k)
    cnt = count.gather(1, best).view(-1)
    keep = torch.nonzero(cnt > 0).squeeze(1)  # the one host sync
    nbr = v.gather(1, best).view(-1).index_select(0, keep)
    row_index = torch.div(keep, k, rounding_mode="floor")
    return nbr, row_index, cnt.index_select(0, keep).float()


class RandomWalk(Sampler):
    """PinSAGE random-walk sampler (FGNN §7.1: 3 layers, top 5 of 4 walks of length 3).

    Args:
        num_walks: walks started from each vertex per layer.
        walk_length: steps per walk.
        top_k: most visited vertices kept as neighbours.
        num_layers: number of layers (blocks).

    ``Block.weights`` holds the visit counts (float32) of the kept neighbours.

    Raises:
        ValueError: if an argument is not a positive int.
    """

    def __init__(self, num_walks: int = 4, walk_length: int = 3, top_k: int = 5,
                 num_layers: int = 3) -> None:
        for name, val in (("num_walks", num_walks), ("walk_length", walk_length),
                          ("top_k", top_k), ("num_layers", num_layers)):
            if isinstance(val, bool) or not isinstance(val, int) or val < 1:
                raise ValueError(f"RandomWalk: {name} must be a positive int, got {name}={val!r}")
        self.num_walks, self.walk_length, self.top_k = num_walks, walk_length, top_k
        self.num_layers = num_layers
        self._remap = Remapper()

    def __repr__(self) -> str:
        return (f"RandomWalk(num_walks={self.num_walks}, walk_length={self.walk_length}, "
                f"top_k={self.top_k}, num_layers={self.num_layers})")

    def sample(self, graph: CSRGraph, seeds: torch.Tensor,
               generator: Optional[torch.Generator] = None) -> Sample:
        """Sample ``num_layers`` random-walk neighbourhoods around ``seeds``.

        Raises:
            ValueError: on bad ``seeds`` (dtype, shape, device, range, repeats).
        """
        seeds = check_seeds(graph, seeds, values=False)  # range, repeats: in sample_layers
        def select(frontier: torch.Tensor, layer: int):
            visits = random_walks(graph, frontier, self.num_walks, self.walk_length, generator)
            return random_walk_topk(visits, frontier, self.top_k)

        return sample_layers(self._remap, seeds, graph.num_nodes, self.num_layers, select)
