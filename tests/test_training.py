"""The single-process loop on tiny graphs: full-neighbour sampling, train_step, evaluate, fit."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fgnn.config import TrainConfig
from fgnn.data import Dataset
from fgnn.graph import CSRGraph
from fgnn.models import GCN, GraphSAGE, PinSAGE
from fgnn.sampling import KHop, RandomWalk
from fgnn.training import (FullNeighborSampler, evaluate, extract_features, fit, gather_labels,
                           train_step)


@pytest.fixture(autouse=True)
def single_thread():
    """Run on one intra-op thread: these models are tiny, so a second thread only adds
    synchronisation (and spin-waiting when the CI cores are shared); results also stop
    depending on the machine's core count."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def toy_dataset(num_nodes: int = 90, num_classes: int = 3, feat_dim: int = 8, seed: int = 0,
                weighted: bool = False) -> Dataset:
    """A seeded planted-partition graph whose labels are learnable from features + neighbours.

    Each vertex links to 4 random vertices of its own class and 1 of another class; its feature
    is a noisy one-hot of its class.
    """
    g = torch.Generator().manual_seed(seed)
    labels = torch.arange(num_nodes) % num_classes
    by_class = [torch.nonzero(labels == c).flatten() for c in range(num_classes)]
    src, dst = [], []
    for v in range(num_nodes):
        same = by_class[int(labels[v])]
        src += same[torch.randint(0, same.numel(), (4,), generator=g)].tolist()
        src.append(int(torch.randint(0, num_nodes, (1,), generator=g)))
        dst += [v] * 5
    w = torch.rand(len(src), generator=g) + 0.5 if weighted else None
    graph = CSRGraph.from_edge_index(torch.tensor([src, dst]), num_nodes=num_nodes, weights=w)
    feats = torch.randn(num_nodes, feat_dim, generator=g)
    feats[torch.arange(num_nodes), labels] += 1.5
    perm = torch.randperm(num_nodes, generator=g)
    n_tr, n_va = num_nodes // 3, num_nodes // 3
    return Dataset("toy", graph, feats, labels, perm[:n_tr], perm[n_tr:n_tr + n_va],
                   perm[n_tr + n_va:], num_classes)


# ------------------------------------------------------------------ full-neighbour sampler
def test_full_neighbor_sampler_follows_sample_conventions():
    # Row v lists the vertices v aggregates from:  0 <- {1, 2},  1 <- {3},  2 <- {},  3 <- {4}
    graph = CSRGraph(torch.tensor([0, 2, 3, 3, 4, 4]), torch.tensor([1, 2, 3, 4]))
    s = FullNeighborSampler(2).sample(graph, torch.tensor([0]))
    assert s.input_nodes.tolist() == [0, 1, 2, 3]  # seeds first, then hops in order
    outer, inner = s.blocks
    assert (inner.num_src, inner.num_dst) == (3, 1)  # seed layer: 0 <- 1, 2
    assert sorted(zip(inner.src.tolist(), inner.dst.tolist())) == [(1, 0), (2, 0)]
    assert (outer.num_src, outer.num_dst) == (4, 3)  # input layer: dst 0, 1, 2 read 0..3
    assert sorted(zip(outer.src.tolist(), outer.dst.tolist())) == [(1, 0), (2, 0), (3, 1)]


def test_full_neighbor_sampler_edges_match_the_graph():
    ds = toy_dataset(weighted=True)
    seeds = ds.train_idx[:7]
    s = FullNeighborSampler(2).sample(ds.graph, seeds)
    assert torch.equal(s.input_nodes[:7], seeds)
    assert s.input_nodes.unique().numel() == s.input_nodes.numel()
    assert s.blocks[-1].num_dst == 7
    assert s.blocks[0].num_dst == s.blocks[1].num_src
    for b in s.blocks:
        got = sorted(zip(s.input_nodes[b.dst].tolist(), s.input_nodes[b.src].tolist(),
                         b.weights.tolist()))
        want = []
        for v in s.input_nodes[:b.num_dst].tolist():
            lo, hi = int(ds.graph.indptr[v]), int(ds.graph.indptr[v + 1])
            want += [(v, int(u), float(w)) for u, w in zip(ds.graph.indices[lo:hi],
                                                            ds.graph.weights[lo:hi])]
        assert got == sorted(want)


