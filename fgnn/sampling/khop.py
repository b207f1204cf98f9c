"""k-hop random / weighted neighbourhood sampling (FGNN §2, Fig. 7 ``class KHOP``, §7.1).

Per hop, every vertex of the frontier draws ``fanout`` distinct neighbours from its CSR row (a
vertex with fewer neighbours keeps all of them), then the new vertices are deduplicated and
renumbered (:class:`~fgnn.sampling.remap.Remapper`). The frontier of the next hop is every vertex
of the sample so far (the destination vertices of a layer are a prefix of its sources, see
:mod:`fgnn.sampling.base`), as in GNNLab and DGL blocks.

Uniform selection uses a vectorised form of Floyd's variant of Fisher-Yates sampling: O(fanout)
random numbers per vertex whatever its degree, the balanced-work property FGNN §7.3(1) credits
its Fisher-Yates variant with over reservoir sampling (whose work grows with the degree).
Weighted selection (probability proportional to the edge weight, without replacement, i.e.
successive sampling) runs by vectorised rejection against each row's largest weight,
O(max_rounds · fanout) work per vertex, with an exact Efraimidis–Spirakis exponential-key
fallback for the rare rows the rejection proposals leave short.

Both come in two twins (:mod:`fgnn.sampling.kernels`), picked by the device of the rows: the
CUDA twin (:mod:`fgnn.sampling.khop_cuda`) keeps launches and host syncs (what bounds a sampler
on a GPU) from growing with the fanout, a uniform hop syncing twice (its edge count, the remap's
new vertices); the vectorised CPU twin (:mod:`fgnn.sampling.khop_cpu`) runs the fewest torch
passes per edge; the compiled CPU twin (:mod:`fgnn.sampling.khop_compiled`, numba) runs uniform
and weighted hops as one loop, and serves the large ones on a CPU where numba is installed.
:class:`fgnn.monitor.dispatch_count.DispatchCounter` counts launches and syncs;
``bench/sampling.py`` reports them per sample, and both twins' throughput.

Throughput (``bench/sampling.py``) is limited by random reads: each sampled edge costs a few
gathers (``indptr``, ``indices``, the remap scratch array) and O(fanout) vector operations.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from fgnn.config import FRONTIERS
from fgnn.graph import CSRGraph
from fgnn.sampling.checks import check_fanouts, check_seeds, rand, row_bounds
from fgnn.sampling.base import Sample, Sampler
from fgnn.sampling.kernels import kernel_for
from fgnn.sampling.khop_compiled import uniform_compiled, weighted_compiled
from fgnn.sampling.khop_cpu import LOOP_FANOUT, uniform_cpu, weighted_cpu
from fgnn.sampling.khop_cuda import uniform_cuda, weighted_cuda
from fgnn.sampling.remap import Remapper, sample_layers

__all__ = ["KHop", "row_max_weights", "sample_uniform", "sample_weighted"]


def sample_uniform(graph: CSRGraph, rows: torch.Tensor, fanout: int,
                   generator: Optional[torch.Generator] = None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw ``min(fanout, deg)`` distinct neighbours of each vertex in ``rows`` uniformly.

    Floyd's algorithm: O(fanout) random numbers per row whatever its degree. Rows with
    ``deg <= fanout`` keep all their neighbours, in CSR order. The twin of the rows' device
    runs (:mod:`fgnn.sampling.kernels`): on a CPU :func:`~fgnn.sampling.khop_cpu.uniform_cpu`
    (fewest passes per edge) or, for large hops with numba installed,
    :func:`~fgnn.sampling.khop_compiled.uniform_compiled` (one loop), elsewhere :func:`~fgnn.sampling.khop_cuda.uniform_cuda` (a
    constant number of launches, one host sync).

    Args:
        graph: topology (on the device of ``rows``).
        rows: ``(R,)`` int64 vertex ids.
        fanout: neighbours per vertex, > 0.
        generator: random source on the graph's device.

    Returns:
        ``(neighbours, row_index)``: ``(E,)`` int64 global neighbour ids and ``(E,)`` int64
        positions in ``rows`` of the vertex that sampled them (each row's edges contiguous;
        the CUDA and compiled twins keep row order, the vectorised CPU twin puts the rows with
        more than ``fanout`` neighbours first).
    """
    kernel = kernel_for(rows, work=rows.numel() * fanout)
    if kernel == "compiled" and fanout <= LOOP_FANOUT:
        return uniform_compiled(graph.indptr, graph.indices, rows, fanout, generator)
    if kernel != "cuda":
        return uniform_cpu(graph, rows, fanout, generator)
    return uniform_cuda(graph, rows, fanout, generator)


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
    accepted proposal follows exactly the successive-sampling law, and the work per row is
    O(max_rounds · fanout) whatever its degree (the balanced work FGNN §7.3(1) asks of a
    sampler). Rows still short after ``max_rounds · fanout`` proposals (skewed weights, or
    fewer positive weights than ``fanout``) finish exactly with Efraimidis-Spirakis keys
    ``E_j / w_j`` over their unpicked neighbours (the continuation of the same process).
    Edges of weight 0 are never drawn; a row with at most ``fanout`` neighbours keeps all of its
    positive-weight ones. The twin of the rows' device runs (:mod:`fgnn.sampling.kernels`):
    on a CPU :func:`~fgnn.sampling.khop_cpu.weighted_cpu` (rejection rounds over the big rows
    only) or, for large hops with numba installed,
    :func:`~fgnn.sampling.khop_compiled.weighted_compiled` (one loop; rows of at most twice
    ``fanout`` neighbours draw by keys directly), elsewhere
    :func:`~fgnn.sampling.khop_cuda.weighted_cuda` (every proposal at once, no Python loop).

    Args:
        graph, rows, fanout, generator: as :func:`sample_uniform`.
        row_max: ``(N,)`` per-row maximum weight (:func:`row_max_weights`); computed (O(E))
            when omitted, so callers sampling repeatedly should cache it.
        max_rounds: rejection proposals per row, in multiples of ``fanout``, before the exact
            fallback (the compiled twin proposes only for rows of more than ``2 * fanout``
            neighbours).

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
    kernel = kernel_for(rows, work=rows.numel() * fanout)
    if kernel == "compiled" and fanout <= LOOP_FANOUT:
        return weighted_compiled(graph.indptr, graph.indices, graph.weights, rows, fanout,
                                 generator, row_max, max_rounds)
    if kernel != "cuda":
        return weighted_cpu(graph, rows, fanout, generator, row_max, max_rounds)
    return weighted_cuda(graph, rows, fanout, generator, row_max, max_rounds)


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
    start, deg = row_bounds(graph, rows)
    off = (rand((rows.numel(), fanout), generator, dev) * deg.unsqueeze(1)).long()
    torch.minimum(off, (deg - 1).clamp(min=0).unsqueeze(1), out=off)
    keep = torch.nonzero((deg > 0).repeat_interleave(fanout)).squeeze(1)  # one host sync
    pos = (start.unsqueeze(1) + off).view(-1).index_select(0, keep)
    return (graph.indices.index_select(0, pos).long(),
            torch.div(keep, fanout, rounding_mode="floor"))
