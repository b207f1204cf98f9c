"""KHop: uniform / weighted k-hop sampling (fgnn.sampling.khop)."""

from __future__ import annotations

import itertools

import pytest
import torch
from scipy import stats

from conftest import random_graph
from fgnn.graph import CSRGraph
from fgnn.sampling import KHop, Sample
from fgnn.sampling import khop as khop_module
from fgnn.sampling.kernels import KERNELS, kernel_for, use_kernel
from fgnn.sampling.khop import sample_uniform, sample_weighted
from fgnn.sampling.khop_compiled import available as khop_compiled_available

P_MIN = 1e-3  # fixed seeds: the tests are deterministic, the threshold guards a real bias


def _forced(name: str):
    """``use_kernel(name)``; the test is skipped where the compiled twin cannot run (no numba)."""
    from fgnn.sampling import khop_compiled

    if name == "compiled" and not khop_compiled.available():
        pytest.skip("numba is not installed: no compiled twin")
    return use_kernel(name)


@pytest.fixture(params=KERNELS)
def twin(request):
    """Each twin of the sampling kernels (fgnn.sampling.kernels), forced on CPU tensors: the
    tests that take it hold the compiled, the vectorised CPU and the CUDA twin to the same
    statistics."""
    with _forced(request.param):
        yield request.param


def fan_graph(copies: int, weights: list[float] | None = None, deg: int = 20) -> CSRGraph:
    """``copies`` rows that all list the same ``deg`` neighbours ``copies .. copies+deg-1``.

    row 0 ─┐
    row 1 ─┼─► {c, c+1, ..., c+deg-1}   (c = copies; one independent draw per row)
    ...   ─┘
    """
    rows = torch.arange(copies).repeat_interleave(deg)
    cols = (copies + torch.arange(deg)).repeat(copies)
    w = None if weights is None else torch.tensor(weights, dtype=torch.float32).repeat(copies)
    return CSRGraph.from_edge_index(torch.stack([cols, rows]), num_nodes=copies + deg, weights=w)


def simple_graph(num_nodes: int, num_edges: int, seed: int) -> CSRGraph:
    """``random_graph`` without repeated (row, neighbour) pairs."""
    g = random_graph(num_nodes, num_edges, seed=seed)
    return CSRGraph.from_edge_index(g.edge_index(), num_nodes=num_nodes, dedup=True)


