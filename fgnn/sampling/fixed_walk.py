"""PinSAGE neighbourhoods drawn once: random-walk top-k that depends only on (seed, layer, vertex).

:class:`~fgnn.sampling.RandomWalk` draws fresh walks for every mini-batch, so a vertex's
neighbourhood changes from batch to batch, which is right for training. Inference needs one fixed
neighbourhood per vertex and layer, as PinSAGE's own inference uses (Ying et al., KDD 2018,
"Node embeddings via MapReduce": neighbourhoods are fixed, then each layer's embeddings are
computed once for all vertices). Here the walks of vertex ``v`` for model layer ``i`` take their
steps from a counter-based hash of ``(seed, i, v, walk, step)`` (SplitMix64), not from a
generator's stream. The result does not depend on which other vertices share a batch or in
what order they come. Per-vertex inference over a :class:`FixedRandomWalk` sample and layer-wise
inference (:func:`fgnn.inference.layerwise_inference`) therefore see the same neighbourhoods.

Walk steps and the top-k follow :mod:`fgnn.sampling.random_walk`: uniform steps, a walk that
reaches a vertex without neighbours stops, the ``top_k`` most visited vertices (the start vertex
excluded, ties to the smaller id) become the neighbours, weighted by their visit counts.
"""

from __future__ import annotations

from typing import Optional

import torch

from fgnn.graph import CSRGraph
from fgnn.sampling.checks import check_seeds
from fgnn.sampling.base import Sample, Sampler
from fgnn.sampling.random_walk import random_walk_topk
from fgnn.sampling.remap import Remapper, sample_layers

__all__ = ["FixedRandomWalk", "hashed_uniform"]

_M64 = (1 << 64) - 1


def _signed(c: int) -> int:
    """An unsigned 64-bit constant as the int64 with the same bits."""
    return c - (1 << 64) if c >= 1 << 63 else c


_C1, _C2 = _signed(0xBF58476D1CE4E5B9), _signed(0xD1B54A32D192ED69)
_GOLDEN = _signed(0x9E3779B97F4A7C15)


def _srl(x: torch.Tensor, k: int) -> torch.Tensor:
    """Logical right shift of int64 bits (torch's ``>>`` is arithmetic)."""
    return (x >> k) & ((1 << (64 - k)) - 1)


def _mix(x: torch.Tensor) -> torch.Tensor:
    """SplitMix64's finaliser on int64 tensors (wrapping multiplication)."""
    x = x ^ _srl(x, 30)
    x = x * _C1
    x = x ^ _srl(x, 27)
    x = x * _C2
    return x ^ _srl(x, 31)


def hashed_uniform(key: int, vertex: torch.Tensor, walk: torch.Tensor, step: int) -> torch.Tensor:
    """Uniform ``[0, 1)`` float64 numbers, a pure function of ``(key, vertex, walk, step)``.

    Shapes:
        vertex, walk ``(R,)`` int64 -> ``(R,)`` float64.
    """
    x = _mix(vertex * _GOLDEN + _signed(key & _M64))
    x = _mix(x ^ (walk * _C1 + step))
    return _srl(x, 11).to(torch.float64) * (1.0 / (1 << 53))


class FixedRandomWalk(Sampler):
    """PinSAGE random-walk neighbourhoods fixed per (seed, layer, vertex), for inference.

    Hop ``h`` of a sample (``0`` = the seeds' hop) is model layer ``num_layers - 1 - h``, the
    layer that aggregates that hop, so a vertex gets the same neighbours for a layer however it is
    reached. The ``generator`` argument of :meth:`sample` is ignored.

    Args:
        num_walks: walks started from each vertex per layer.
        walk_length: steps per walk.
        top_k: most visited vertices kept as neighbours.
        num_layers: number of layers (blocks).
        seed: selects the neighbourhoods.

    Raises:
        ValueError: if an argument is not a positive int (``seed``: any int).
    """

    def __init__(self, num_walks: int = 4, walk_length: int = 3, top_k: int = 5,
                 num_layers: int = 3, seed: int = 0) -> None:
        for name, val in (("num_walks", num_walks), ("walk_length", walk_length),
                          ("top_k", top_k), ("num_layers", num_layers)):
            if isinstance(val, bool) or not isinstance(val, int) or val < 1:
                raise ValueError(f"FixedRandomWalk: {name} must be a positive int, got "
                                 f"{name}={val!r}")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"FixedRandomWalk: seed must be an int, got seed={seed!r}")
        self.num_walks, self.walk_length, self.top_k = num_walks, walk_length, top_k
        self.num_layers, self.seed = num_layers, seed
        self._remap = Remapper()

    def __repr__(self) -> str:
        return (f"FixedRandomWalk(num_walks={self.num_walks}, walk_length={self.walk_length}, "
                f"top_k={self.top_k}, num_layers={self.num_layers}, seed={self.seed})")

    def neighbours(self, graph: CSRGraph, rows: torch.Tensor, layer: int
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The layer-``layer`` neighbourhood of every vertex of ``rows``.

        Returns:
            ``(neighbours, row_index, counts)`` as :func:`~fgnn.sampling.random_walk.
            random_walk_topk` returns them.
        """
        key = int(_mix(torch.tensor([self.seed * 1_000_003 + layer], dtype=torch.int64)))
        r = rows.numel()
        if graph.num_edges == 0 or r == 0:
            visits = torch.full((r, self.num_walks * self.walk_length), -1, dtype=torch.int64,
                                device=rows.device)
            return random_walk_topk(visits, rows, self.top_k)
        start_v = rows.repeat_interleave(self.num_walks)  # (R * W,)
        walk = torch.arange(self.num_walks, device=rows.device).repeat(r)
        cur, alive = start_v.clone(), torch.ones_like(start_v, dtype=torch.bool)
        steps = []
        for step in range(self.walk_length):
            start = graph.indptr.index_select(0, cur)
            deg = graph.indptr.index_select(0, cur + 1) - start
            alive &= deg > 0
            off = (hashed_uniform(key, start_v, walk, step) * deg).long()
            torch.minimum(off, (deg - 1).clamp_(min=0), out=off)
            nxt = graph.indices.index_select(0, (start + off).clamp_(max=graph.num_edges - 1))
            cur = torch.where(alive, nxt.long(), cur)
            steps.append(torch.where(alive, cur, torch.full_like(cur, -1)))
        visits = torch.stack(steps, 1).view(r, self.num_walks * self.walk_length)
        return random_walk_topk(visits, rows, self.top_k)

    def sample(self, graph: CSRGraph, seeds: torch.Tensor,
               generator: Optional[torch.Generator] = None) -> Sample:
        """``num_layers`` fixed neighbourhoods around ``seeds`` (``generator`` is unused).

        Raises:
            ValueError: on bad ``seeds`` (dtype, shape, device, range, repeats).
        """
        seeds = check_seeds(graph, seeds, values=False)  # range, repeats: in sample_layers

        def select(frontier: torch.Tensor, hop: int):
            return self.neighbours(graph, frontier, self.num_layers - 1 - hop)

        return sample_layers(self._remap, seeds, graph.num_nodes, self.num_layers, select)

    def sample_layer(self, graph: CSRGraph, seeds: torch.Tensor, layer: int) -> Sample:
        """A one-block sample: ``seeds`` aggregating their model-layer ``layer`` neighbourhood."""
        seeds = check_seeds(graph, seeds, values=False)  # range, repeats: in sample_layers
        return sample_layers(self._remap, seeds, graph.num_nodes, 1,
                             lambda frontier, hop: self.neighbours(graph, frontier, layer))
