"""Hot-first reordering (DataTiering Algorithm 2)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import random_graph
from fgnn.cache import hot_first_permutation, load_cache, reorder, reorder_graph


def test_permutation_matches_paper_example():
    # §3.2: scores [0.1, 0.4, 0.2, 0.3] sort to [0.4, 0.3, 0.2, 0.1]; srt_idx = [3, 0, 2, 1].
    perm, inv = hot_first_permutation(torch.tensor([0.1, 0.4, 0.2, 0.3]))
    assert inv.tolist() == [3, 0, 2, 1]
    assert perm.tolist() == [1, 3, 2, 0]


def _edge_set(src, dst):
    return set(zip(src.tolist(), dst.tolist()))


@pytest.mark.parametrize("weighted", [False, True])
def test_reordering_preserves_graph_and_features(weighted):
    g = random_graph(300, 2000, seed=4, weighted=weighted)
    score = torch.rand(300, generator=torch.Generator().manual_seed(1))
    feats = torch.randn(300, 8)
    r = reorder(g, score, feats)
    r.graph.validate()
    assert r.graph.num_edges == g.num_edges
    # Hot first: new id 0 is the highest score.
    assert bool((score[r.perm][:-1] >= score[r.perm][1:]).all())
    # Same edges after mapping new ids back to old ids (with the same weights).
    old_ei, new_ei = g.edge_index(), r.graph.edge_index()
    back = r.to_old(new_ei)
    if weighted:
        key_old = {(int(s), int(d)): float(w) for s, d, w in zip(*old_ei, g.weights)}
        key_new = {(int(s), int(d)): float(w) for s, d, w in zip(*back, r.graph.weights)}
        assert key_old == key_new
    assert sorted(zip(*back.tolist())) == sorted(zip(*old_ei.tolist()))
    # Rows stay sorted within each row.
    for v in range(0, 300, 37):
        row = r.graph.indices[r.graph.indptr[v]:r.graph.indptr[v + 1]]
        assert torch.equal(row, torch.sort(row).values)
    # Features follow their vertices.
    assert torch.equal(r.features[r.to_new(torch.arange(300))], feats)
    assert torch.equal(r.to_old(r.to_new(torch.arange(300))), torch.arange(300))


def test_cached_is_an_id_comparison_after_reordering():
    g = random_graph(100, 400, seed=2)
    score = torch.randperm(100, generator=torch.Generator().manual_seed(0)).float()
    feats = torch.randn(100, 4)
    r = reorder(g, score, feats)
    cache = load_cache(score[r.perm], 0.2, r.features)  # hotness in the new numbering
    assert cache.ids.tolist() == list(range(20))
    assert torch.equal(cache.slot >= 0, torch.arange(100) < 20)


def test_reorder_memmap_features(tmp_path):
    arr = np.lib.format.open_memmap(tmp_path / "x.npy", mode="w+", dtype=np.float32,
                                    shape=(10, 3))
    arr[:] = np.arange(30, dtype=np.float32).reshape(10, 3)
    g = random_graph(10, 30)
    r = reorder(g, torch.arange(10).float(), arr)  # reverse order
    assert r.features[0].tolist() == [27.0, 28.0, 29.0]


def test_bad_input():
    g = random_graph(10, 30)
    with pytest.raises(ValueError, match="score has shape"):
        reorder(g, torch.zeros(9))
    with pytest.raises(ValueError, match="permutation"):
        reorder_graph(g, torch.zeros(10, dtype=torch.long))
    with pytest.raises(ValueError, match="rows has 9 rows"):
        reorder(g, torch.zeros(10), torch.zeros(9, 2))