def global_edges(sample: Sample, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
    b = sample.blocks[layer]
    return sample.input_nodes[b.src], sample.input_nodes[b.dst]


def check_structure(graph: CSRGraph, sample: Sample, seeds: torch.Tensor) -> None:
    """Block layout invariants + every sampled edge exists + no repeated neighbour."""
    nodes = sample.input_nodes
    assert torch.equal(nodes[: seeds.numel()], seeds)
    assert torch.unique(nodes).numel() == nodes.numel()
    assert sample.blocks[0].num_src == nodes.numel()
    assert sample.blocks[-1].num_dst == seeds.numel()
    for lo, hi in zip(sample.blocks[:-1], sample.blocks[1:]):
        assert lo.num_dst == hi.num_src
    edges = set(zip(graph.edge_index()[0].tolist(), graph.edge_index()[1].tolist()))
    for layer, b in enumerate(sample.blocks):
        assert b.num_dst <= b.num_src
        assert b.src.dtype == torch.int64 and b.dst.dtype == torch.int64
        if b.num_edges:
            assert int(b.src.max()) < b.num_src and int(b.dst.max()) < b.num_dst
        src, dst = global_edges(sample, layer)
        pairs = list(zip(src.tolist(), dst.tolist()))
        assert set(pairs) <= edges, "a sampled edge is not in the graph"
        assert len(set(zip(b.src.tolist(), b.dst.tolist()))) == b.num_edges, "repeated edge"


@pytest.mark.parametrize("fanouts", [(3,), (15, 10, 5), (2, 2)])
def test_khop_structure_and_counts(twin, device, fanouts):
    g = simple_graph(300, 3000, seed=1).to(device)
    seeds = torch.randperm(300, generator=torch.Generator().manual_seed(0))[:40].to(device)
    sample = KHop(fanouts).sample(g, seeds, torch.Generator(device).manual_seed(0))
    assert sample.num_layers == len(fanouts)
    check_structure(g.to("cpu"), sample.to("cpu"), seeds.cpu())
    deg = g.degrees().cpu()
    nodes = sample.input_nodes.cpu()
    for layer, k in enumerate(reversed(fanouts)):  # blocks[0] = last hop
        b = sample.blocks[layer].to("cpu")
        per_dst = torch.bincount(b.dst, minlength=b.num_dst)
        assert torch.equal(per_dst, deg[nodes[: b.num_dst]].clamp(max=k))


def test_uniform_marginals_chi_square(twin):
    copies, deg, k = 4000, 20, 5
    g = fan_graph(copies, deg=deg)
    sample = KHop([k]).sample(g, torch.arange(copies), torch.Generator().manual_seed(3))
    src, dst = global_edges(sample, 0)
    assert torch.equal(torch.bincount(dst, minlength=copies), torch.full((copies,), k))
    counts = torch.bincount(src - copies, minlength=deg)
    assert int(counts.sum()) == copies * k
    assert stats.chisquare(counts.numpy()).pvalue > P_MIN


def test_uniform_subsets_chi_square(twin):
    """All C(5, 2) = 10 subsets equally likely (Floyd's algorithm is exact)."""
    copies, deg, k = 6000, 5, 2
    g = fan_graph(copies, deg=deg)
    sample = KHop([k]).sample(g, torch.arange(copies), torch.Generator().manual_seed(4))
    src, dst = global_edges(sample, 0)
    order = torch.argsort(dst * 100 + src)
    pairs = (src[order] - copies).view(copies, k)
    assert bool((pairs[:, 0] != pairs[:, 1]).all()), "a neighbour was drawn twice"
    index = {s: i for i, s in enumerate(itertools.combinations(range(deg), k))}
    counts = torch.zeros(len(index))
    for a, b in pairs.tolist():
        counts[index[(a, b)]] += 1
    assert stats.chisquare(counts.numpy()).pvalue > P_MIN


def test_sample_uniform_large_degree_no_repeats(twin):
    g = fan_graph(1, deg=100_000)
    rows = torch.zeros(500, dtype=torch.int64)
    nbr, row = sample_uniform(g, rows, 15, torch.Generator().manual_seed(0))
    assert nbr.numel() == 500 * 15
    per_row = nbr.view(500, 15).sort(1).values
    assert bool((per_row[:, 1:] != per_row[:, :-1]).all())
    assert int(nbr.min()) >= 1 and int(nbr.max()) <= 100_000
    # both halves of the range are reached evenly (no truncation bias at the top end)
    assert abs(float((nbr > 50_000).float().mean()) - 0.5) < 0.03


def test_weighted_follows_weights(twin):
    w = [1.0, 2.0, 3.0, 4.0, 0.0]
    copies = 6000
    g = fan_graph(copies, weights=w, deg=5)
    sample = KHop([1], weighted=True).sample(g, torch.arange(copies),
                                             torch.Generator().manual_seed(5))
    src, _ = global_edges(sample, 0)
    counts = torch.bincount(src - copies, minlength=5)
    assert int(counts[4]) == 0, "a zero-weight edge was sampled"
    expected = torch.tensor(w[:4], dtype=torch.float64) / 10 * copies
    assert stats.chisquare(counts[:4].numpy(), expected.numpy()).pvalue > P_MIN


@pytest.mark.parametrize("w,max_rounds", [
    ([1.0, 2.0, 3.0, 4.0], 4),       # rejection path (compiled twin: keys, deg <= 2 fanout)
    ([1.0, 2.0, 3.0, 4.0], 0),       # exact exponential-key fallback only
    ([30.0, 1.0, 1.0, 2.0], 1),      # skewed: rejection then fallback for the short rows
    ([1.0, 2.0, 3.0, 4.0, 1.0, 2.0, 3.0, 4.0], 4),  # deg > 2 fanout: every twin's rejection
    ([1.0, 2.0, 3.0, 4.0, 1.0, 2.0, 3.0, 4.0], 0),
    ([30.0, 1.0, 1.0, 2.0, 1.0, 3.0, 1.0, 2.0], 1),
])
def test_weighted_pairs_without_replacement(twin, w, max_rounds):
    copies, deg = 6000, len(w)
    g = fan_graph(copies, weights=w, deg=deg)
    nbr, row = sample_weighted(g, torch.arange(copies), 2, torch.Generator().manual_seed(6),
                               max_rounds=max_rounds)
    assert torch.equal(torch.bincount(row, minlength=copies), torch.full((copies,), 2))
    order = torch.argsort(row * 100 + nbr)
    pairs = (nbr[order] - copies).view(copies, 2).tolist()
    subsets = list(itertools.combinations(range(deg), 2))
    tot = sum(w)
    expected = [w[i] / tot * w[j] / (tot - w[i]) + w[j] / tot * w[i] / (tot - w[j])
                for i, j in subsets]
    counts = [0] * len(subsets)
    for a, b in pairs:
        assert a != b
        counts[subsets.index((a, b))] += 1
    exp = [e * copies for e in expected]
    assert stats.chisquare(counts, exp).pvalue > P_MIN


def test_weighted_rows_of_different_scales_draw_the_same_law(twin):
    """Rows whose weights differ by a factor (each row's rejection bound is its own largest
    weight), sampled in an order other than their ids: every row draws the same pair law."""
    w = [1.0, 2.0, 3.0, 4.0, 1.0, 2.0, 3.0, 4.0]
    copies, deg = 8000, len(w)
    g = fan_graph(copies, weights=w, deg=deg)
    scale = torch.where(torch.arange(copies) % 2 == 1, 100.0, 1.0)
    g = CSRGraph(g.indptr, g.indices, g.weights * scale.repeat_interleave(deg))
    rows = torch.arange(copies).flip(0)
    nbr, pos = sample_weighted(g, rows, 2, torch.Generator().manual_seed(8))
    pairs = (nbr[torch.argsort(pos * 100 + nbr)] - copies).view(copies, 2)
    subsets = list(itertools.combinations(range(deg), 2))
    tot = sum(w)
    expected = [w[i] / tot * w[j] / (tot - w[i]) + w[j] / tot * w[i] / (tot - w[j])
                for i, j in subsets]
    for odd in (0, 1):  # the two scales, each against the law
        counts = [0] * len(subsets)
        for a, b in pairs[rows % 2 == odd].tolist():
            counts[subsets.index((a, b))] += 1
        exp = [e * copies / 2 for e in expected]
        assert stats.chisquare(counts, exp).pvalue > P_MIN


@pytest.mark.parametrize("deg", [6, 20])  # the compiled twin: keys; rejection, then keys
def test_weighted_fewer_positive_than_fanout(twin, deg):
    w = [1.0] + [0.0] * (deg - 2) + [2.0]
    g = fan_graph(50, weights=w, deg=deg)
    nbr, row = sample_weighted(g, torch.arange(50), 3, torch.Generator().manual_seed(1))
    assert torch.equal(torch.bincount(row, minlength=50), torch.full((50,), 2))
    assert set((nbr - 50).tolist()) == {0, deg - 1}


def test_weighted_small_rows_keep_all_positive(twin):
    g = fan_graph(10, weights=[1.0, 0.0, 2.0], deg=3)
    sample = KHop([5], weighted=True).sample(g, torch.arange(10), torch.Generator().manual_seed(0))
    src, _ = global_edges(sample, 0)
    assert sorted(set((src - 10).tolist())) == [0, 2] and src.numel() == 20


def test_replace_draws_fanout_each():
    g = fan_graph(100, deg=3)
    sample = KHop([6], replace=True).sample(g, torch.arange(100), torch.Generator().manual_seed(0))
    assert sample.blocks[0].num_edges == 600


def test_reproducible_with_generator(twin):
    g = random_graph(500, 5000, seed=2)
    seeds = torch.arange(0, 500, 7)
    s = KHop([10, 5])
    a = s.sample(g, seeds, torch.Generator().manual_seed(9))
    b = s.sample(g, seeds, torch.Generator().manual_seed(9))
    c = s.sample(g, seeds, torch.Generator().manual_seed(10))
    assert torch.equal(a.input_nodes, b.input_nodes)
    for x, y in zip(a.blocks, b.blocks):
        assert torch.equal(x.src, y.src) and torch.equal(x.dst, y.dst)
    assert not torch.equal(a.input_nodes, c.input_nodes)


def test_int32_indices_and_isolated_vertices(twin):
    g = simple_graph(100, 150, seed=3)
    g32 = CSRGraph(g.indptr, g.indices.int())
    seeds = torch.arange(100)
    sample = KHop([4, 4]).sample(g32, seeds, torch.Generator().manual_seed(0))
    check_structure(g, sample, seeds)


@pytest.mark.parametrize("fanouts", [[], [0], [3, -1], 5, [2.5], None])
def test_bad_fanouts(fanouts):
    with pytest.raises(ValueError, match="fanouts"):
        KHop(fanouts)


def test_bad_seeds_and_graph(twin):
    g = random_graph(50, 200)
    s = KHop([3])
    with pytest.raises(ValueError, match="outside"):
        s.sample(g, torch.tensor([0, 50]))
    with pytest.raises(ValueError, match="outside"):
        s.sample(g, torch.tensor([-1]))
    with pytest.raises(ValueError, match="dtype"):
        s.sample(g, torch.tensor([0.0]))
    with pytest.raises(ValueError, match="1-D"):
        s.sample(g, torch.zeros(2, 2, dtype=torch.int64))
    with pytest.raises(ValueError, match="device"):
        s.sample(g, torch.tensor([0, 1], device="meta"))
    with pytest.raises(ValueError, match="distinct"):
        s.sample(g, torch.tensor([3, 4, 3]))
    # the sampler is still usable after an error
    assert s.sample(g, torch.tensor([3, 4])).seeds.tolist() == [3, 4]
    with pytest.raises(ValueError, match="weights"):
        KHop([3], weighted=True).sample(g, torch.tensor([0]))
    with pytest.raises(ValueError, match="replace"):
        KHop([3], weighted=True, replace=True)


def test_empty_seeds(twin):
    g = random_graph(20, 50)
    sample = KHop([3, 2]).sample(g, torch.empty(0, dtype=torch.int64))
    assert sample.input_nodes.numel() == 0 and sample.num_edges == 0


@pytest.mark.parametrize("fanouts", [(5, 3), (15, 10, 5)])
def test_new_frontier_samples_each_vertex_once_and_reuses_its_edges(twin, device, fanouts):
    """``frontier="new"`` (PyG's NeighborLoader): a vertex draws neighbours only at the hop after
    it was discovered, with that hop's fanout, and every later layer reuses those edges."""
    g = simple_graph(300, 3000, seed=1).to(device)
    seeds = torch.randperm(300, generator=torch.Generator().manual_seed(0))[:40].to(device)
    sample = KHop(fanouts, frontier="new").sample(g, seeds, torch.Generator(device).manual_seed(0))
    sample, g = sample.to("cpu"), g.to("cpu")
    check_structure(g, sample, seeds.cpu())
    deg, nodes = g.degrees(), sample.input_nodes
    hops = list(reversed(sample.blocks))  # hops[h] aggregates the edges of hops 0..h
    for h in range(1, len(hops)):  # each layer's edges extend the previous layer's
        prev = hops[h - 1]
        assert torch.equal(hops[h].src[:prev.num_edges], prev.src)
        assert torch.equal(hops[h].dst[:prev.num_edges], prev.dst)
    lo = 0
    for h, b in enumerate(hops):  # the vertices discovered by hop h-1 sample fanouts[h] each
        per_dst = torch.bincount(b.dst, minlength=b.num_dst)
        expect = deg[nodes[lo:b.num_dst]].clamp(max=fanouts[h])
        assert torch.equal(per_dst[lo:b.num_dst], expect)
        lo = b.num_dst


def test_new_frontier_blocks_compute_what_the_whole_sampled_subgraph_computes(twin):
    """A model on the ``frontier="new"`` blocks gives the seeds the logits of PyG's computation:
    every layer over all vertices and all sampled edges of the subgraph."""
    from fgnn.models import GraphSAGE
    from fgnn.sampling.base import Block

    g = simple_graph(400, 4000, seed=2)
    seeds = torch.arange(0, 400, 13)
    sample = KHop([6, 4], frontier="new").sample(g, seeds, torch.Generator().manual_seed(3))
    torch.manual_seed(0)
    model = GraphSAGE(8, 3, num_layers=2, hidden=16, dropout=0.0).eval()
    x = torch.randn(400, 8)[sample.input_nodes]
    inp = sample.blocks[0]
    whole = Block(inp.src, inp.dst, num_src=x.shape[0], num_dst=x.shape[0])
    with torch.no_grad():
        ours = model(sample.blocks, x)
        pyg = model([whole, whole], x)[: seeds.numel()]
    torch.testing.assert_close(ours, pyg, rtol=1e-5, atol=1e-6)


def test_bad_frontier():
    with pytest.raises(ValueError, match="frontier"):
        KHop([5], frontier="old")


def _spy_twins(monkeypatch, kind: str) -> list[str]:
    """Record, in order, which twin of ``kind`` (uniform, weighted) each hop calls."""
    calls: list[str] = []
    for name in (f"{kind}_cpu", f"{kind}_cuda", f"{kind}_compiled"):
        real = getattr(khop_module, name)
        monkeypatch.setattr(khop_module, name,
                            lambda *a, _n=name, _f=real: calls.append(_n) or _f(*a))
    return calls


def test_kernel_follows_the_device_and_the_hop_size_unless_forced(monkeypatch):
    """CPU rows: the compiled twin for hops of at least MIN_EDGES candidate edges (when numba
    is there), the vectorised one below; other devices: the CUDA twin; a forced twin wins."""
    from fgnn.sampling import khop_compiled

    calls = _spy_twins(monkeypatch, "uniform")
    monkeypatch.setattr(khop_compiled, "MIN_EDGES", 12)
    g = fan_graph(3, deg=10)
    sample_uniform(g, torch.arange(3), 3)  # 9 candidate edges: below the size rule
    sample_uniform(g, torch.arange(3), 4)  # 12: at it
    with use_kernel("cuda"):
        sample_uniform(g, torch.arange(3), 4)
        assert kernel_for(torch.zeros(1)) == "cuda"
    big = "uniform_compiled" if khop_compiled.available() else "uniform_cpu"
    assert calls == ["uniform_cpu", big, "uniform_cuda"]
    assert kernel_for(torch.zeros(1), work=11) == "cpu"
    assert kernel_for(torch.zeros(1, device="meta")) == "cuda"
    monkeypatch.setenv("FGNN_COMPILED", "0")
    assert kernel_for(torch.zeros(1), work=10**9) == "cpu"
    with pytest.raises(ValueError, match="needs numba"):
        with use_kernel("compiled"):
            pass
    with pytest.raises(ValueError, match="kernel must be one of compiled, cpu, cuda"):
        with use_kernel("gpu"):
            pass


def test_weighted_kernel_follows_the_hop_size_and_the_fanout(monkeypatch):
    """Weighted hops pick their twin as uniform ones do: the compiled one from MIN_EDGES
    candidate edges up to LOOP_FANOUT, the vectorised one otherwise (on CPU rows)."""
    from fgnn.sampling import khop_compiled
    from fgnn.sampling.khop_cpu import LOOP_FANOUT

    calls = _spy_twins(monkeypatch, "weighted")
    monkeypatch.setattr(khop_compiled, "MIN_EDGES", 12)
    g = fan_graph(3, weights=[1.0] * 40, deg=40)
    for k in (3, 4, LOOP_FANOUT + 1):  # 9 candidate edges; 12; a fanout above the loops'
        sample_weighted(g, torch.arange(3), k)
    with use_kernel("cuda"):
        sample_weighted(g, torch.arange(3), 4)
    big = "weighted_compiled" if khop_compiled.available() else "weighted_cpu"
    assert calls == ["weighted_cpu", big, "weighted_cpu", "weighted_cuda"]


@pytest.mark.parametrize("weights", [None, [float(1 + i % 4) for i in range(40)]])
def test_twins_draw_the_same_law_at_fanout_15_of_40(weights):
    """The CPU twin's Python loop over the fanout and the CUDA twin's all-at-once kernels give
    the same per-neighbour inclusion counts (chi-square test of homogeneity), no repeats."""
    copies, deg, k = 1500, 40, 15
    g = fan_graph(copies, weights=weights, deg=deg)
    fn = sample_uniform if weights is None else sample_weighted
    counts = []
    for name in KERNELS:
        if name == "compiled" and not khop_compiled_available():
            continue
        with use_kernel(name):
            nbr, row = fn(g, torch.arange(copies), k, torch.Generator().manual_seed(11))
        assert torch.equal(torch.bincount(row, minlength=copies), torch.full((copies,), k))
        per_row = (nbr - copies)[torch.argsort(row * deg + nbr - copies)].view(copies, k)
        assert bool((per_row[:, 1:] != per_row[:, :-1]).all()), (name, "drawn twice")
        counts.append(torch.bincount(per_row.view(-1), minlength=deg).numpy())
    assert stats.chi2_contingency(counts).pvalue > P_MIN
    if weights is not None:  # heavier edges are included more often
        heavy, light = counts[0][3::4].sum(), counts[0][0::4].sum()
        assert heavy > 1.5 * light
