"""The compiled CPU twin (fgnn.sampling.khop_compiled): what the shared twin tests of
test_sampling_khop.py / test_sampling_remap.py do not reach (threads, bad ids, reproducibility)."""

from __future__ import annotations

import pytest
import torch
from scipy import stats

from fgnn.sampling import KHop
from fgnn.sampling.kernels import use_kernel
from fgnn.sampling.khop import sample_uniform
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


def test_a_seed_reproduces_the_sample_on_one_or_two_threads():
    g = simple_graph(30_000, 400_000, seed=2)
    seeds = torch.randperm(30_000, generator=torch.Generator().manual_seed(0))[:9000]
    prev = torch.get_num_threads()
    out = []
    try:
        for threads in (1, 1, 2, 2):
            torch.set_num_threads(threads)
            with use_kernel("compiled"):
                s = KHop([10, 5]).sample(g, seeds, torch.Generator().manual_seed(7))
            check_structure(g, s, seeds)
            out.append(s)
    finally:
        torch.set_num_threads(prev)
    for a, b in (out[:2], out[2:]):  # the thread count picks the random streams
        assert torch.equal(a.input_nodes, b.input_nodes)
        assert all(torch.equal(x.src, y.src) for x, y in zip(a.blocks, b.blocks))


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