def test_full_neighbor_sampler_rejects_bad_input():
    with pytest.raises(ValueError, match="num_layers=0"):
        FullNeighborSampler(0)
    ds = toy_dataset()
    with pytest.raises(ValueError, match="seeds must lie in"):
        FullNeighborSampler(1).sample(ds.graph, torch.tensor([ds.num_nodes]))


# ------------------------------------------------------------------ stages
def test_extract_features_tensor_and_memmap_agree(tmp_path):
    ds = toy_dataset()
    nodes = torch.tensor([5, 0, 17, 5])
    mm = np.lib.format.open_memmap(tmp_path / "f.npy", mode="w+", dtype=np.float32,
                                   shape=tuple(ds.features.shape))
    mm[:] = ds.features.numpy()
    assert torch.equal(extract_features(ds.features, nodes), ds.features[nodes])
    assert torch.equal(extract_features(mm, nodes), ds.features[nodes])
    assert extract_features(torch.ones(3, 2, dtype=torch.int64), torch.tensor([1])).dtype == \
        torch.float32
    with pytest.raises(ValueError, match="features must be"):
        extract_features([[1.0]], nodes)


def test_train_step_lowers_the_loss_and_checks_labels():
    torch.manual_seed(0)
    ds = toy_dataset()
    model = GraphSAGE(ds.feat_dim, ds.num_classes, num_layers=2, hidden=16, dropout=0.0)
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    s = FullNeighborSampler(2).sample(ds.graph, ds.train_idx)
    x = extract_features(ds.features, s.input_nodes)
    y = gather_labels(ds.labels, s.seeds)
    losses = [train_step(model, opt, s, x, y) for _ in range(20)]
    assert isinstance(losses[0], float)
    assert losses[-1] < 0.5 * losses[0]
    with pytest.raises(ValueError, match=r"labels hold class 3, outside \[0, 3\)"):
        train_step(model, opt, s, x, torch.full_like(y, 3))
    with pytest.raises(ValueError, match="one per seed"):
        train_step(model, opt, s, x, y[:-1])


def test_evaluate_matches_a_manual_count():
    torch.manual_seed(0)
    ds = toy_dataset()
    model = GCN(ds.feat_dim, ds.num_classes, num_layers=2, hidden=8)
    acc = evaluate(model, ds, None, ds.val_idx, batch_size=7)
    model.eval()
    s = FullNeighborSampler(2).sample(ds.graph, ds.val_idx)
    pred = model(s.blocks, ds.features[s.input_nodes]).argmax(1)
    assert acc == pytest.approx(float((pred == ds.labels[ds.val_idx]).float().mean()))
    assert model.training is False  # restored to the state it was in
    with pytest.raises(ValueError, match="idx is empty"):
        evaluate(model, ds, 2, torch.tensor([], dtype=torch.int64))
    with pytest.raises(ValueError, match="batch_size=0"):
        evaluate(model, ds, 2, ds.val_idx, batch_size=0)


def test_evaluate_with_large_fanouts_equals_full_neighbour_inference():
    torch.manual_seed(0)
    ds = toy_dataset()
    model = GraphSAGE(ds.feat_dim, ds.num_classes, num_layers=2, hidden=8)
    max_deg = int(ds.graph.degrees().max())
    full = evaluate(model, ds, None, ds.test_idx, batch_size=16)
    assert evaluate(model, ds, [max_deg, max_deg], ds.test_idx, batch_size=16) == full
    assert evaluate(model, ds, KHop([max_deg, max_deg]), ds.test_idx, batch_size=16) == full
    with pytest.raises(ValueError, match="sampler_or_fanouts must be"):
        evaluate(model, ds, "full", ds.test_idx)


