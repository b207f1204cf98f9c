"""Hotness maps: one float score ``h_v`` per vertex, the first parameter of FGNN's caching scheme.

FGNN §6.1 ("A General Caching Scheme") describes every static feature cache by two parameters: a
hotness metric ``h_v`` that estimates how often vertex ``v`` is sampled, and a cache ratio ``α``
(see :mod:`fgnn.cache.budget`); ``load_cache(hotness_map, α)`` then caches the top ``α|V|``
vertices. This module computes the hotness maps of the policies FGNN compares (§6.3, Fig. 10):

* ``degree``: the vertex out-degree used by PaGraph, i.e. how many vertices can sample ``v``
  (:meth:`CSRGraph.out_degrees`).
* ``random``: a seeded random score (the Random policy of §7.7).
* ``presc`` / ``prescK``: PreSC#K (§6.3), the average visit count over ``K`` pre-sampling epochs
  of the real sampler over the shuffled training set.
* ``wrpr``: DataTiering's weighted reverse PageRank (Min et al., Algorithm 1, §3.1).
* ``optimal``: the oracle of FGNN §3 footnote 5: the visit counts of the very epochs that are
  measured (evaluation only; the caller passes them in as ``visits``).
"""

from __future__ import annotations

import re
from typing import Optional

import torch

from fgnn.graph import CSRGraph
from fgnn.sampling.base import Sampler

__all__ = [
    "POLICIES",
    "compute_hotness",
    "degree_hotness",
    "random_hotness",
    "presample_counts",
    "presc_hotness",
    "wrpr_hotness",
    "parse_policy",
]

#: Policy names accepted by :func:`compute_hotness` (``prescK`` also accepted, e.g. ``presc2``).
POLICIES = ("degree", "random", "presc", "wrpr", "optimal")


def parse_policy(policy: str) -> tuple[str, Optional[int]]:
    """Split a policy name into ``(name, K)``; ``presc2`` and ``presc#2`` give ``("presc", 2)``.

    Raises:
        ValueError: if the name is not one of :data:`POLICIES` (optionally with ``K``).
    """
    if not isinstance(policy, str):
        raise ValueError(f"policy must be a string, got {policy!r}")
    m = re.fullmatch(r"presc#?(\d+)", policy.strip().lower())
    if m:
        k = int(m.group(1))
        if k < 1:
            raise ValueError(f"policy={policy!r}: PreSC needs K >= 1 pre-sampling epochs")
        return "presc", k
    name = policy.strip().lower()
    if name not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(POLICIES)} (or prescK), "
                         f"got {policy!r}")
    return name, None


def _check_train_idx(graph: CSRGraph, train_idx: torch.Tensor) -> torch.Tensor:
    t = torch.as_tensor(train_idx)
    if t.dtype == torch.bool:
        if t.numel() != graph.num_nodes:
            raise ValueError(f"train_idx mask has length {t.numel()}, expected "
                             f"num_nodes={graph.num_nodes}")
        t = torch.nonzero(t).flatten()
    if t.dim() != 1 or t.is_floating_point():
        raise ValueError(f"train_idx must be a 1-D integer tensor, got dtype {t.dtype} and shape "
                         f"{tuple(t.shape)}")
    t = t.long().to(graph.device)
    if t.numel() == 0:
        raise ValueError("train_idx is empty; hotness needs at least one training vertex")
    lo, hi = int(t.min()), int(t.max())
    if lo < 0 or hi >= graph.num_nodes:
        raise ValueError(f"train_idx holds id {lo if lo < 0 else hi}, outside "
                         f"[0, {graph.num_nodes})")
    return t


def degree_hotness(graph: CSRGraph) -> torch.Tensor:
    """PaGraph's degree policy: ``h_v`` = out-degree = number of rows that list ``v``.

    Returns:
        ``(N,)`` float32 hotness on ``graph.device``.
    """
    return graph.out_degrees().to(torch.float32)


def random_hotness(num_nodes: int, generator: Optional[torch.Generator] = None,
                   device: torch.device | str = "cpu") -> torch.Tensor:
    """The Random policy: i.i.d. uniform scores, so the top ``α|V|`` is a random vertex subset."""
    if num_nodes < 0:
        raise ValueError(f"num_nodes must be >= 0, got {num_nodes}")
    return torch.rand(num_nodes, generator=generator, device=device)


