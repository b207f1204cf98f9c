"""The sampler's launch/sync budget (issue 18, defect 6), counted with the dispatch-mode tool.

Op and sync counts are deterministic (they do not depend on the machine), so they are asserted
exactly against the budget: a 3-hop ``KHop([15, 10, 5])`` sample of 1000 seeds runs at most
300 aten ops and 2 host syncs per hop (the seed check included), and no sampler runs a
Python loop over the fanout. The budget is the CUDA twin's (:mod:`fgnn.sampling.kernels`;
issue 28): the counting tests force it on CPU tensors with the ``cuda_twin`` fixture, since
the CPU twin trades launches for fewer passes per edge. The CPU time budget the issue sets
(one hop at fanout 1000 on 100 seeds within 0.05 s) is measured by ``bench/sampling.py``
(``fanout_1000_hop_s``), not asserted here; both twins hold the statistics at large fanouts.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from scipy import stats

from fgnn.data import load_dataset
from fgnn.graph import CSRGraph
from fgnn.monitor.dispatch_count import DispatchCounter, count_dispatch
from fgnn.sampling import KHop, LocalityAwareKHop, RandomWalk
from fgnn.sampling.kernels import use_kernel
from fgnn.sampling.khop import sample_uniform, sample_weighted

from test_sampling_khop import P_MIN, fan_graph, twin  # noqa: F401 - twin is a fixture

MAX_OPS = 300
SYNCS_PER_HOP = 2
SEED_CHECK_SYNCS = 0  # range and repeats ride on the first hop's sync (Remapper.begin)


@pytest.fixture
def cuda_twin():
    """The CUDA twin of the sampling kernels, whose launches and syncs the budget bounds."""
    with use_kernel("cuda"):
        yield


@pytest.fixture(scope="module")
def rmat():
    return load_dataset("rmat:scale=14,edge_factor=16,feat_dim=1,seed=0").graph


def _seeds(graph: CSRGraph, n: int) -> torch.Tensor:
    return torch.randperm(graph.num_nodes, generator=torch.Generator().manual_seed(0))[:n]


def _count(sampler, graph, seeds) -> DispatchCounter:
    sampler.sample(graph, seeds, torch.Generator().manual_seed(0))  # scratch array allocated
    return count_dispatch(sampler.sample, graph, seeds, torch.Generator().manual_seed(0))[1]


def test_counter_classifies_host_syncs():
    x = torch.arange(6)
    with DispatchCounter() as c:
        int(x[0])                                        # .item()
        torch.nonzero(x)                                 # data-dependent shape
        x[x > 2]                                         # boolean-mask indexing
        torch.repeat_interleave(x, x)                    # no output_size
        torch.repeat_interleave(x, x, output_size=15)    # output_size given: no sync
        torch.unique(x)
        x.tolist()                                       # reads the data without an aten op
        x + 1
    assert c.syncs == 6, dict(c.sync_ops)
    assert set(c.sync_ops) == {"_local_scalar_dense", "nonzero", "index", "repeat_interleave",
                               "_unique2", "tolist"}
    assert c.ops > c.syncs and c.op_names["add"] == 1
    assert torch.Tensor.tolist is not None and "tolist" not in vars(c)  # patch undone
    with DispatchCounter() as d:
        x.tolist()
    assert d.syncs == 1 and c.syncs == 6


@pytest.mark.parametrize("frontier", ["all", "new"])
def test_khop_3_hops_1000_seeds_within_budget(cuda_twin, rmat, frontier):
    c = _count(KHop([15, 10, 5], frontier=frontier), rmat, _seeds(rmat, 1000))
    assert c.ops <= MAX_OPS, (c.ops, dict(c.op_names))
    assert c.syncs <= 3 * SYNCS_PER_HOP + SEED_CHECK_SYNCS, dict(c.sync_ops)


def test_each_hop_adds_at_most_two_syncs(cuda_twin, rmat):
    seeds = _seeds(rmat, 1000)
    one, three = _count(KHop([15]), rmat, seeds), _count(KHop([15, 10, 5]), rmat, seeds)
    assert one.syncs <= SYNCS_PER_HOP + SEED_CHECK_SYNCS
    assert three.syncs - one.syncs <= 2 * SYNCS_PER_HOP


def _hop_ops(fn, fanout: int) -> int:
    return count_dispatch(fn, fanout)[1].ops


def test_uniform_hop_ops_do_not_grow_with_fanout(cuda_twin):
    g = fan_graph(1, deg=5000)
    rows = torch.zeros(100, dtype=torch.int64)
    ops = {k: _hop_ops(lambda f: sample_uniform(g, rows, f, torch.Generator().manual_seed(0)), k)
           for k in (10, 1000)}
    # only the pointer-jumping rounds (3 ops each, ceil(log2(fanout)) of them) may differ
    assert ops[1000] - ops[10] <= 3 * (10 - 4), ops


def test_weighted_hop_ops_do_not_grow_with_fanout(cuda_twin):
    g = fan_graph(1, weights=[1.0 + i % 3 for i in range(3000)], deg=3000)
    rows = torch.zeros(50, dtype=torch.int64)
    ops = {k: _hop_ops(lambda f: sample_weighted(g, rows, f, torch.Generator().manual_seed(0)),
                       k) for k in (10, 1000)}
    assert abs(ops[1000] - ops[10]) <= 20, ops


def test_other_samplers_sync_at_most_twice_per_hop(cuda_twin, rmat):
    seeds = _seeds(rmat, 500)
    local = torch.argsort(rmat.degrees(), descending=True)[: rmat.num_nodes // 10]
    for sampler in (KHop([15, 10, 5], replace=True), RandomWalk(),
                    LocalityAwareKHop([15, 10, 5], local=local, scale=2.0)):
        c = _count(sampler, rmat, seeds)
        assert c.syncs <= 3 * SYNCS_PER_HOP + SEED_CHECK_SYNCS, (sampler, dict(c.sync_ops))
        assert c.ops <= 500, (sampler, c.ops)


def test_one_hop_at_fanout_1000_on_100_seeds_keeps_1000_neighbours_each(twin):
    """The hop's time (budget 0.05 s) is measured by bench/sampling.py, ``fanout_1000_hop_s``;
    that its work does not grow with the fanout, by the op counts above."""
    g = fan_graph(1, deg=100_000)  # every row has more than 1000 neighbours
    rows = torch.zeros(100, dtype=torch.int64)
    nbr, _ = sample_uniform(g, rows, 1000, torch.Generator().manual_seed(0))
    assert nbr.numel() == 100 * 1000


def test_uniform_at_large_fanout_is_uniform_without_replacement(twin):
    copies, deg, k = 400, 1500, 1000
    g = fan_graph(copies, deg=deg)
    nbr, row = sample_uniform(g, torch.arange(copies), k, torch.Generator().manual_seed(7))
    assert torch.equal(torch.bincount(row, minlength=copies), torch.full((copies,), k))
    per_row = (nbr - copies).view(copies, k).sort(1).values
    assert bool((per_row[:, 1:] != per_row[:, :-1]).all()), "a neighbour was drawn twice"
    counts = torch.bincount(per_row.view(-1), minlength=deg)  # each offset: copies * k / deg
    assert stats.chisquare(counts.numpy()).pvalue > P_MIN
    # the draw of one row is an unordered uniform subset: offsets 0 and 1 together in k(k-1)/
    # (deg(deg-1)) of the rows, the pairwise law Floyd's algorithm gets exactly
    both = ((per_row == 0).any(1) & (per_row == 1).any(1)).sum().item()
    p = k * (k - 1) / (deg * (deg - 1))
    assert stats.binomtest(int(both), copies, p).pvalue > P_MIN


def test_weighted_at_large_fanout_draws_without_replacement(twin):
    w = [float(1 + i % 4) for i in range(1500)]
    g = fan_graph(20, weights=w, deg=1500)
    nbr, row = sample_weighted(g, torch.arange(20), 1000, torch.Generator().manual_seed(3))
    assert torch.equal(torch.bincount(row, minlength=20), torch.full((20,), 1000))
    order = torch.argsort(row * 10_000 + nbr)
    per_row = nbr[order].view(20, 1000)
    assert bool((per_row[:, 1:] != per_row[:, :-1]).all()), "a neighbour was drawn twice"
    heavy = (per_row - 20) % 4 == 3  # weight 4 edges are picked more often than weight 1
    light = (per_row - 20) % 4 == 0
    assert int(heavy.sum()) > int(light.sum())


def test_same_seed_same_sample(twin, rmat):
    seeds = _seeds(rmat, 300)
    w = torch.rand(rmat.num_edges, generator=torch.Generator().manual_seed(1)) + 0.1
    gw = dataclasses.replace(rmat, weights=w)
    for sampler, g in ((KHop([15, 10, 5]), rmat), (KHop([15, 10], weighted=True), gw)):
        a = sampler.sample(g, seeds, torch.Generator().manual_seed(5))
        b = sampler.sample(g, seeds, torch.Generator().manual_seed(5))
        assert torch.equal(a.input_nodes, b.input_nodes)
        assert all(torch.equal(x.src, y.src) and torch.equal(x.dst, y.dst)
                   for x, y in zip(a.blocks, b.blocks))
