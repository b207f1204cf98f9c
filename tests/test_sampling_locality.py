"""LocalityAwareKHop and Algorithm 2 (fgnn.sampling.locality; Song & Jiang §4)."""

from __future__ import annotations

import pytest
import torch

from fgnn.config import SamplerConfig
from fgnn.graph import CSRGraph
from fgnn.sampling import (KHop, LocalityAwareKHop, RandomWalk, ScaleController, build_sampler,
                           neighbour_sets)


def fan_graph(copies: int, deg: int) -> CSRGraph:
    """Rows ``0..copies-1`` all list neighbours ``copies..copies+deg-1``."""
    rows = torch.arange(copies).repeat_interleave(deg)
    cols = (copies + torch.arange(deg)).repeat(copies)
    return CSRGraph.from_edge_index(torch.stack([cols, rows]), num_nodes=copies + deg)


def draw(copies: int, deg: int, n_local: int, fanout: int, scale: float, agg: str = "mean",
         seed: int = 0):
    """One hop from every row; returns (neighbour offset, row, weight) and the local mask."""
    g = fan_graph(copies, deg)
    local = torch.zeros(g.num_nodes, dtype=torch.bool)
    local[copies: copies + n_local] = True
    s = LocalityAwareKHop([fanout], local=local, scale=scale, aggregation=agg)
    sample = s.sample(g, torch.arange(copies), torch.Generator().manual_seed(seed))
    b = sample.blocks[0]
    return sample.input_nodes[b.src] - copies, sample.input_nodes[b.dst], b.weights.double()


@pytest.mark.parametrize("n_local,fanout,scale,share", [
    (10, 5, 4.0, 40 / 70),    # q_loc = 4·5/70, q_non = 5/70: E[local] = 40/14 of 5
    (5, 10, 8.0, 0.5),        # clipped: q_loc = 1, q_non = (10-5)/15: E[local] = 5 of 10
    (10, 5, 1.0, 0.25),       # s = 1: uniform
])
def test_local_share_raised_as_configured(n_local, fanout, scale, share):
    copies, deg = 6000, 40
    off, row, _ = draw(copies, deg, n_local, fanout, scale)
    n = off.numel()
    # Σ q_j is kept (Eq. 8): fanout neighbours per row in expectation
    assert abs(n / copies - fanout) < 4 * (fanout / copies) ** 0.5
    got = float((off < n_local).double().mean())
    assert abs(got - share) < 4 * (share * (1 - share) / n) ** 0.5 + 1e-9


