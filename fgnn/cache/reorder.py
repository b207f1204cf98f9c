"""Hot-first reordering of graph and features (DataTiering, Min et al., §3.2, Algorithm 2).

Renumbering vertices by descending score puts the hot rows at the front of the feature matrix, so
"is ``v`` cached?" becomes ``v < num_cached`` and no full id → slot map is needed (the paper's
reason for reordering the graph as well as the features). Algorithm 2 computes ``srt_idx`` (old id
→ new id), scatters the row lengths to their new rows, takes a prefix sum for the new row
pointers, relabels every edge endpoint through ``srt_idx`` and copies each neighbour list to its
new place. Every step is a gather/scatter, vectorised here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

import numpy as np
import torch

from fgnn.graph import CSRGraph

__all__ = ["Reordering", "hot_first_permutation", "reorder", "reorder_graph",
           "reorder_rows"]

ArrayLike = Union[torch.Tensor, np.ndarray]


def hot_first_permutation(score: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The hot-first renumbering.

    Args:
        score: ``(N,)`` hotness; ties keep the smaller old id first.

    Returns:
        ``(perm, inv)``: ``perm[new] = old`` (vertices by descending score) and
        ``inv[old] = new`` (Algorithm 2's ``srt_idx``). For scores ``[0.1, 0.4, 0.2, 0.3]`` the
        paper's mapping is ``inv = [3, 0, 2, 1]``.
    """
    s = torch.as_tensor(score)
    if s.dim() != 1:
        raise ValueError(f"score must be a 1-D tensor of length N, got shape {tuple(s.shape)}")
    if s.numel() and bool(torch.isnan(s.to(torch.float64)).any()):
        raise ValueError("score contains NaN")
    perm = torch.argsort(s, descending=True, stable=True)
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(perm.numel(), device=perm.device)
    return perm, inv


def _check_perm(perm: torch.Tensor, n: int) -> torch.Tensor:
    p = torch.as_tensor(perm).long()
    if p.shape != (n,):
        raise ValueError(f"perm has shape {tuple(p.shape)}, expected ({n},)")
    if n and not torch.equal(torch.sort(p).values, torch.arange(n, device=p.device)):
        raise ValueError("perm is not a permutation of [0, N)")
    return p


def reorder_graph(graph: CSRGraph, perm: torch.Tensor,
                  inv: Optional[torch.Tensor] = None) -> CSRGraph:
    """Renumber ``graph`` so new vertex ``i`` is old vertex ``perm[i]`` (Algorithm 2).

    Row ``i`` of the result is old row ``perm[i]`` with every neighbour relabelled through
    ``inv`` and re-sorted within the row; edge weights follow their edges.
    """
    n = graph.num_nodes
    dev = graph.device
    perm = _check_perm(perm, n).to(dev)
    if inv is None:
        inv = torch.empty_like(perm)
        inv[perm] = torch.arange(n, device=dev)
    inv = inv.to(dev).long()
    deg = graph.degrees()
    new_deg = deg[perm]  # nd[srt_idx[i] + 1] = neighbour-list length of old row i
    indptr = torch.zeros(n + 1, dtype=torch.int64, device=dev)
    torch.cumsum(new_deg, 0, out=indptr[1:])  # prefix sum
    e = graph.num_edges
    # Position of every new edge in the old edge list: old row start + offset within the row.
    shift = torch.repeat_interleave(graph.indptr[:-1][perm] - indptr[:-1], new_deg,
                                    output_size=e)
    src_pos = torch.arange(e, device=dev) + shift
    cols = inv[graph.indices.long()[src_pos]]  # edg[i] = srt_idx[edg[i]]
    rows = torch.repeat_interleave(torch.arange(n, device=dev), new_deg, output_size=e)
    order = torch.argsort(rows * max(n, 1) + cols, stable=True)  # keep rows sorted
    cols = cols[order]
    w = None if graph.weights is None else graph.weights[src_pos][order].contiguous()
    return CSRGraph(indptr, cols.to(graph.indices.dtype).contiguous(), w)


def reorder_rows(rows: ArrayLike, perm: torch.Tensor) -> torch.Tensor:
    """Rows (features, labels, masks) in the new order: ``out[new] = rows[perm[new]]``.

    Accepts a tensor, a numpy array or an ``np.memmap`` (read into memory in the new order).
    """
    p = torch.as_tensor(perm).long()
    if isinstance(rows, np.ndarray):
        if rows.shape[0] != p.numel():
            raise ValueError(f"rows has {rows.shape[0]} rows, expected {p.numel()}")
        return torch.from_numpy(np.ascontiguousarray(rows[p.cpu().numpy()]))
    if not isinstance(rows, torch.Tensor):
        raise ValueError(f"rows must be a tensor or numpy array, got {type(rows).__name__}")
    if rows.shape[0] != p.numel():
        raise ValueError(f"rows has {rows.shape[0]} rows, expected {p.numel()}")
    return rows[p.to(rows.device)]


@dataclass
class Reordering:
    """The result of :func:`reorder`.

    Attributes:
        graph: the renumbered graph.
        perm: ``(N,)`` new id → old id.
        inv: ``(N,)`` old id → new id (Algorithm 2's ``srt_idx``).
        features: features in the new order, when given.
    """

    graph: CSRGraph
    perm: torch.Tensor
    inv: torch.Tensor
    features: Optional[torch.Tensor] = None

    def to_new(self, ids: torch.Tensor) -> torch.Tensor:
        """Map old ids (e.g. the training set) to new ids."""
        return self.inv[torch.as_tensor(ids, device=self.inv.device).long()]

    def to_old(self, ids: torch.Tensor) -> torch.Tensor:
        """Map new ids back to old ids."""
        return self.perm[torch.as_tensor(ids, device=self.perm.device).long()]


def reorder(graph: CSRGraph, score: torch.Tensor,
            features: Optional[ArrayLike] = None) -> Reordering:
    """Hot-first reorder ``graph`` (and ``features``) by descending ``score``.

    After this, caching the ``C`` hottest rows is caching new ids ``[0, C)``, and
    ``new_id < C`` tells whether a vertex is cached.

    Raises:
        ValueError: if ``score`` or ``features`` does not have N rows.
    """
    s = torch.as_tensor(score)
    if s.dim() != 1 or s.numel() != graph.num_nodes:
        raise ValueError(f"score has shape {tuple(s.shape)}, expected ({graph.num_nodes},)")
    perm, inv = hot_first_permutation(s.to(graph.device))
    g = reorder_graph(graph, perm, inv)
    f = None if features is None else reorder_rows(features, perm)
    return Reordering(g, perm, inv, f)
