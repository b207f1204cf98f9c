"""Layer-wise inference equals per-vertex full-neighbour evaluation, computes only what it must."""

from __future__ import annotations

import pytest
import torch

import fgnn
from fgnn.data.synthetic import rmat_dataset
from fgnn.graph import CSRGraph
from fgnn.inference import LayerRows, layerwise_inference
from fgnn.models import GCN, GraphSAGE, PinSAGE
from fgnn.sampling import RandomWalk
from fgnn.sampling.fixed_walk import FixedRandomWalk
from fgnn.training import FullNeighborSampler

from test_training import single_thread  # noqa: F401 (autouse fixture)

MODELS = {"gcn": GCN, "sage": GraphSAGE, "pinsage": PinSAGE}


def _model(kind: str, in_dim: int, num_classes: int, layers: int = 3, hidden: int = 24):
    torch.manual_seed(0)
    return MODELS[kind](in_dim, num_classes, num_layers=layers, hidden=hidden, dropout=0.5)


def _per_vertex(model, ds, sampler, nodes, batch: int = 37) -> torch.Tensor:
    """The reference: sample each batch's whole neighbourhood, one model forward (eval)."""
    model.eval()
    with torch.no_grad():
        return torch.cat([model(s.blocks, ds.features[s.input_nodes])
                          for s in (sampler.sample(ds.graph, c)
                                    for c in torch.split(nodes, batch))])


def _reference_sampler(kind: str, layers: int = 3):
    return FixedRandomWalk(num_layers=layers, seed=0) if kind == "pinsage" \
        else FullNeighborSampler(layers)


@pytest.fixture(scope="module")
def ds():
    return rmat_dataset(scale=9, edge_factor=8, feat_dim=12, num_classes=5, seed=1)


@pytest.mark.parametrize("kind", list(MODELS))
@pytest.mark.parametrize("budget", [2 ** 30, 0])  # in memory / every layer memory-mapped
def test_all_vertices_match_per_vertex_evaluation(ds, kind, budget, tmp_path):
    model = _model(kind, ds.feat_dim, ds.num_classes)
    ref = _per_vertex(model, ds, _reference_sampler(kind), torch.arange(ds.num_nodes))
    model.train()
    got = layerwise_inference(model, ds.graph, ds.features, batch_size=50, batch_edges=300,
                              memory_budget=budget, tmp_dir=tmp_path)
    assert got.shape == (ds.num_nodes, ds.num_classes)
    assert (got - ref).abs().max() < 1e-4
    assert list(tmp_path.iterdir()) == []  # the layer files are gone
    assert model.training  # mode restored


@pytest.mark.parametrize("kind", list(MODELS))
def test_given_vertices_in_their_order(ds, kind):
    model = _model(kind, ds.feat_dim, ds.num_classes)
    nodes = torch.tensor([300, 5, 2, 77, 511])
    ref = _per_vertex(model, ds, _reference_sampler(kind), nodes)
    got = layerwise_inference(model, ds.graph, ds.features, nodes, batch_size=2)
    assert (got - ref).abs().max() < 1e-4


def test_weighted_graph_uses_the_edge_weights():
    ds = rmat_dataset(scale=8, edge_factor=6, feat_dim=8, num_classes=3, seed=2, weighted=True)
    assert ds.graph.weights is not None
    for kind in ("gcn", "sage"):
        model = _model(kind, ds.feat_dim, ds.num_classes, layers=2)
        ref = _per_vertex(model, ds, FullNeighborSampler(2), torch.arange(ds.num_nodes))
        got = layerwise_inference(model, ds.graph, ds.features, batch_size=64)
        assert (got - ref).abs().max() < 1e-4


def _cycle_dataset(n: int = 12, feat_dim: int = 6):
    """A directed cycle, 0 <- 1 <- 2 <- ... <- n-1 <- 0: each vertex aggregates from its
    successor only, so every random walk is deterministic (v+1, v+2, v+3, ...)."""
    src = torch.arange(n)
    g = CSRGraph.from_edge_index(torch.stack([(src + 1) % n, src]), num_nodes=n)
    gen = torch.Generator().manual_seed(0)
    return fgnn.Dataset("cycle", g, torch.randn(n, feat_dim, generator=gen),
                        torch.randint(0, 3, (n,), generator=gen), torch.arange(n),
                        torch.arange(0), torch.arange(0), 3)


def test_pinsage_matches_the_training_sampler_where_walks_are_deterministic():
    """On a cycle the walks cannot vary: the fixed neighbourhoods of layer-wise inference are
    exactly those of the RandomWalk sampler the model trains with."""
    ds = _cycle_dataset()
    model = _model("pinsage", ds.feat_dim, 3, layers=2)
    sampler = RandomWalk(num_walks=3, walk_length=3, top_k=2, num_layers=2)
    model.eval()
    with torch.no_grad():
        s = sampler.sample(ds.graph, torch.arange(12), torch.Generator().manual_seed(5))
        ref = model(s.blocks, ds.features[s.input_nodes])
    walks = FixedRandomWalk(num_walks=3, walk_length=3, top_k=2, num_layers=2, seed=9)
    got = layerwise_inference(model, ds.graph, ds.features, neighbours=walks, batch_size=5)
    assert (got - ref).abs().max() < 1e-4