def presample_counts(graph: CSRGraph, train_idx: torch.Tensor, sampler: Sampler, *,
                     epochs: int = 1, batch_size: int = 8000,
                     generator: Optional[torch.Generator] = None,
                     per_epoch: bool = False) -> torch.Tensor:
    """Run the real sampler over the training set and count how often each vertex is an input.

    Each epoch shuffles the training set (as training does, FGNN §6.2), splits it into
    mini-batches of ``batch_size`` seeds and adds one to ``counts[v]`` for every mini-batch whose
    ``Sample.input_nodes`` holds ``v`` (``input_nodes`` has no repeats, so this is the number of
    feature rows of ``v`` the Extract stage would load).

    Args:
        graph: topology (CPU or GPU; counting happens on its device).
        train_idx: ``(T,)`` integer ids or an ``(N,)`` bool mask of the training set.
        sampler: any :class:`~fgnn.sampling.base.Sampler`.
        epochs: number of sampling epochs.
        batch_size: seeds per mini-batch.
        generator: random source on ``graph.device`` (shuffling and sampling).
        per_epoch: return one row per epoch instead of the sum.

    Returns:
        ``(N,)`` float32 summed visit counts, or ``(epochs, N)`` when ``per_epoch``.
    """
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if sampler is None or not hasattr(sampler, "sample"):
        raise ValueError(f"sampler must provide sample(graph, seeds, generator), got {sampler!r}")
    train = _check_train_idx(graph, train_idx)
    n = graph.num_nodes
    counts = torch.zeros(epochs, n, dtype=torch.float32, device=graph.device)
    for e in range(epochs):
        order = train[torch.randperm(train.numel(), generator=generator, device=graph.device)]
        for seeds in torch.split(order, batch_size):
            sample = sampler.sample(graph, seeds, generator)
            ids = sample.input_nodes.to(graph.device).long()
            counts[e].index_add_(0, ids, torch.ones(ids.numel(), device=graph.device))
    return counts if per_epoch else counts.sum(0)


