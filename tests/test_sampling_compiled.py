"""The compiled CPU twin (fgnn.sampling.khop_compiled): what the shared twin tests of
test_sampling_khop.py / test_sampling_remap.py do not reach (threads, bad ids, reproducibility)."""

from __future__ import annotations

import pytest
import torch
from scipy import stats

from fgnn.sampling import KHop
from fgnn.sampling.kernels import use_kernel
from fgnn.graph import CSRGraph
from fgnn.sampling.khop import sample_uniform, sample_weighted
from fgnn.sampling.remap import Remapper

from test_sampling_khop import P_MIN, check_structure, fan_graph, simple_graph

khop_compiled = pytest.importorskip("fgnn.sampling.khop_compiled")
pytestmark = pytest.mark.skipif(not khop_compiled.available(), reason="numba is not installed")


@pytest.fixture
def two_threads():
    prev = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(prev)


def test_rows_split_over_threads_draw_uniformly_without_repeats(two_threads):
    """20,000 rows (several per-thread ranges, each with its own random stream) over the same
    40 neighbours, fanout 15: no row repeats a neighbour, every neighbour is included at the
    same rate (chi-square against uniform), and the two halves of the rows agree."""
    copies, deg, k = 20_000, 40, 15
    assert khop_compiled._threads(copies) == 2
    g = fan_graph(copies, deg=deg)
    with use_kernel("compiled"):
        nbr, row = sample_uniform(g, torch.arange(copies), k, torch.Generator().manual_seed(3))
    assert torch.equal(row, torch.arange(copies).repeat_interleave(k))  # rows in order
    per_row = (nbr - copies).view(copies, k).sort(1).values
    assert bool((per_row[:, 1:] != per_row[:, :-1]).all())
    halves = [torch.bincount(h.reshape(-1), minlength=deg).numpy()
              for h in (per_row[: copies // 2], per_row[copies // 2:])]
    assert stats.chisquare(halves[0] + halves[1]).pvalue > P_MIN
    assert stats.chi2_contingency(halves).pvalue > P_MIN


def test_weighted_rows_split_over_threads_follow_the_weights_without_repeats(two_threads):
    """Weighted, 20,000 rows over the same 40 neighbours (one of weight 0), fanout 15 (rows
    above twice the fanout: rejection, then keys): rows in order, 15 distinct positive-weight
    neighbours each, the first pick of every row follows ``w_j / Σ w`` (chi-square), and the
    two halves of the rows (two random streams) include each neighbour at the same rate."""
    copies, deg, k = 20_000, 40, 15
    w = [0.0] + [float(1 + i % 4) for i in range(1, deg)]
    assert khop_compiled._threads(copies) == 2
    g = fan_graph(copies, weights=w, deg=deg)
    with use_kernel("compiled"):
        nbr, row = sample_weighted(g, torch.arange(copies), k, torch.Generator().manual_seed(3))
    assert torch.equal(row, torch.arange(copies).repeat_interleave(k))  # rows in order
    picks = (nbr - copies).view(copies, k)
    assert int((picks == 0).sum()) == 0, "a weight-0 edge was drawn"
    per_row = picks.sort(1).values
    assert bool((per_row[:, 1:] != per_row[:, :-1]).all()), "a neighbour was drawn twice"
    first = torch.bincount(picks[:, 0], minlength=deg)[1:].numpy()  # the draws' order
    expected = torch.tensor(w[1:], dtype=torch.float64) / sum(w) * copies
    assert stats.chisquare(first, expected.numpy()).pvalue > P_MIN
    halves = [torch.bincount(h.reshape(-1), minlength=deg)[1:].numpy()
              for h in (per_row[: copies // 2], per_row[copies // 2:])]
    assert stats.chi2_contingency(halves).pvalue > P_MIN
    assert not torch.equal(picks[: copies // 2], picks[copies // 2:])  # two streams


@pytest.mark.parametrize("weighted", [False, True])
def test_a_seed_reproduces_the_sample_on_one_or_two_threads(weighted):
    g = simple_graph(30_000, 400_000, seed=2)
    if weighted:  # a tenth of the edges of weight 0
        w = torch.rand(g.num_edges, generator=torch.Generator().manual_seed(1))
        g = CSRGraph(g.indptr, g.indices, torch.where(w < 0.1, 0.0, w))
    seeds = torch.randperm(30_000, generator=torch.Generator().manual_seed(0))[:9000]
    prev = torch.get_num_threads()
    out = []
    try:
        for threads in (1, 1, 2, 2):
            torch.set_num_threads(threads)
            with use_kernel("compiled"):
                s = KHop([10, 5], weighted=weighted).sample(g, seeds,
                                                            torch.Generator().manual_seed(7))
            check_structure(g, s, seeds)
            out.append(s)
    finally:
        torch.set_num_threads(prev)
    for a, b in (out[:2], out[2:]):  # the thread count picks the random streams
        assert torch.equal(a.input_nodes, b.input_nodes)
        assert all(torch.equal(x.src, y.src) for x, y in zip(a.blocks, b.blocks))
    if weighted:  # no weight-0 edge was drawn: look each sampled (row, neighbour) up
        n = g.num_nodes
        key, order = torch.sort(torch.repeat_interleave(torch.arange(n), g.degrees()) * n
                                + g.indices.long())
        for s in out:
            b = s.blocks[0]
            want = s.input_nodes[b.dst] * n + s.input_nodes[b.src]
            at = torch.searchsorted(key, want)
            assert torch.equal(key[at], want)
            assert bool((g.weights[order[at]] > 0).all()), "a weight-0 edge was drawn"


def test_remap_rejects_an_id_outside_the_graph_and_leaves_the_scratch_clean():
    rm = Remapper()
    with use_kernel("compiled"):
        rm.begin(torch.tensor([0, 1]), 10)
        with pytest.raises(ValueError, match="vertex id 10 at position 3 is outside"):
            rm.add(torch.tensor([5, 6, 1, 10, 7]))
        rm.abort()
        rm.begin(torch.tensor([2]), 10)  # 5 and 6 were not left in the scratch array
        assert rm.add(torch.tensor([6, 5, 2])).tolist() == [1, 2, 0]
        assert rm.end().tolist() == [2, 6, 5]
