"""Hotness maps: degree, random, PreSC#K, weighted reverse PageRank, optimal (FGNN §6)."""

from __future__ import annotations

from typing import Optional

import numpy as np
import pytest
import torch

from conftest import random_graph
from fgnn.cache import (compute_hotness, degree_hotness, num_cached_rows, parse_policy,
                        presample_counts, wrpr_hotness)
from fgnn.cache.placement import hot_order
from fgnn.graph import CSRGraph
from fgnn.sampling.base import Block, Sample, Sampler


class ToyKHop(Sampler):
    """Test-local uniform k-hop sampler (with replacement), vectorised; seeds first."""

    def __init__(self, fanouts=(5, 5)):
        self.fanouts = tuple(fanouts)
        self.num_layers = len(self.fanouts)

    def sample(self, graph: CSRGraph, seeds: torch.Tensor,
               generator: Optional[torch.Generator] = None) -> Sample:
        nodes = seeds.long()
        frontier = nodes
        for k in self.fanouts:
            start = graph.indptr[frontier]
            deg = graph.indptr[frontier + 1] - start
            has = deg > 0
            start, deg = start[has], deg[has]
            off = (torch.rand(deg.numel(), k, generator=generator, device=graph.device)
                   * deg.unsqueeze(1)).long()
            nbr = graph.indices[(start.unsqueeze(1) + off).flatten()].long()
            new = torch.unique(nbr)
            new = new[~torch.isin(new, nodes)]
            nodes = torch.cat([nodes, new])
            frontier = new
        blocks = [Block(torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long),
                        nodes.numel(), seeds.numel())]
        return Sample(seeds, blocks, nodes)


def power_law_graph(n: int = 3000, m: int = 30000, seed: int = 0) -> CSRGraph:
    """Seeded graph whose neighbour ids follow a Zipf-like law (skewed out-degrees)."""
    g = torch.Generator().manual_seed(seed)
    dst = torch.randint(0, n, (m,), generator=g)
    src = (torch.rand(m, generator=g) ** 3 * n).long().clamp_max(n - 1)
    perm = torch.randperm(n, generator=g)
    return CSRGraph.from_edge_index(torch.stack([perm[src], dst]), num_nodes=n, dedup=True)


# ---------------------------------------------------------------------------- degree / random
def test_degree_is_out_degree():
    # 0 <- 1, 0 <- 2, 1 <- 2, 3 <- 2   (row v lists whom v aggregates from)
    g = CSRGraph(torch.tensor([0, 2, 3, 3, 4]), torch.tensor([1, 2, 2, 2]))
    h = compute_hotness("degree", g)
    assert h.dtype == torch.float32
    assert h.tolist() == [0.0, 1.0, 3.0, 0.0]  # vertex 2 is sampled by three rows
    assert torch.equal(h, degree_hotness(g))


def test_random_is_seeded():
    g = random_graph(50, 200)
    a = compute_hotness("random", g, generator=torch.Generator().manual_seed(3))
    b = compute_hotness("random", g, generator=torch.Generator().manual_seed(3))
    c = compute_hotness("random", g, generator=torch.Generator().manual_seed(4))
    assert a.shape == (50,) and torch.equal(a, b) and not torch.equal(a, c)


# ---------------------------------------------------------------------------- WRPR
def dense_wrpr(graph: CSRGraph, train: np.ndarray, iters: int = 5, d: float = 0.85):
    """Reference: DataTiering Algorithm 1 with a dense numpy adjacency matrix.

    ``adj[A, v] = 1`` when ``v -> A`` (``v`` is listed in row ``A``); A's in-degree is the row sum.
    """
    n = graph.num_nodes
    adj = np.zeros((n, n))
    rows = np.repeat(np.arange(n), graph.degrees().numpy())
    adj[rows, graph.indices.numpy()] = 1.0
    indeg = adj.sum(1)
    s = np.full(n, 1.0 / n)
    s[train] *= n / len(train)
    for _ in range(iters):
        share = np.divide(s, indeg, out=np.zeros(n), where=indeg > 0)
        s = (1 - d) / n + d * adj.T @ share
    return s