# ------------------------------------------------------------------ fit
@pytest.mark.parametrize("cls", [GCN, GraphSAGE])
def test_fit_learns_the_toy_graph(cls):
    torch.manual_seed(0)
    ds = toy_dataset()
    model = cls(ds.feat_dim, ds.num_classes, num_layers=2, hidden=16, dropout=0.2)
    hist = fit(ds, model, FullNeighborSampler(2),
               TrainConfig(epochs=20, batch_size=10, lr=0.02, seed=0))
    assert len(hist.epochs) == 20
    assert hist.epochs[0].batches == 3  # 30 training vertices, batches of 10
    assert hist.epochs[-1].loss < 0.5 * hist.epochs[0].loss
    assert hist.test_acc >= 0.7  # chance is 1/3
    assert hist.best_val_acc == max(r.val_acc for r in hist.epochs)


def test_pinsage_trains_on_random_walk_neighbourhoods_and_its_loss_falls():
    torch.manual_seed(0)
    ds = toy_dataset(num_nodes=120)
    sampler = RandomWalk(num_walks=4, walk_length=3, top_k=5, num_layers=2)
    s = sampler.sample(ds.graph, ds.train_idx[:4], torch.Generator().manual_seed(0))
    assert all(b.weights is not None for b in s.blocks)  # visit counts reach the model
    model = PinSAGE(ds.feat_dim, ds.num_classes, num_layers=2, hidden=16, dropout=0.1)
    hist = fit(ds, model, sampler, TrainConfig(epochs=30, batch_size=40, lr=0.02, seed=0),
               eval_sampler=sampler)
    first = np.mean([r.loss for r in hist.epochs[:3]])
    last = np.mean([r.loss for r in hist.epochs[-3:]])
    assert last < 0.5 * first
    assert hist.test_acc >= 0.7  # chance is 1/3


def test_fit_stops_early_when_validation_stalls():
    torch.manual_seed(0)
    ds = toy_dataset()
    model = GraphSAGE(ds.feat_dim, ds.num_classes, num_layers=2, hidden=16)
    hist = fit(ds, model, FullNeighborSampler(2),
               TrainConfig(epochs=200, batch_size=30, lr=0.05, seed=0, patience=3))
    assert hist.stopped_early
    assert len(hist.epochs) == hist.best_epoch + 1 + 3
    assert len(hist.epochs) < 200


def test_fit_is_reproducible_for_a_seed():
    ds = toy_dataset()
    runs = []
    for _ in range(2):
        torch.manual_seed(1)
        model = GCN(ds.feat_dim, ds.num_classes, num_layers=2, hidden=8)
        hist = fit(ds, model, FullNeighborSampler(2),
                   TrainConfig(epochs=3, batch_size=8, lr=0.01, seed=4), restore_best=False)
        runs.append(([r.loss for r in hist.epochs], model.state_dict()))
    assert runs[0][0] == runs[1][0]
    assert all(torch.equal(runs[0][1][k], runs[1][1][k]) for k in runs[0][1])


def test_fit_rejects_mismatched_model_and_data():
    ds = toy_dataset()
    cfg = TrainConfig(epochs=1)
    with pytest.raises(ValueError, match="model expects in_dim=5, the dataset 'toy' has "
                                         "feat_dim=8"):
        fit(ds, GCN(5, ds.num_classes, num_layers=2), FullNeighborSampler(2), cfg)
    with pytest.raises(ValueError, match="sampler produces 3 blocks .* model has num_layers=2"):
        fit(ds, GCN(ds.feat_dim, ds.num_classes, num_layers=2), FullNeighborSampler(3), cfg)
    with pytest.raises(ValueError, match="labels reach class 2, outside the model's "
                                         "num_classes=2"):
        fit(ds, GCN(ds.feat_dim, 2, num_layers=2), FullNeighborSampler(2), cfg)
