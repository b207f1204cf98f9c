"""Hot-first reordering (DataTiering Algorithm 2)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import random_graph
from fgnn.cache import FeatureStore, hot_first_permutation, load_cache, reorder, reorder_graph
from fgnn.cache.reorder import reorder_dataset
from fgnn.data import load_dataset, save_dataset
from fgnn.data.synthetic import rmat_dataset
from fgnn.models import GraphSAGE
from fgnn.sampling import KHop
from fgnn.training import evaluate


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
    # Each row is its old row relabelled, neighbours in their old order (Algorithm 2 copies the
    # lists), weights alongside.
    for v in range(300):
        o = int(r.perm[v])
        old = slice(int(g.indptr[o]), int(g.indptr[o + 1]))
        new = slice(int(r.graph.indptr[v]), int(r.graph.indptr[v + 1]))
        assert torch.equal(r.graph.indices[new].long(), r.inv[g.indices[old].long()])
        if weighted:
            assert torch.equal(r.graph.weights[new], g.weights[old])
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
    cached = FeatureStore.single(r.features, cache).cached_mask(torch.arange(100))
    assert torch.equal(cached, torch.arange(100) < 20)


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


@pytest.fixture(scope="module")
def small():
    return rmat_dataset(scale=8, edge_factor=6, feat_dim=8, num_classes=3, train_frac=0.3,
                        val_frac=0.2, test_frac=0.2, seed=3)


def _check_same_dataset(ds, new, re):
    """``new`` is ``ds`` renumbered by ``re``: every per-vertex array follows its vertex."""
    assert torch.equal(new.labels[re.inv], ds.labels)
    assert np.array_equal(np.asarray(new.features)[re.inv.numpy()], np.asarray(ds.features))
    for split in ("train_idx", "val_idx", "test_idx"):  # same vertices, same order
        assert torch.equal(re.perm[getattr(new, split)], getattr(ds, split))


def test_reorder_dataset_keeps_sampling_and_evaluation_identical(small):
    score = small.graph.in_degrees().float()
    new, re = reorder_dataset(small, score)
    _check_same_dataset(small, new, re)
    assert bool((score[re.perm][:-1] >= score[re.perm][1:]).all())  # hot first
    # k-hop sampling draws the same neighbours (relabelled) from the same random numbers
    seeds = small.train_idx[:16]
    a = KHop([4, 3]).sample(small.graph, seeds, torch.Generator().manual_seed(5))
    b = KHop([4, 3]).sample(new.graph, re.inv[seeds], torch.Generator().manual_seed(5))
    assert torch.equal(re.perm[b.input_nodes], a.input_nodes)
    assert all(torch.equal(x.src, y.src) and torch.equal(x.dst, y.dst)
               for x, y in zip(a.blocks, b.blocks))
    # the same weights score the same on both numberings (full-neighbour and sampled)
    torch.manual_seed(0)
    model = GraphSAGE(small.feat_dim, small.num_classes, num_layers=2, hidden=16)
    for how in (None, [4, 3]):
        assert evaluate(model, small, how, small.test_idx) == \
            evaluate(model, new, how, new.test_idx)


def test_a_reordering_that_forgets_the_labels_is_caught(small):
    # The consistency check above must notice a renumbering that leaves labels behind.
    new, re = reorder_dataset(small, small.graph.in_degrees().float())
    forgetful = new.__class__(**{**new.__dict__, "labels": small.labels})
    with pytest.raises(AssertionError):
        _check_same_dataset(small, forgetful, re)


def test_reorder_dataset_streams_on_disk_features_to_a_new_file(small, tmp_path):
    save_dataset(small, tmp_path / "ds")
    ds = load_dataset(f"ondisk:{tmp_path / 'ds'}")
    assert isinstance(ds.features, np.memmap)
    with pytest.raises(ValueError, match="workdir"):
        reorder_dataset(ds, ds.graph.in_degrees().float())
    new, re = reorder_dataset(ds, ds.graph.in_degrees().float(), tmp_path / "re")
    assert isinstance(new.features, np.memmap)
    assert str(new.features.filename) == str((tmp_path / "re" / "features.npy").resolve())
    _check_same_dataset(ds, new, re)


@pytest.mark.parametrize("chunk_edges", [1, 7, 1 << 24])
def test_a_mapped_topology_is_reordered_into_files_in_chunks(tmp_path, small, chunk_edges):
    """The on-disk path gives Algorithm 2's graph exactly (weights following their edges),
    whatever the chunk, as mapped files the processes of a host share."""
    from fgnn.cache.reorder import reorder_graph_to_files
    from fgnn.graph import CSRGraph

    save_dataset(small, tmp_path / "d")
    mapped = load_dataset(f"ondisk:{tmp_path / 'd'}").graph
    assert mapped.files is not None
    w = torch.rand(mapped.num_edges, generator=torch.Generator().manual_seed(1))
    mapped = CSRGraph(mapped.indptr, mapped.indices, w)
    mapped.files = load_dataset(f"ondisk:{tmp_path / 'd'}").graph.files
    score = torch.randperm(mapped.num_nodes, generator=torch.Generator().manual_seed(4)).float()
    perm, inv = hot_first_permutation(score)
    want = reorder_graph(mapped, perm, inv)
    got = reorder_graph_to_files(mapped, perm, inv, tmp_path / f"out{chunk_edges}",
                                 chunk_edges=chunk_edges)
    assert got.files is not None and got.files.indices.startswith(str(tmp_path))
    assert torch.equal(got.indptr, want.indptr) and torch.equal(got.indices, want.indices)
    assert got.indices.dtype == mapped.indices.dtype
    assert torch.equal(got.weights, want.weights)
