"""Locality-aware neighbour sampling (Song & Jiang, "Rethinking Graph Data Placement for GNN
Training on Multiple GPUs", §4).

Neighbours whose features sit on the trainer's device are drawn ``s`` times more often, and the
aggregation is reweighted by ``1/q`` so it stays unbiased:

* Eq. (1): with ``ξ_j ~ Bernoulli(q_j)`` independent, ``Σ_j ξ_j w_ij x_j / q_j`` is an unbiased
  estimate of ``Σ_j w_ij x_j``. Each neighbour of a frontier vertex is kept independently with its
  probability ``q_j`` (so the number drawn per vertex is random, ``fanout`` in expectation) and
  ``Block.weights`` carries ``w_ij / q_j``, with ``w_ij = 1`` (``aggregation="sum"``, the
  default: the plain ``1/q`` importance weights) or ``w_ij = 1/deg(i)`` (``"mean"``: a weighted
  sum over sampled edges estimates the neighbour mean; with ``s = 1`` every weight is
  ``1/fanout``).
* Eq. (8): from the uniform ``q_j = fanout / deg(i)``, neighbours in ``Q'_l`` get ``s·q_j·Z`` and
  the others ``q_j·Z``, where ``Z = Σq / (s·Σ_{Q} q + Σ_{¬Q} q)`` keeps ``Σ_j q_j`` (the expected
  number drawn) unchanged. (The paper writes ``/M`` with ``M`` the same ratio; multiplying is
  what makes the sums equal, as its text requires.) When ``s·q·Z`` would exceed 1, the local
  neighbours are clipped to probability 1 and the others take the remaining expectation
  ``(fanout - |Q ∩ N(i)|) / |N(i) \\ Q|``; ratios inside each group are preserved.
* ``Q'_l`` (end of §4): ``Q'_1 = B`` (the local vertices) for the input layer; ``v_1`` is B's
  indicator and ``v_{l+1} = A v_l`` counts paths of ``l`` edges into ``B``; ``Q'_{l+1}`` is the
  ``size`` vertices with the largest positive ``v_{l+1}`` (:func:`neighbour_sets`).
* Algorithm 2 adapts ``s`` once per epoch from the data-loading share of the epoch time
  (:class:`ScaleController`).

The Bernoulli draws cost O(fanout) per vertex, like :class:`~fgnn.sampling.khop.KHop`: once per
``Q'_l``, each CSR row is partitioned (a permuted copy of ``indices``, O(E) memory per layer) so
that its ``Q'_l`` members come first; a vertex then draws a Binomial number of local and of
non-local neighbours and picks them with Floyd's algorithm inside each part - the same law as
one Bernoulli draw per neighbour.
"""

from __future__ import annotations

from typing import Iterable, Optional, Sequence, Union

import torch

from fgnn.graph import CSRGraph
from fgnn.sampling.checks import floyd_subsets, row_bounds
from fgnn.sampling.khop import KHop

__all__ = ["LocalityAwareKHop", "ScaleController", "neighbour_sets"]

LocalSpec = Union[torch.Tensor, Iterable[int]]


class ScaleController:
    """Algorithm 2 of Song & Jiang §4: adjust the scale factor ``s`` once per epoch.

    With ``r`` the ratio of data-loading time to total time of the previous epoch::

        if not fixed:
            if s >= MAXS:                 fixed = True
            elif r > ut:                  pre = s; s = s * 2
            elif r < lt and s != 1:       s = (s + pre) / 2
            else:                         fixed = True

    Args:
        lt: lower threshold (paper: 0.15).
        ut: upper threshold (paper: 0.2).
        max_s: MAXS, the largest scale (paper: 8).
        s: initial scale (paper: 1, the original sampler).

    Raises:
        ValueError: unless ``0 <= lt <= ut <= 1``, ``max_s >= 1`` and ``s >= 1``.
    """

    def __init__(self, lt: float = 0.15, ut: float = 0.2, max_s: float = 8.0,
                 s: float = 1.0) -> None:
        if not 0.0 <= lt <= ut <= 1.0:
            raise ValueError(f"ScaleController needs 0 <= lt <= ut <= 1, got lt={lt}, ut={ut}")
        if max_s < 1:
            raise ValueError(f"ScaleController: max_s must be >= 1, got max_s={max_s}")
        if s < 1:
            raise ValueError(f"ScaleController: s must be >= 1, got s={s}")
        self.lt, self.ut, self.max_s = float(lt), float(ut), float(max_s)
        self.s = float(s)
        self.pre = float(s)
        self.fixed = False

    def update(self, r: float) -> float:
        """Apply one step of Algorithm 2 for load ratio ``r`` in ``[0, 1]``; return the new s.

        Raises:
            ValueError: if ``r`` is outside ``[0, 1]``.
        """
        if not 0.0 <= r <= 1.0:
            raise ValueError(f"ScaleController.update: r must lie in [0, 1], got r={r}")
        if not self.fixed:
            if self.s >= self.max_s:
                self.fixed = True
            elif r > self.ut:
                self.pre = self.s
                self.s = self.s * 2
            elif r < self.lt and self.s != 1:
                self.s = (self.s + self.pre) / 2
            else:
                self.fixed = True
        return self.s

    def __repr__(self) -> str:
        return (f"ScaleController(lt={self.lt}, ut={self.ut}, max_s={self.max_s}, s={self.s}, "
                f"pre={self.pre}, fixed={self.fixed})")


