"""Synthetic generators: skew, determinism, CSR invariants, options and bad parameters."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import fgnn.data.synthetic as synthetic
from fgnn.data import rmat_dataset, uniform_dataset


@pytest.fixture(scope="module")
def rmat16():
    return rmat_dataset(16, 16, feat_dim=8)


@pytest.fixture(scope="module")
def uniform16():
    return uniform_dataset(16, 16, feat_dim=8)


def _skew(deg: torch.Tensor) -> float:
    deg = deg.double()
    return float(deg.max() / deg.mean())


def test_rmat_degrees_skewed(rmat16):
    g = rmat16.graph
    assert g.num_nodes == 1 << 16 and g.num_edges == 16 << 16
    assert _skew(g.degrees()) > 100                              # row length (sampled nbrs)
    assert _skew(g.in_degrees()) > 100                           # in-degree too
    # Hubs are spread by the permutation, not stacked at id 0.
    top = torch.topk(g.degrees(), 10).indices
    assert int(top.max()) > 1000


def test_uniform_degrees_not_skewed(uniform16):
    g = uniform16.graph
    assert g.num_edges == 16 << 16
    assert _skew(g.degrees()) < 5
    assert _skew(g.in_degrees()) < 5


@pytest.mark.parametrize("make", [rmat_dataset, uniform_dataset])
def test_csr_layout_weights_and_splits(make):
    ds = make(10, 8, feat_dim=6, num_classes=5, train_frac=0.1, val_frac=0.2, test_frac=0.3)
    g = ds.graph
    assert g.indices.dtype == torch.int32 and g.indptr.dtype == torch.int64
    # Sorted within rows.
    rows = torch.repeat_interleave(torch.arange(g.num_nodes), g.degrees())
    key = rows * g.num_nodes + g.indices.long()
    assert bool((key[1:] >= key[:-1]).all())
    assert g.weights is not None and g.weights.dtype == torch.float32
    assert float(g.weights.min()) > 0.1 and float(g.weights.max()) <= 1.0
    assert ds.features.shape == (1024, 6) and ds.features.dtype == torch.float32
    assert float(ds.features.min()) >= 0.0 and float(ds.features.max()) < 1.0
    assert int(ds.labels.max()) < 5 and ds.num_classes == 5
    sizes = (ds.train_idx.numel(), ds.val_idx.numel(), ds.test_idx.numel())
    assert sizes == (102, 205, 307)
    allidx = torch.cat([ds.train_idx, ds.val_idx, ds.test_idx])
    assert allidx.unique().numel() == allidx.numel()             # disjoint


@pytest.mark.parametrize("make", [rmat_dataset, uniform_dataset])
def test_deterministic_per_seed(make):
    a, b = make(9, 4, feat_dim=4, seed=3), make(9, 4, feat_dim=4, seed=3)
    c = make(9, 4, feat_dim=4, seed=4)
    for x, y in ((a.graph.indptr, b.graph.indptr), (a.graph.indices, b.graph.indices),
                 (a.graph.weights, b.graph.weights), (a.features, b.features),
                 (a.labels, b.labels), (a.train_idx, b.train_idx)):
        assert torch.equal(x, y)
    assert not torch.equal(a.graph.indices, c.graph.indices)
    assert not torch.equal(a.features, c.features)


def test_chunked_generation_matches_bounds(monkeypatch):
    """Several edge/feature chunks: still valid, deterministic, and chunk-size defined."""
    monkeypatch.setattr(synthetic, "EDGE_CHUNK", 1000)
    monkeypatch.setattr(synthetic, "_FEAT_CHUNK_ELEMS", 64)
    a = rmat_dataset(10, 8, feat_dim=8, seed=1)
    b = rmat_dataset(10, 8, feat_dim=8, seed=1)
    assert a.graph.num_edges == 8192
    assert torch.equal(a.graph.indices, b.graph.indices)
    assert torch.equal(a.features, b.features)
    assert int(a.graph.degrees().sum()) == 8192
    assert bool((a.graph.weights > 0.1).all())
    # Feature chunks are not copies of each other.
    assert not torch.equal(a.features[:8], a.features[8:16])


def test_dedup_and_self_loops():
    ds = rmat_dataset(10, 16, feat_dim=2, dedup=True, self_loops=False)
    src, dst = ds.graph.edge_index()
    assert not bool((src == dst).any())
    key = dst * ds.num_nodes + src
    assert key.unique().numel() == key.numel()
    full = rmat_dataset(10, 16, feat_dim=2)
    assert ds.graph.num_edges < full.graph.num_edges == 16 << 10
    assert int((full.graph.edge_index()[0] == full.graph.edge_index()[1]).sum()) > 0


def test_float16_unweighted_and_name():
    ds = uniform_dataset(8, 2, feat_dim=3, feat_dtype="float16", weighted=False, name="u")
    assert ds.features.dtype == torch.float16 and ds.graph.weights is None and ds.name == "u"
    assert ds.meta["generator"] == "uniform" and ds.meta["scale"] == 8


def test_rmat_custom_probabilities_change_skew():
    flat = rmat_dataset(12, 8, a=0.25, b=0.25, c=0.25, feat_dim=1)
    assert _skew(flat.graph.degrees()) < 10


@pytest.mark.parametrize("kwargs, match", [
    (dict(scale=0), "scale"),
    (dict(scale=2.5), "scale"),
    (dict(edge_factor=-1), "edge_factor"),
    (dict(feat_dim=0), "feat_dim"),
    (dict(num_classes=0), "num_classes"),
    (dict(train_frac=1.5), "train_frac"),
    (dict(train_frac=0.5, val_frac=0.4, test_frac=0.2), "<= 1"),
    (dict(feat_dtype="float64"), "feat_dtype"),
    (dict(seed=-1), "seed"),
    (dict(a=0.6, b=0.3, c=0.2), "a \\+ b \\+ c"),
    (dict(a=-0.1), "probability a"),
])
def test_bad_parameters(kwargs, match):
    kwargs = {"scale": 4, "edge_factor": 2, "feat_dim": 2, **kwargs}
    with pytest.raises(ValueError, match=match):
        rmat_dataset(**kwargs)


def test_quadrant_frequencies():
    """One R-MAT bit: the (src, dst) bit pairs follow a, b, c, d."""
    rng = np.random.default_rng(0)
    src, dst = synthetic._rmat_chunk(rng, 200_000, 1, 0.5, 0.2, 0.2)
    freq = np.bincount(src * 2 + dst, minlength=4) / src.size
    assert np.allclose(freq, [0.5, 0.2, 0.2, 0.1], atol=0.01)


@pytest.mark.parametrize("make", [rmat_dataset, uniform_dataset])
def test_planted_labels_are_learnable_by_a_linear_probe(make):
    ds = make(scale=12, edge_factor=4, feat_dim=16, num_classes=4, train_frac=0.5,
              val_frac=0.1, test_frac=0.4, seed=3)
    counts = torch.bincount(ds.labels, minlength=4)
    assert int((counts > 0).sum()) == 4  # every class occurs
    torch.manual_seed(0)
    probe = torch.nn.Linear(16, 4)
    opt = torch.optim.Adam(probe.parameters(), lr=0.05)
    x = ds.features - 0.5
    for _ in range(200):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(probe(x[ds.train_idx]), ds.labels[ds.train_idx]).backward()
        opt.step()
    acc = (probe(x[ds.test_idx]).argmax(1) == ds.labels[ds.test_idx]).float().mean().item()
    assert acc > 0.8  # chance is 0.25: labels follow the features