@pytest.mark.parametrize("iters,d", [(5, 0.85), (3, 0.5), (0, 0.85)])
def test_wrpr_matches_dense_reference(iters, d):
    g = random_graph(60, 300, seed=1)
    g = CSRGraph.from_edge_index(g.edge_index(), num_nodes=60, dedup=True)
    train = np.array([0, 5, 7, 30])
    ref = dense_wrpr(g, train, iters, d)
    got = wrpr_hotness(g, torch.from_numpy(train), iterations=iters, damping=d)
    np.testing.assert_allclose(got.numpy(), ref, rtol=1e-5)


def test_wrpr_in_many_edge_chunks_matches_the_dense_reference(monkeypatch):
    """The push runs whole rows at a time in bounded chunks (no E-sized temporaries); chunks
    of a few edges give the dense reference's scores, weighted or not."""
    import functools

    import fgnn.cache.hotness as hot

    g = random_graph(60, 300, seed=1)
    g = CSRGraph.from_edge_index(g.edge_index(), num_nodes=60, dedup=True)
    train = np.array([0, 5, 7, 30])
    whole = wrpr_hotness(g, torch.from_numpy(train), iterations=5, use_edge_weights=True)
    monkeypatch.setattr(hot, "_edge_chunks", functools.partial(hot._edge_chunks, edges=7))
    assert len(list(hot._edge_chunks(g))) > 20
    got = wrpr_hotness(g, torch.from_numpy(train), iterations=5)
    np.testing.assert_allclose(got.numpy(), dense_wrpr(g, train, 5, 0.85), rtol=1e-5)
    w = CSRGraph(g.indptr, g.indices, torch.ones(g.num_edges))
    np.testing.assert_allclose(wrpr_hotness(w, torch.from_numpy(train), iterations=5,
                                            use_edge_weights=True).numpy(), whole.numpy(),
                               rtol=1e-5)


def test_wrpr_initial_weighting_and_direction():
    # A=0 aggregates from 1 and 2 (edges 1 -> 0, 2 -> 0); 3 aggregates from 0.
    g = CSRGraph(torch.tensor([0, 2, 2, 2, 3]), torch.tensor([1, 2, 0]))
    # iteration 0: training vertices start at (1/N) * (N/T) = 1/T
    s0 = wrpr_hotness(g, torch.tensor([0]), iterations=0)
    assert s0.tolist() == pytest.approx([1.0, 0.25, 0.25, 0.25])
    s1 = wrpr_hotness(g, torch.tensor([0]), iterations=1, damping=1.0)
    # 0's score is split over its in-degree 2 and flows back to 1 and 2; 0 gets 3's 0.25 / 1.
    assert s1.tolist() == pytest.approx([0.25, 0.5, 0.5, 0.0])
    mask = torch.tensor([True, False, False, False])
    assert torch.equal(wrpr_hotness(g, mask), wrpr_hotness(g, torch.tensor([0])))


def test_wrpr_via_compute_hotness_and_errors():
    g = random_graph(20, 60)
    h = compute_hotness("wrpr", g, torch.tensor([1, 2]))
    assert h.shape == (20,) and bool((h > 0).all())
    with pytest.raises(ValueError, match="train_idx"):
        compute_hotness("wrpr", g)
    with pytest.raises(ValueError, match="train_idx holds id 20"):
        wrpr_hotness(g, torch.tensor([20]))
    with pytest.raises(ValueError, match="damping"):
        wrpr_hotness(g, torch.tensor([1]), damping=1.5)


# ---------------------------------------------------------------------------- PreSC / optimal
def test_presample_counts_match_manual_count():
    g = random_graph(200, 1200, seed=2)
    train = torch.arange(0, 200, 10)
    sampler = ToyKHop((3, 3))
    counts = presample_counts(g, train, sampler, epochs=2, batch_size=7,
                              generator=torch.Generator().manual_seed(0), per_epoch=True)
    assert counts.shape == (2, 200)
    # Replay by hand: shuffled order, batches of 7, one count per input vertex per batch.
    gen = torch.Generator().manual_seed(0)
    manual = torch.zeros(2, 200)
    for e in range(2):
        order = train[torch.randperm(train.numel(), generator=gen)]
        for seeds in torch.split(order, 7):
            manual[e, sampler.sample(g, seeds, gen).input_nodes] += 1
    assert torch.equal(counts, manual)
    assert bool((counts[:, train] >= 1).all())  # every seed is an input of its own batch