def _as_mask(local: LocalSpec, num_nodes: int, device: torch.device) -> torch.Tensor:
    """A bool mask of length ``num_nodes`` from a mask or a collection of vertex ids."""
    if isinstance(local, torch.Tensor) and local.dtype == torch.bool:
        if local.shape != (num_nodes,):
            raise ValueError(f"local mask must have shape ({num_nodes},), got "
                             f"{tuple(local.shape)}")
        return local.to(device)
    ids = local if isinstance(local, torch.Tensor) else torch.tensor(sorted(local),
                                                                     dtype=torch.int64)
    if ids.is_floating_point() or ids.dim() != 1:
        raise ValueError(f"local must be a bool mask or 1-D integer ids, got dtype {ids.dtype} "
                         f"shape {tuple(ids.shape)}")
    ids = ids.long().to(device)
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= num_nodes):
        bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
        raise ValueError(f"local holds vertex {bad}, outside [0, {num_nodes})")
    mask = torch.zeros(num_nodes, dtype=torch.bool, device=device)
    mask[ids] = True
    return mask


def neighbour_sets(graph: CSRGraph, local: LocalSpec, num_layers: int,
                   size: Optional[int] = None) -> list[torch.Tensor]:
    """The sets ``Q'_1 .. Q'_L`` of Song & Jiang §4 as bool masks, input layer first.

    ``Q'_1 = B``; ``v_{l+1}[i] = Σ_{j ∈ row i} v_l[j]`` counts the paths of ``l`` edges from
    ``i`` into ``B`` and ``Q'_{l+1}`` keeps the ``size`` vertices with the largest positive counts.

    Args:
        graph: topology.
        local: ``B``, as a bool mask ``(N,)`` or vertex ids.
        num_layers: L.
        size: ``|Q'_l|`` for ``l > 1``; default ``|B|``.
    """
    n = graph.num_nodes
    b = _as_mask(local, n, graph.device)
    size = int(b.sum()) if size is None else int(size)
    if size < 0:
        raise ValueError(f"size must be >= 0, got size={size}")
    sets = [b]
    v = b.double()
    for _ in range(1, num_layers):
        c = torch.zeros(graph.num_edges + 1, dtype=torch.float64, device=graph.device)
        torch.cumsum(v.index_select(0, graph.indices.long()), 0, out=c[1:])
        v = c.index_select(0, graph.indptr[1:]) - c.index_select(0, graph.indptr[:-1])
        k = min(size, int((v > 0).sum()))
        q = torch.zeros(n, dtype=torch.bool, device=graph.device)
        if k > 0:
            q[torch.topk(v, k).indices] = True
        sets.append(q)
        v = v / max(float(v.max()), 1.0)  # keep the path counts in range for deep models
    return sets