def presc_hotness(graph: CSRGraph, train_idx: torch.Tensor, sampler: Sampler, *,
                  epochs: int = 1, batch_size: int = 8000,
                  generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """PreSC#K (FGNN §6.3): the average visit count over ``K = epochs`` pre-sampling epochs.

    "PreSC conducts K sampling stages, starting from the vertices in T. [...] It records the visit
    count of the sampled vertices and uses the average count as the hotness metric h_v."
    """
    return presample_counts(graph, train_idx, sampler, epochs=epochs, batch_size=batch_size,
                            generator=generator) / float(epochs)


def wrpr_hotness(graph: CSRGraph, train_idx: torch.Tensor, *, iterations: int = 5,
                 damping: float = 0.85, use_edge_weights: bool = False) -> torch.Tensor:
    """Weighted reverse PageRank (DataTiering, Min et al., §3.1 and Algorithm 1).

    Algorithm 1 (input: graph, ``iter``, damp ``d``, train ids): every score starts at ``1/N``
    (the PageRank default, §3.1); ``weight = num_node / num_train`` (line 8) multiplies the initial
    score of every training vertex (line 10); then ``iter = 5`` iterations (not run to
    convergence, "to avoid [the initial impact wearing down]") of *reverse* PageRank: a vertex
    ``A``'s score is divided by ``A``'s in-degree and propagated backwards to the vertices that
    point at ``A`` (Fig. 2), with the usual PageRank damping ("the rest of the algorithm is
    identical to the reverse pagerank algorithm")::

        s'[v] = (1 - d) / N + d * sum_{A : v -> A} s[A] / indeg(A)

    In fgnn's CSR convention an edge ``v -> A`` is ``v`` listed in row ``A`` (``A`` aggregates
    from, i.e. samples, ``v``), so ``indeg(A)`` is ``A``'s row length (:meth:`CSRGraph.degrees`)
    and the sum runs over the rows that list ``v``. Vertices with an empty row pass nothing on
    (no dangling redistribution, as in DGL's PageRank that the paper builds on).

    Args:
        graph: topology.
        train_idx: training ids or ``(N,)`` bool mask (the labelled vertices of the paper).
        iterations: ``iter`` of Algorithm 1; the paper uses five.
        damping: ``d``; 0.85 is the PageRank default (the paper does not print its value).
        use_edge_weights: fgnn extension for weighted sampling: split ``s[A]`` over ``A``'s row
            in proportion to the edge weights instead of ``1/indeg(A)``.

    Returns:
        ``(N,)`` float32 scores on ``graph.device``.
    """
    if iterations < 0:
        raise ValueError(f"iterations must be >= 0, got {iterations}")
    if not 0.0 <= damping <= 1.0:
        raise ValueError(f"damping must lie in [0, 1], got {damping}")
    train = _check_train_idx(graph, train_idx)
    n = graph.num_nodes
    dev = graph.device
    weighted = use_edge_weights and graph.weights is not None
    row_sum = (_row_sums(graph) if weighted
               else graph.degrees().to(torch.float64)).clamp_min(torch.finfo(torch.float64).tiny)
    num_train = int(torch.unique(train).numel())
    score = torch.full((n,), 1.0 / n, dtype=torch.float64, device=dev)  # lines 4-7
    weight = n / num_train  # line 8
    score[train] = score[train] * weight  # lines 9-11 (line 10: score[tid[i]] *= weight)
    for _ in range(iterations):
        pushed = torch.zeros(n, dtype=torch.float64, device=dev)
        for lo, hi, rows, cols in _edge_chunks(graph):  # no E-sized temporaries
            w = graph.weights[lo:hi].to(torch.float64) if weighted else None
            share = (w if w is not None else 1.0) / row_sum[rows]
            pushed.index_add_(0, cols, score[rows] * share)
        score = (1.0 - damping) / n + damping * pushed
    return score.to(torch.float32)


def _edge_chunks(graph: CSRGraph, edges: int = 1 << 22):
    """``(lo, hi, rows, cols)`` of the graph's edges in position order, whole rows at a time
    and about ``edges`` edges a chunk (int64 row and column ids of the chunk only)."""
    n, indptr = graph.num_nodes, graph.indptr
    r0 = 0
    while r0 < n:
        r1 = int(torch.searchsorted(indptr, indptr[r0] + edges, right=True)) - 1
        r1 = min(n, max(r1, r0 + 1))
        lo, hi = int(indptr[r0]), int(indptr[r1])
        rows = torch.repeat_interleave(torch.arange(r0, r1, device=graph.device),
                                       indptr[r0 + 1:r1 + 1] - indptr[r0:r1])
        yield lo, hi, rows, graph.indices[lo:hi].long()
        r0 = r1


def _row_sums(graph: CSRGraph) -> torch.Tensor:
    """``(N,)`` float64 sums of each row's edge weights."""
    out = torch.zeros(graph.num_nodes, dtype=torch.float64, device=graph.device)
    for lo, hi, rows, _ in _edge_chunks(graph):
        out.index_add_(0, rows, graph.weights[lo:hi].to(torch.float64))
    return out


def compute_hotness(policy: str, graph: CSRGraph, train_idx: Optional[torch.Tensor] = None, *,
                    sampler: Optional[Sampler] = None, epochs: Optional[int] = None,
                    batch_size: int = 8000, generator: Optional[torch.Generator] = None,
                    visits: Optional[torch.Tensor] = None, damping: float = 0.85,
                    iterations: int = 5) -> torch.Tensor:
    """One entry point for every hotness policy (FGNN §6.1 ``hotness_map``).

    Args:
        policy: ``degree``, ``random``, ``presc`` (K = ``epochs`` or 1), ``prescK`` / ``presc#K``,
            ``wrpr`` or ``optimal``.
        graph: topology.
        train_idx: training ids or mask; needed by ``presc`` and ``wrpr``.
        sampler: the job's sampler; needed by ``presc``.
        epochs: K for ``presc`` when the name carries none.
        batch_size: seeds per pre-sampling mini-batch.
        generator: random source for ``random`` and ``presc``.
        visits: ``optimal`` only: ``(N,)`` or ``(E, N)`` visit counts recorded over the epochs
            being measured (FGNN §3 footnote 5); e.g. :func:`presample_counts` with a generator
            in the state training will start from.
        damping: ``wrpr`` damping ``d``.
        iterations: ``wrpr`` iterations.

    Returns:
        ``(N,)`` float32 hotness on ``graph.device``; larger is hotter.

    Raises:
        ValueError: on an unknown policy or a missing input the policy needs.
    """
    name, k = parse_policy(policy)
    if name == "degree":
        return degree_hotness(graph)
    if name == "random":
        return random_hotness(graph.num_nodes, generator, graph.device)
    if name == "wrpr":
        if train_idx is None:
            raise ValueError("policy='wrpr' needs train_idx")
        return wrpr_hotness(graph, train_idx, iterations=iterations, damping=damping)
    if name == "presc":
        if train_idx is None or sampler is None:
            raise ValueError(f"policy={policy!r} needs train_idx and sampler (PreSC runs the "
                             f"real sampler)")
        if k is not None and epochs is not None and epochs != k:
            raise ValueError(f"policy={policy!r} names K={k} but epochs={epochs}")
        k = k if k is not None else (epochs if epochs is not None else 1)
        return presc_hotness(graph, train_idx, sampler, epochs=k, batch_size=batch_size,
                             generator=generator)
    # optimal
    if visits is None:
        raise ValueError("policy='optimal' is an oracle: pass visits=, the visit counts of the "
                         "epochs being measured")
    v = torch.as_tensor(visits)
    if v.dim() == 2:
        v = v.sum(0)
    if v.dim() != 1 or v.numel() != graph.num_nodes:
        raise ValueError(f"visits has shape {tuple(torch.as_tensor(visits).shape)}, expected "
                         f"({graph.num_nodes},) or (epochs, {graph.num_nodes})")
    return v.to(device=graph.device, dtype=torch.float32)