def test_presc_k_is_average_of_k_epochs():
    g = random_graph(100, 500, seed=3)
    train = torch.arange(10)
    s = ToyKHop((2,))
    h = compute_hotness("presc2", g, train, sampler=s, batch_size=4,
                        generator=torch.Generator().manual_seed(1))
    c = presample_counts(g, train, s, epochs=2, batch_size=4,
                         generator=torch.Generator().manual_seed(1))
    assert torch.allclose(h, c / 2)
    h1 = compute_hotness("presc", g, train, sampler=s, epochs=2, batch_size=4,
                         generator=torch.Generator().manual_seed(1))
    assert torch.equal(h, h1)
    with pytest.raises(ValueError, match="sampler"):
        compute_hotness("presc", g, train)
    with pytest.raises(ValueError, match="epochs=3"):
        compute_hotness("presc2", g, train, sampler=s, epochs=3)


def test_optimal_uses_recorded_visits():
    g = random_graph(30, 90)
    visits = torch.rand(3, 30)
    assert torch.allclose(compute_hotness("optimal", g, visits=visits), visits.sum(0))
    with pytest.raises(ValueError, match="oracle"):
        compute_hotness("optimal", g)
    with pytest.raises(ValueError, match=r"expected \(30,\)"):
        compute_hotness("optimal", g, visits=torch.zeros(29))


def test_parse_policy():
    assert parse_policy("presc") == ("presc", None)
    assert parse_policy("PreSC#2") == ("presc", 2)
    assert parse_policy("presc1") == ("presc", 1)
    for bad in ("lru", "presc0", ""):
        with pytest.raises(ValueError, match="presc|policy"):
            parse_policy(bad)


def _hit_rate(hotness: torch.Tensor, visits: torch.Tensor, alpha: float) -> float:
    c = num_cached_rows(alpha, visits.numel())
    return float(visits[hot_order(hotness)[:c]].sum() / visits.sum())


def test_presc1_reaches_90_percent_of_optimal_on_power_law_graph():
    """FGNN Fig. 10 in miniature: α = 0.1, 1% training set, 3-hop uniform sampling; Optimal is
    the oracle over the five measured epochs (§3 footnote 5)."""
    n = 4000
    g = power_law_graph(n, 40000)
    train = torch.randperm(n, generator=torch.Generator().manual_seed(9))[: n // 100]
    s = ToyKHop((10, 10, 5))
    presc = compute_hotness("presc1", g, train, sampler=s, batch_size=1,
                            generator=torch.Generator().manual_seed(1))
    visits = presample_counts(g, train, s, epochs=5, batch_size=1,
                              generator=torch.Generator().manual_seed(2))
    optimal = compute_hotness("optimal", g, visits=visits)
    opt, pre = (_hit_rate(h, visits, 0.1) for h in (optimal, presc))
    assert pre >= 0.9 * opt
    assert pre <= opt + 1e-9  # optimal is an upper bound on the measured epochs


def test_presc_beats_degree_on_uniform_graph():
    """FGNN §6.3: on a non-power-law graph, degree ignores the training set; PreSC does not."""
    n = 5000
    g = random_graph(n, 50000, seed=5)
    train = torch.randperm(n, generator=torch.Generator().manual_seed(9))[: n // 100]
    s = ToyKHop((10, 10))
    presc = compute_hotness("presc1", g, train, sampler=s, batch_size=1,
                            generator=torch.Generator().manual_seed(1))
    visits = presample_counts(g, train, s, epochs=5, batch_size=1,
                              generator=torch.Generator().manual_seed(2))
    pre, deg = (_hit_rate(h, visits, 0.1) for h in (presc, compute_hotness("degree", g)))
    assert pre > 1.3 * deg