class LocalityAwareKHop(KHop):
    """k-hop sampling biased towards device-local vertices (Song & Jiang §4, Eqs. 1 and 8).

    Args:
        fanouts: expected neighbours per vertex per hop, seeds' hop first (as :class:`KHop`).
        local: ``B``, the vertices whose features are on the trainer's device (bool mask of
            length N or vertex ids); may be set later with :meth:`set_local`. Without it the
            sampler is plain Bernoulli uniform sampling.
        scale: initial ``s`` (>= 1); :meth:`end_epoch` updates it with Algorithm 2.
        q_size: ``|Q'_l|`` for the layers above the input one; default ``|B|``.
        aggregation: ``"sum"`` (default; weights ``1/q``, so ``Σ w`` over a vertex's sampled
            edges estimates its degree, as :mod:`fgnn.models` expects) or ``"mean"`` (weights
            ``1/(deg·q)``, whose weighted sum estimates the neighbour mean directly).
        controller: the :class:`ScaleController` (default: the paper's lt=0.15, ut=0.2, MAXS=8).
    """

    def __init__(self, fanouts: Sequence[int], local: Optional[LocalSpec] = None,
                 scale: float = 1.0, q_size: Optional[int] = None, aggregation: str = "sum",
                 controller: Optional[ScaleController] = None) -> None:
        super().__init__(fanouts)
        if aggregation not in ("mean", "sum"):
            raise ValueError(f"aggregation must be 'mean' or 'sum', got {aggregation!r}")
        if q_size is not None and q_size < 0:
            raise ValueError(f"q_size must be >= 0, got q_size={q_size}")
        self.aggregation = aggregation
        self.q_size = q_size
        self.controller = controller or ScaleController(s=scale)
        self.scale = scale
        self._local: Optional[LocalSpec] = None
        self._sets: Optional[list[torch.Tensor]] = None
        self._sets_key: Optional[tuple] = None
        self._parts: Optional[list[tuple[torch.Tensor, torch.Tensor]]] = None
        if local is not None:
            self.set_local(local)

    def __repr__(self) -> str:
        return (f"LocalityAwareKHop(fanouts={list(self.fanouts)}, scale={self.scale}, "
                f"aggregation={self.aggregation!r})")

    @property
    def scale(self) -> float:
        """The current scale factor ``s`` of Eq. (8)."""
        return self._scale

    @scale.setter
    def scale(self, value: float) -> None:
        if not value >= 1.0:
            raise ValueError(f"scale must be >= 1, got scale={value!r}")
        self._scale = float(value)

    def set_local(self, local: Optional[LocalSpec]) -> None:
        """Set ``B`` (bool mask or ids); ``Q'_l`` is recomputed at the next :meth:`sample`."""
        self._local = local
        self._sets = None
        self._sets_key = None
        self._parts = None

    def set_layer_sets(self, sets: Sequence[torch.Tensor]) -> None:
        """Set ``Q'_1 .. Q'_L`` directly (bool masks of length N, input layer first)."""
        if len(sets) != self.num_layers:
            raise ValueError(f"set_layer_sets needs {self.num_layers} masks, got {len(sets)}")
        for m in sets:
            if not isinstance(m, torch.Tensor) or m.dtype != torch.bool or m.dim() != 1:
                raise ValueError("set_layer_sets expects 1-D bool tensors")
        self._local = None
        self._sets = list(sets)
        self._sets_key = ("explicit", None)
        self._parts = None

    def end_epoch(self, load_ratio: float) -> float:
        """Feed the epoch's data-loading share to Algorithm 2; return (and apply) the new s.

        The controller keeps its own ``s``; a manual ``scale = x`` is overridden here.
        """
        self.scale = self.controller.update(load_ratio)
        return self.scale

    def layer_sets(self, graph: CSRGraph) -> Optional[list[torch.Tensor]]:
        """``Q'_1 .. Q'_L`` for ``graph`` (cached), or ``None`` when no local set is known."""
        key = (id(graph), graph.indices.data_ptr(), graph.num_nodes, graph.num_edges,
               str(graph.device))
        if self._sets_key is not None and self._sets_key[0] == "explicit":
            if self._sets_key[1:] != key:
                for m in self._sets:
                    if m.numel() != graph.num_nodes:
                        raise ValueError(f"layer set has {m.numel()} entries, graph has "
                                         f"{graph.num_nodes} nodes")
                self._sets = [m.to(graph.device) for m in self._sets]
                self._sets_key = ("explicit",) + key
                self._parts = None
            return self._sets
        if self._local is None:
            return None
        if self._sets is None or self._sets_key != key:
            self._sets = neighbour_sets(graph, self._local, self.num_layers, self.q_size)
            self._sets_key = key
            self._parts = None
        return self._sets

    def _partitions(self, graph: CSRGraph, sets: list[torch.Tensor]
                    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per layer: ``indices`` with each row's ``Q'_l`` members first, and their counts.

        Built once per set (O(E), no sort): a local edge moves to ``row start + its rank among
        the row's local edges``, a non-local one after all of the row's local edges.
        """
        if self._parts is None:
            n = graph.num_nodes
            deg = graph.degrees()
            row = torch.repeat_interleave(torch.arange(n, device=graph.device), deg)
            rstart = graph.indptr.index_select(0, row)
            ids = graph.indices.long()
            parts = []
            for mask in sets:
                in_q = mask.index_select(0, ids)
                c = torch.zeros(graph.num_edges + 1, dtype=torch.int64, device=graph.device)
                torch.cumsum(in_q, 0, out=c[1:])
                n_loc = c.index_select(0, graph.indptr[1:]) - c.index_select(0, graph.indptr[:-1])
                loc_rank = c[:-1] - c.index_select(0, rstart)
                e_rank = torch.arange(graph.num_edges, device=graph.device) - rstart
                dest = rstart + torch.where(in_q, loc_rank,
                                            n_loc.index_select(0, row) + e_rank - loc_rank)
                perm = torch.empty_like(graph.indices)
                perm[dest] = graph.indices
                parts.append((perm, n_loc))
            self._parts = parts
        return self._parts

    def _select(self, graph: CSRGraph, rows: torch.Tensor, hop: int,
                generator: Optional[torch.Generator]
                ) -> tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]:
        """Bernoulli sampling with the Eq. (8) probabilities in O(fanout) work per vertex.

        Independent Bernoulli draws with one probability per group (local / non-local) are,
        exactly, a Binomial count per group followed by a uniform subset of that size of the
        group's members; the subsets come from Floyd's algorithm over the partitioned rows.
        """
        k = float(self.fanouts[hop])
        sets = self.layer_sets(graph)
        start, deg = row_bounds(graph, rows)
        if sets is None or self.scale == 1.0:
            indices, n_loc = graph.indices, torch.zeros_like(deg)
        else:  # Q'_l with l = L - hop (Q'_1 is the input layer, sampled last)
            indices, n_loc_all = self._partitions(graph, sets)[self.num_layers - 1 - hop]
            n_loc = n_loc_all.index_select(0, rows)
        d = deg.double()
        q_loc, q_non = _eq8(d, n_loc.double(), k, self.scale)
        n_non = deg - n_loc
        m_loc = _binomial(n_loc, q_loc, generator)
        m_non = _binomial(n_non, q_non, generator)
        # one Floyd run over both groups: rows 0..R-1 local, R..2R-1 non-local
        r = rows.numel()
        grp, off = floyd_subsets(torch.cat([n_loc, n_non]), torch.cat([m_loc, m_non]),
                                 generator)
        is_non = grp >= r
        row = torch.where(is_non, grp - r, grp)
        off = torch.where(is_non, off + n_loc.index_select(0, row), off)
        nbr = indices.index_select(0, start.index_select(0, row) + off)
        q = torch.where(is_non, q_non.index_select(0, row), q_loc.index_select(0, row))
        w = 1.0 / q if self.aggregation == "sum" else 1.0 / (q * d.index_select(0, row))
        return nbr.long(), row, w.float()


def _binomial(count: torch.Tensor, prob: torch.Tensor,
              generator: Optional[torch.Generator]) -> torch.Tensor:
    """``Binomial(count, prob)`` per entry as int64 (exact: all-or-nothing at prob 0 or 1)."""
    draw = torch.binomial(count.double(), prob.double(), generator=generator).long()
    return torch.where(prob >= 1.0, count, torch.minimum(draw, count))


def _eq8(d: torch.Tensor, n_loc: torch.Tensor, k: float, s: float
         ) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row inclusion probabilities (local, non-local) of Eq. (8), clipped to ``[0, 1]``."""
    n_non = d - n_loc
    c = k / (s * n_loc + n_non).clamp(min=1e-300)
    over = s * c > 1.0
    q_loc = torch.where(over, torch.ones_like(c), s * c)
    q_non = torch.where(over, ((k - n_loc) / n_non.clamp(min=1e-300)).clamp(0.0, 1.0), c)
    full = d <= k
    one = torch.ones_like(c)
    return torch.where(full, one, q_loc), torch.where(full, one, q_non.clamp(max=1.0))