def test_fixed_walk_neighbourhoods_do_not_depend_on_the_batch(ds):
    walks = FixedRandomWalk(num_layers=2, seed=3)
    a = walks.neighbours(ds.graph, torch.tensor([3, 7, 9]), layer=1)
    b = walks.neighbours(ds.graph, torch.tensor([9, 3]), layer=1)
    per_row = lambda r, rows: {rows[i]: sorted(zip(r[0][r[1] == i].tolist(),  # noqa: E731
                                                   r[2][r[1] == i].tolist()))
                               for i in range(len(rows))}
    pa, pb = per_row(a, [3, 7, 9]), per_row(b, [9, 3])
    assert pa[3] == pb[3] and pa[9] == pb[9] and pa[3]
    other = FixedRandomWalk(num_layers=2, seed=4).neighbours(ds.graph, torch.tensor([3, 7, 9]),
                                                             layer=1)
    layer0 = walks.neighbours(ds.graph, torch.tensor([3, 7, 9]), layer=0)
    assert not (torch.equal(a[0], other[0]) and torch.equal(a[0], layer0[0]))


def test_only_the_vertices_that_reach_the_given_ones_are_computed(monkeypatch):
    #   path 0 <- 1 <- 2 <- 3 <- 4 <- 5 (v aggregates from v + 1), plus 7 -> 6
    src = torch.tensor([1, 2, 3, 4, 5, 7])
    dst = torch.tensor([0, 1, 2, 3, 4, 6])
    g = CSRGraph.from_edge_index(torch.stack([src, dst]), num_nodes=8)
    feats = torch.randn(8, 4)
    model = _model("sage", 4, 2, layers=2, hidden=3)
    computed: list[list[int]] = []
    write = LayerRows.write

    def spy(self, start, values):
        computed.append(self.ids[start:start + values.shape[0]].tolist())
        return write(self, start, values)

    monkeypatch.setattr(LayerRows, "write", spy)
    out = layerwise_inference(model, g, feats, torch.tensor([0]))
    assert out.shape == (1, 2)
    assert computed == [[0, 1], [0]]  # layer 1 for {0, 1}, layer 2 for {0}; never 2..7
    computed.clear()
    layerwise_inference(model, g, feats, torch.tensor([6, 2]))
    assert computed == [[2, 3, 6, 7], [2, 6]]


def test_embeddings_of_a_given_layer(ds):
    model = _model("gcn", ds.feat_dim, ds.num_classes, layers=2)
    model.eval()
    nodes = torch.arange(ds.num_nodes)
    with torch.no_grad():
        s = FullNeighborSampler(1).sample(ds.graph, nodes)
        ref = model.activation(model.layers[0](s.blocks[0], ds.features[s.input_nodes]))
    emb = layerwise_inference(model, ds.graph, ds.features, layer=1)
    assert emb.shape == (ds.num_nodes, 24) and (emb - ref).abs().max() < 1e-4
    logits = layerwise_inference(model, ds.graph, ds.features, layer=2)
    assert torch.equal(logits, layerwise_inference(model, ds.graph, ds.features))
    pin = _model("pinsage", ds.feat_dim, ds.num_classes, layers=2)
    z = layerwise_inference(pin, ds.graph, ds.features, layer=2)  # before the head
    assert z.shape == (ds.num_nodes, 24)
    assert torch.allclose(z.norm(dim=1)[z.norm(dim=1) > 0], torch.tensor(1.0))
    with torch.no_grad():
        assert (pin.head(z) - layerwise_inference(pin, ds.graph, ds.features)).abs().max() < 1e-5


def test_bad_input(ds):
    model = _model("sage", ds.feat_dim, ds.num_classes, layers=2)
    with pytest.raises(TypeError, match="supports fgnn's GCN, GraphSAGE and PinSAGE"):
        layerwise_inference(torch.nn.Linear(2, 2), ds.graph, ds.features)
    with pytest.raises(ValueError, match="layer must be an int in \\[1, 2\\]"):
        layerwise_inference(model, ds.graph, ds.features, layer=3)
    with pytest.raises(ValueError, match="nodes must not repeat"):
        layerwise_inference(model, ds.graph, ds.features, torch.tensor([1, 1]))
    with pytest.raises(ValueError, match="vertex ids in \\[0, 512\\)"):
        layerwise_inference(model, ds.graph, ds.features, torch.tensor([512]))
    with pytest.raises(ValueError, match="batch_edges=0"):
        layerwise_inference(model, ds.graph, ds.features, batch_edges=0)
    with pytest.raises(ValueError, match="features have shape \\(512, 12\\); expected "
                                         "\\(512, 7\\)"):
        layerwise_inference(_model("sage", 7, 3, layers=2), ds.graph, ds.features)
    with pytest.raises(ValueError, match="neighbours must be"):
        layerwise_inference(model, ds.graph, ds.features, neighbours="some")
