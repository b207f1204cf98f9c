"""RandomWalk: PinSAGE random-walk neighbourhoods (fgnn.sampling.random_walk)."""

from __future__ import annotations

import pytest
import torch

from fgnn.graph import CSRGraph
from fgnn.sampling import RandomWalk
from fgnn.sampling.random_walk import random_walk_topk, random_walks


def graph_from_rows(rows: dict[int, list[int]], n: int) -> CSRGraph:
    src = [u for v, nb in rows.items() for u in nb]
    dst = [v for v, nb in rows.items() for _ in nb]
    return CSRGraph.from_edge_index(torch.tensor([src, dst]), num_nodes=n)


def test_deterministic_walks_exact_counts():
    """Every vertex has one neighbour, so each walk is fixed.

    0 → 1 → 2 → 0 (a 3-cycle: walks from 0 visit 1, 2, 0), 3 → 4 → 5 (5 is a dead end).
    """
    g = graph_from_rows({0: [1], 1: [2], 2: [0], 3: [4], 4: [5]}, 6)
    sampler = RandomWalk(num_walks=4, walk_length=3, top_k=5, num_layers=1)
    sample = sampler.sample(g, torch.tensor([0, 3]), torch.Generator().manual_seed(0))
    b = sample.blocks[0]
    got = {(int(sample.input_nodes[d]), int(sample.input_nodes[s])): float(w)
           for s, d, w in zip(b.src, b.dst, b.weights)}
    # from 0: visits 1, 2, 0 per walk; the start is excluded; from 3: 4, 5, then stops
    assert got == {(0, 1): 4.0, (0, 2): 4.0, (3, 4): 4.0, (3, 5): 4.0}


def test_topk_counts_and_ties():
    visits = torch.tensor([[7, 3, 7, 5, 3, 7, 9, -1, 1, 1, 1, 3],
                           [2, 2, 2, 2, -1, -1, -1, -1, -1, -1, -1, -1]])
    nbr, row, cnt = random_walk_topk(visits, torch.tensor([1, 2]), top_k=3)
    # row 0: 1 is the start (excluded); 7 and 3 visited 3x (tie -> smaller id first), 5 and 9 1x
    assert nbr.tolist() == [3, 7, 5] and row.tolist() == [0, 0, 0]
    assert cnt.tolist() == [3.0, 3.0, 1.0]


def test_visit_counts_match_exact_expectation():
    """Mean visit counts equal num_walks · Σ_t P^t[start] (brute-force transition matrix).

    0 → {1, 2}, 1 → {0, 2, 3}, 2 → {3}, 3 → {0, 1}
    """
    rows = {0: [1, 2], 1: [0, 2, 3], 2: [3], 3: [0, 1]}
    g = graph_from_rows(rows, 4)
    p = torch.zeros(4, 4, dtype=torch.float64)
    for v, nb in rows.items():
        for u in nb:
            p[v, u] = 1 / len(nb)
    walks, length, trials = 4, 3, 20000
    expected = walks * sum(torch.linalg.matrix_power(p, t)[0] for t in range(1, length + 1))
    visits = random_walks(g, torch.zeros(trials, dtype=torch.int64), walks, length,
                          torch.Generator().manual_seed(1))
    assert visits.shape == (trials, walks * length)
    mean = torch.stack([(visits == v).sum(1) for v in range(4)], 1).double().mean(0)
    std = torch.stack([(visits == v).sum(1) for v in range(4)], 1).double().std(0)
    assert torch.all((mean - expected).abs() < 5 * std / trials ** 0.5)


def test_structure_and_reproducibility():
    g = CSRGraph.from_edge_index(torch.randint(0, 200, (2, 2000),
                                               generator=torch.Generator().manual_seed(0)),
                                 num_nodes=200)
    sampler = RandomWalk()
    seeds = torch.arange(0, 200, 9)
    a = sampler.sample(g, seeds, torch.Generator().manual_seed(3))
    b = sampler.sample(g, seeds, torch.Generator().manual_seed(3))
    assert a.num_layers == 3 and torch.equal(a.input_nodes, b.input_nodes)
    assert torch.equal(a.input_nodes[: seeds.numel()], seeds)
    for lo, hi in zip(a.blocks[:-1], a.blocks[1:]):
        assert lo.num_dst == hi.num_src
    for blk in a.blocks:
        assert torch.bincount(blk.dst, minlength=blk.num_dst).max() <= 5
        assert blk.weights.dtype == torch.float32 and bool((blk.weights >= 1).all())
        src, dst = a.input_nodes[blk.src], a.input_nodes[blk.dst]
        assert not bool((src == dst).any())


def test_empty_graph_and_bad_args():
    g = CSRGraph(torch.zeros(4, dtype=torch.int64), torch.empty(0, dtype=torch.int64))
    sample = RandomWalk(num_layers=2).sample(g, torch.tensor([0, 2]))
    assert sample.num_edges == 0 and sample.input_nodes.tolist() == [0, 2]
    for kw in ({"num_walks": 0}, {"walk_length": -1}, {"top_k": 1.5}, {"num_layers": 0}):
        with pytest.raises(ValueError, match=next(iter(kw))):
            RandomWalk(**kw)