@pytest.mark.parametrize("agg", ["mean", "sum"])
@pytest.mark.parametrize("scale", [1.0, 4.0, 8.0])
def test_weighted_aggregation_unbiased(agg, scale):
    """E[Σ_sampled w_ij x_j] equals the exact mean (or sum) of the neighbour features (Eq. 1)."""
    copies, deg, n_local, fanout = 6000, 40, 6, 5
    x = torch.rand(deg, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    x[:n_local] += 3.0  # local neighbours differ: a biased estimator would show
    off, row, w = draw(copies, deg, n_local, fanout, scale, agg, seed=int(scale))
    est = torch.zeros(copies, dtype=torch.float64).index_add_(0, row, w * x[off])
    exact = x.mean() if agg == "mean" else x.sum()
    assert abs(float(est.mean()) - float(exact)) < 4 * float(est.std()) / copies ** 0.5


def test_scale_controller_algorithm2_exact():
    c = ScaleController(lt=0.15, ut=0.2, max_s=8)
    assert (c.s, c.pre, c.fixed) == (1.0, 1.0, False)
    assert c.update(0.5) == 2.0 and c.pre == 1.0          # r > ut: pre = s; s *= 2
    assert c.update(0.3) == 4.0 and c.pre == 2.0
    assert c.update(0.1) == 3.0 and c.pre == 2.0          # r < lt, s != 1: s = (s + pre) / 2
    assert c.update(0.1) == 2.5 and not c.fixed
    assert c.update(0.17) == 2.5 and c.fixed              # lt <= r <= ut: fix s
    assert c.update(0.9) == 2.5                           # fixed: no more changes

    c = ScaleController(lt=0.15, ut=0.2, max_s=8)
    for want in (2.0, 4.0, 8.0):
        assert c.update(0.5) == want
    assert c.update(0.5) == 8.0 and c.fixed               # s >= MAXS: fix

    c = ScaleController()
    assert c.update(0.05) == 1.0 and c.fixed              # r < lt but s == 1: fix at 1


def test_scale_controller_bad_args():
    with pytest.raises(ValueError, match="lt"):
        ScaleController(lt=0.3, ut=0.2)
    with pytest.raises(ValueError, match="max_s"):
        ScaleController(max_s=0.5)
    with pytest.raises(ValueError, match="r="):
        ScaleController().update(1.5)


def test_end_epoch_drives_scale():
    s = LocalityAwareKHop([3])
    assert s.end_epoch(0.5) == 2.0 and s.scale == 2.0
    with pytest.raises(ValueError, match="scale"):
        s.scale = 0.5


def test_neighbour_sets_drawn_graph():
    """Rows: 0 ← {1, 2}, 1 ← {2}, 2 ← {}, 3 ← {1, 2}, 4 ← {0}.  B = {2}.

    v2 = A·v1 counts neighbours in B: v2 = [1, 1, 0, 1, 0]; v3 = A·v2 = [1, 0, 0, 1, 1].
    """
    rows = {0: [1, 2], 1: [2], 3: [1, 2], 4: [0]}
    src = [u for v, nb in rows.items() for u in nb]
    dst = [v for v, nb in rows.items() for _ in nb]
    g = CSRGraph.from_edge_index(torch.tensor([src, dst]), num_nodes=5)
    q1, q2, q3 = neighbour_sets(g, {2}, 3, size=5)
    assert q1.nonzero().flatten().tolist() == [2]
    assert q2.nonzero().flatten().tolist() == [0, 1, 3]
    assert q3.nonzero().flatten().tolist() == [0, 3, 4]
    _, q2_small, _ = neighbour_sets(g, torch.tensor([False, False, True, False, False]), 3,
                                    size=1)
    assert int(q2_small.sum()) == 1


def test_multi_hop_structure_and_bad_local():
    g = fan_graph(50, 30)
    s = LocalityAwareKHop([5, 3], local=torch.arange(50, 60), scale=2.0)
    sample = s.sample(g, torch.arange(10), torch.Generator().manual_seed(0))
    assert sample.num_layers == 2 and sample.blocks[1].num_dst == 10
    assert all(b.weights is not None and b.weights.numel() == b.num_edges
               for b in sample.blocks)
    s.set_local(torch.zeros(5, dtype=torch.bool))
    with pytest.raises(ValueError, match="shape"):
        s.sample(g, torch.arange(3))
    s.set_local([999])
    with pytest.raises(ValueError, match="outside"):
        s.sample(g, torch.arange(3))


def test_build_sampler_kinds():
    assert type(build_sampler(SamplerConfig(kind="khop"))) is KHop
    w = build_sampler(SamplerConfig(kind="weighted", fanouts=(10, 25)))
    assert isinstance(w, KHop) and w.weighted and w.fanouts == (10, 25)
    rw = build_sampler(SamplerConfig(kind="random_walk", top_k=3))
    assert isinstance(rw, RandomWalk) and rw.top_k == 3 and rw.num_layers == 3
    loc = build_sampler(SamplerConfig(kind="locality"), scale=2.0)
    assert isinstance(loc, LocalityAwareKHop) and loc.scale == 2.0
    with pytest.raises(ValueError, match="keyword"):
        build_sampler(SamplerConfig(kind="khop"), bogus=1)
    with pytest.raises(ValueError, match="SamplerConfig"):
        build_sampler("khop")


def test_each_neighbour_included_with_its_eq8_probability():
    copies, deg, n_local, fanout, scale = 6000, 40, 10, 5, 4.0
    off, _, w = draw(copies, deg, n_local, fanout, scale, agg="sum", seed=11)
    q = torch.full((deg,), fanout / (scale * n_local + deg - n_local), dtype=torch.float64)
    q[:n_local] *= scale
    counts = torch.bincount(off, minlength=deg).double()
    z = (counts - copies * q) / (copies * q * (1 - q)).sqrt()
    assert float(z.abs().max()) < 4.5
    assert torch.allclose(w, 1.0 / q[off])  # Block.weights = 1/q of each drawn neighbour


def test_explicit_layer_sets():
    g = fan_graph(100, 20)
    q1 = torch.zeros(g.num_nodes, dtype=torch.bool)
    q1[100:105] = True
    s = LocalityAwareKHop([4], scale=8.0)
    with pytest.raises(ValueError, match="2 masks|1 masks"):
        s.set_layer_sets([q1, q1])
    s.set_layer_sets([q1])
    sample = s.sample(g, torch.arange(100), torch.Generator().manual_seed(2))
    src = sample.input_nodes[sample.blocks[0].src]
    # q_loc = min(1, 8·4/(40+15)) = 32/55, q_non = 4/55: E[local share] = 160/(160+60)
    share = float(((src >= 100) & (src < 105)).double().mean())
    assert abs(share - 160 / 220) < 0.05
