"""Heterogeneous graphs: structure and validation, PyG/DGL conversion (duck-typed fakes), the
typed k-hop sampler (fanouts, no replacement, uniformity) and the relational SAGE layer (against
a loop reference)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from fgnn.data import Dataset, from_dgl, from_pyg
from fgnn.graph import CSRGraph
from fgnn import HeteroDataset, HeteroGraph, HeteroKHop, from_dgl_hetero, from_pyg_hetero
from fgnn.models.hetero_sage import HeteroGraphSAGE, HeteroSAGEConv, hetero_inputs

UI = ("user", "rates", "item")
IU = ("item", "rated_by", "user")
II = ("item", "also", "item")
#  users 0..2, items 0..3; user u rates items EDGES_UI[1] of EDGES_UI[0]
EDGES_UI = torch.tensor([[0, 0, 1, 1, 1, 2], [0, 1, 1, 2, 3, 3]])
EDGES_II = torch.tensor([[0, 1, 2], [1, 2, 3]])
NUM = {"user": 3, "item": 4}
X_ITEM = torch.arange(8, dtype=torch.float32).reshape(4, 2)
Y_ITEM = torch.tensor([0, 1, 1, 0])


def _graph() -> HeteroGraph:
    return HeteroGraph.from_edge_index(
        NUM, {UI: EDGES_UI, IU: EDGES_UI.flip(0), II: EDGES_II}, {"item": X_ITEM},
        labels=Y_ITEM, target_type="item")


def _edge_set(ei: torch.Tensor) -> set[tuple[int, int]]:
    return set(map(tuple, ei.t().tolist()))


# ---------------------------------------------------------------------------- structure
def test_structure_local_ids_and_rectangular_csr():
    g = _graph()
    assert g.node_types == ["user", "item"] and g.edge_types == [UI, IU, II]
    assert g.feat_dim("item") == 2 and g.feat_dim("user") is None
    # row = destination item, indices = source users; the CSR spans max(3, 4) ids
    csr = g.relations[UI]
    assert csr.num_nodes == 4
    assert csr.indices[csr.indptr[3]:csr.indptr[4]].tolist() == [1, 2]
    assert _edge_set(g.edge_index(UI)) == _edge_set(EDGES_UI)
    assert g.relations[IU].num_nodes == 4 and int(g.relations[IU].indptr[3]) == 6  # row 3 empty


def test_to_homogeneous_offsets():
    g = _graph()
    homo, off = g.to_homogeneous([UI, IU])
    assert off == {"user": 0, "item": 3} and homo.num_nodes == 7
    expect = {(u, i + 3) for u, i in EDGES_UI.t().tolist()}
    expect |= {(i + 3, u) for u, i in EDGES_UI.t().tolist()}
    assert _edge_set(homo.edge_index()) == expect


@pytest.mark.parametrize("kw, match", [
    (dict(edge_index={("user", "rates", "movie"): EDGES_UI}), "known node types"),
    (dict(edge_index={UI: torch.tensor([[0, 5], [0, 1]])}),
     r"user-rates->item: edge_index\[0\] holds id 5, outside num_nodes"),
    (dict(edge_index={UI: torch.tensor([[0], [9]])}), r"edge_index\[1\] holds id 9"),
    (dict(edge_index={UI: torch.zeros(3, 2, dtype=torch.long)}), "user-rates->item: edge_index "
                                                                 "must have shape"),
    (dict(edge_index={UI: EDGES_UI.float()}), "must hold integers"),
    (dict(features={"item": torch.zeros(3, 2)}), r"features\['item'\] has 3 rows, expected"),
    (dict(features={"movie": torch.zeros(3, 2)}), r"features\['movie'\]: unknown node type"),
    (dict(labels=torch.zeros(4, dtype=torch.long), target_type="movie"),
     "target_type naming a node type, got 'movie'"),
    (dict(labels=torch.zeros(3, dtype=torch.long), target_type="item"), r"shape \(4,\)"),
    (dict(labels=torch.zeros(4, dtype=torch.long)), "labels need target_type"),
    (dict(num_nodes={"user": -1, "item": 4}), r"num_nodes\['user'\]"),
])
def test_bad_input_one_line_naming_the_field(kw, match):
    args = dict(num_nodes=NUM, edge_index={UI: EDGES_UI}, features=None, labels=None,
                target_type=None)
    args.update(kw)
    with pytest.raises(ValueError, match=match) as err:
        HeteroGraph.from_edge_index(**args)
    assert "\n" not in str(err.value)


def test_bad_relation_csr_is_rejected():
    square = CSRGraph.from_edge_index(torch.tensor([[0], [1]]), num_nodes=3)  # not max(3, 4)
    with pytest.raises(ValueError, match="user-rates->item: CSR spans 3 ids"):
        HeteroGraph(NUM, {UI: square})
    spill = CSRGraph.from_edge_index(torch.tensor([[0], [3]]), num_nodes=4)  # dst 3 of a user
    with pytest.raises(ValueError, match="item-rated_by->user: rows past"):
        HeteroGraph(NUM, {IU: spill})


# ---------------------------------------------------------------------------- conversion
class FakeHeteroData:
    """The parts of ``torch_geometric.data.HeteroData`` the converter reads."""

    def __init__(self, stores: dict) -> None:
        self._stores = stores
        self.node_types = [k for k in stores if isinstance(k, str)]
        self.edge_types = [k for k in stores if isinstance(k, tuple)]

    def __getitem__(self, key):
        return self._stores[key]


def fake_pyg() -> FakeHeteroData:
    return FakeHeteroData({"user": SimpleNamespace(num_nodes=3),
                           "item": SimpleNamespace(x=X_ITEM, y=Y_ITEM, num_nodes=4),
                           UI: SimpleNamespace(edge_index=EDGES_UI),
                           IU: SimpleNamespace(edge_index=EDGES_UI.flip(0)),
                           II: SimpleNamespace(edge_index=EDGES_II)})


class FakeDGLHetero:
    """The parts of a DGL heterograph the converter reads."""

    def __init__(self) -> None:
        self.ntypes = ["user", "item"]
        self.canonical_etypes = [UI, IU, II]
        self.nodes = {"user": SimpleNamespace(data={}),
                      "item": SimpleNamespace(data={"feat": X_ITEM, "label": Y_ITEM})}
        self._edges = {UI: EDGES_UI, IU: EDGES_UI.flip(0), II: EDGES_II}

    def num_nodes(self, ntype):
        return NUM[ntype]

    def edges(self, etype):
        ei = self._edges[etype]
        return ei[0], ei[1]


def test_from_pyg_and_dgl_round_trip():
    for g in (from_pyg_hetero(fake_pyg(), target_type="item"),
              from_dgl_hetero(FakeDGLHetero(), target_type="item")):
        assert g.num_nodes == NUM and g.edge_types == [UI, IU, II]
        assert _edge_set(g.edge_index(UI)) == _edge_set(EDGES_UI)
        assert _edge_set(g.edge_index(IU)) == _edge_set(EDGES_UI.flip(0))
        assert _edge_set(g.edge_index(II)) == _edge_set(EDGES_II)
        assert torch.equal(g.features["item"], X_ITEM) and "user" not in g.features
        assert torch.equal(g.labels, Y_ITEM) and g.target_type == "item"
        # back to a HeteroData-like edge_index_dict and in again: the same graph
        again = HeteroGraph.from_edge_index(g.num_nodes, {et: g.edge_index(et)
                                                          for et in g.edge_types})
        for et in g.edge_types:
            assert torch.equal(again.relations[et].indptr, g.relations[et].indptr)
            assert torch.equal(again.relations[et].indices, g.relations[et].indices)


def test_conversion_errors_name_the_part():
    data = fake_pyg()
    del data._stores[UI].edge_index
    with pytest.raises(ValueError, match=r"\('user', 'rates', 'item'\)\] has no edge_index"):
        from_pyg_hetero(data)
    with pytest.raises(ValueError, match=r"\['user'\] has no y"):
        from_pyg_hetero(fake_pyg(), target_type="user")
    with pytest.raises(ValueError, match="has no node_types"):
        from_pyg_hetero(SimpleNamespace(x=X_ITEM))
    with pytest.raises(ValueError, match=r"nodes\['user'\].data\['label'\]"):
        from_dgl_hetero(FakeDGLHetero(), target_type="user")


def _same_dataset(a: Dataset, b: Dataset) -> None:
    assert type(a) is type(b) is HeteroDataset
    assert (a.name, a.num_classes, a.target_type, a.meta) == (b.name, b.num_classes,
                                                              b.target_type, b.meta)
    assert a.graph.num_nodes == b.graph.num_nodes and a.graph.edge_types == b.graph.edge_types
    for et in a.graph.edge_types:
        assert torch.equal(a.graph.relations[et].indptr, b.graph.relations[et].indptr)
        assert torch.equal(a.graph.relations[et].indices, b.graph.relations[et].indices)
    assert a.features.keys() == b.features.keys()
    assert all(torch.equal(a.features[t], b.features[t]) for t in a.features)
    for field in ("labels", "train_idx", "val_idx", "test_idx"):
        assert torch.equal(getattr(a, field), getattr(b, field)), field


def test_from_pyg_and_from_dgl_take_typed_graphs():
    """The homogeneous entry points give the typed converters' dataset for a typed object; the
    target type defaults to the only node type with labels."""
    want = HeteroDataset.from_graph(from_pyg_hetero(fake_pyg(), target_type="item", name="pyg"),
                                    name="pyg", seed=5)
    _same_dataset(from_pyg(fake_pyg(), target_type="item", seed=5), want)
    _same_dataset(from_pyg(fake_pyg(), seed=5), want)
    assert want.graph.meta["source"] == "pyg" and want.num_nodes == 4
    assert sorted(torch.cat([want.train_idx, want.val_idx, want.test_idx]).tolist()) == [0, 1,
                                                                                          2, 3]
    want = HeteroDataset.from_graph(
        from_dgl_hetero(FakeDGLHetero(), target_type="item", name="dgl"), name="dgl")
    _same_dataset(from_dgl(FakeDGLHetero(), target_type="item"), want)
    _same_dataset(from_dgl(FakeDGLHetero()), want)
    assert not torch.equal(from_pyg(fake_pyg(), seed=1).train_idx,
                           from_pyg(fake_pyg(), seed=2).train_idx)


def test_typed_splits_come_from_the_target_types_masks_or_keywords():
    data = fake_pyg()
    item = data["item"]
    item.train_mask = torch.tensor([True, True, False, False])
    item.val_mask = torch.tensor([False, False, True, False])
    item.test_mask = torch.tensor([[False, False], [False, False], [False, True], [True, False]])
    ds = from_pyg(data, split=0, num_classes=3)
    assert (ds.train_idx.tolist(), ds.val_idx.tolist(), ds.test_idx.tolist()) == ([0, 1], [2],
                                                                                   [3])
    assert ds.num_classes == 3
    with pytest.raises(ValueError, match=r"test_mask has shape \(4, 2\): 2 splits"):
        from_pyg(data)
    assert from_pyg(data, split=1, train=[3]).train_idx.tolist() == [3]
    g = FakeDGLHetero()
    g.nodes["item"].data.update(train_mask=torch.tensor([False, True, True, False]))
    with pytest.raises(ValueError, match=r"DGL graph 'dgl': no val split of node type 'item'.*"
                                         r"pass val="):
        from_dgl(g)
    ds = from_dgl(g, val=torch.tensor([0]), test=torch.tensor([3]))
    assert (ds.train_idx.tolist(), ds.val_idx.tolist(), ds.test_idx.tolist()) == ([1, 2], [0],
                                                                                   [3])


def test_typed_entry_point_errors_name_the_keyword_or_type():
    with pytest.raises(TypeError, match=r"from_pyg: symmetrize=True does not apply to PyG data "
                                        r"'pyg', a typed HeteroData"):
        from_pyg(fake_pyg(), symmetrize=True)
    with pytest.raises(TypeError, match=r"from_dgl: weight_key='w' does not apply to DGL graph "
                                        r"'dgl', a heterograph"):
        from_dgl(FakeDGLHetero(), weight_key="w")
    data = fake_pyg()
    data["user"].y = torch.zeros(3, dtype=torch.long)
    with pytest.raises(ValueError, match=r"2 node types have y \(\['user', 'item'\].*pass "
                                         r"target_type="):
        from_pyg(data)
    assert from_pyg(data, target_type="user").num_nodes == 3
    with pytest.raises(ValueError, match=r"target_type 'paper' is not a node type"):
        from_pyg(fake_pyg(), target_type="paper")


# ---------------------------------------------------------------------------- sampler
def _star_graph(n_items: int = 40) -> HeteroGraph:
    """User 0 rates every item; item i is also linked to items i+1..i+5 (mod n)."""
    ui = torch.stack([torch.zeros(n_items, dtype=torch.long), torch.arange(n_items)])
    src = torch.arange(n_items).repeat_interleave(5)
    dst = (src + torch.arange(1, 6).repeat(n_items)) % n_items
    return HeteroGraph.from_edge_index({"user": 2, "item": n_items},
                                       {UI: ui, IU: ui.flip(0), II: torch.stack([src, dst])})


def test_sampler_per_relation_fanouts_no_replacement_and_prefix_layout():
    g = _star_graph()
    fan = {IU: [7, 3], II: [2, 4], UI: [1, 1]}
    s = HeteroKHop(fan).sample_type(g, "user", torch.tensor([0]), torch.Generator().manual_seed(0))
    assert s.num_layers == 2 and s.input_nodes["user"][:1].tolist() == [0]
    for layer, block in enumerate(reversed(s.blocks)):                   # seeds' hop first
        for et, (src, dst) in block.edges.items():
            k = fan[et][layer]
            csr = g.relations[et]
            gsrc = s.input_nodes[et[0]][src]
            gdst = s.input_nodes[et[2]][dst]
            assert int(dst.max()) < block.num_dst[et[2]] and int(src.max()) < block.num_src[et[0]]
            for v in dst.unique().tolist():
                picked = gsrc[dst == v].tolist()
                row = gdst[dst == v][0]
                nbrs = set(csr.indices[csr.indptr[row]:csr.indptr[row + 1]].tolist())
                assert len(picked) == len(set(picked)) == min(k, len(nbrs))  # no replacement
                assert set(picked) <= nbrs
            # every frontier node of the destination type sampled (prefix layout)
            assert dst.unique().numel() == block.num_dst[et[2]] - int(
                (g.relations[et].degrees()[s.input_nodes[et[2]][:block.num_dst[et[2]]]] == 0)
                .sum())
    # hop 0: the user draws 7 items; hop 1 items draw through II (4) and UI (1) and the user 3
    assert s.blocks[-1].num_dst == {"user": 1, "item": 0} and set(s.blocks[-1].edges) == {IU}
    for t, ids in s.input_nodes.items():
        assert ids.unique().numel() == ids.numel()                      # dedup per type
    assert s.blocks[0].num_src == {t: v.numel() for t, v in s.input_nodes.items()}


def test_sampler_is_uniform():
    """200 users rate the same 40 items; over 20 samples of all users, every item is drawn
    ~ 4000 * 7/40 times."""
    ui = torch.stack([torch.arange(200).repeat_interleave(40), torch.arange(40).repeat(200)])
    g = HeteroGraph.from_edge_index({"user": 200, "item": 40}, {IU: ui.flip(0)})
    sampler = HeteroKHop({IU: [7]})
    gen = torch.Generator().manual_seed(1)
    counts = torch.zeros(40)
    for _ in range(20):
        s = sampler.sample_type(g, "user", torch.arange(200), gen)
        src, dst = s.blocks[0].edges[IU]
        assert torch.equal(torch.bincount(dst, minlength=200), torch.full((200,), 7))
        counts += torch.bincount(s.input_nodes["item"][src], minlength=40)
    expect = 4000 * 7 / 40
    chi2 = float(((counts - expect) ** 2 / expect).sum())
    assert chi2 < 80.0, chi2            # 39 dof: p(chi2 > 80) ~ 1e-4


@pytest.mark.parametrize("fan, match", [
    ({IU: [2], II: [1, 1]}, "same number of fanouts"),
    ({IU: [-1]}, "item-rated_by->user must be a non-empty list"),
    ([], "all relations must be a non-empty"),
    ({("item", "buys", "user"): [1]}, "lacks"),
])
def test_sampler_bad_fanouts(fan, match):
    with pytest.raises(ValueError, match=match):
        HeteroKHop(fan).sample_type(_graph(), "user", torch.tensor([0]))


def test_sampler_bad_seeds():
    with pytest.raises(ValueError, match="seed_type 'movie'"):
        HeteroKHop([1]).sample_type(_graph(), "movie", torch.tensor([0]))
    with pytest.raises(ValueError, match=r"outside num_nodes\['user'\]=3"):
        HeteroKHop([1]).sample_type(_graph(), "user", torch.tensor([3]))
    with pytest.raises(ValueError, match="distinct"):
        HeteroKHop([1]).sample_type(_graph(), "user", torch.tensor([1, 1]))
    # the remappers were reset: the next sample works
    HeteroKHop([1]).sample_type(_graph(), "user", torch.tensor([1]))


# ---------------------------------------------------------------------------- layer
def test_relational_sage_layer_equals_loop_reference():
    torch.manual_seed(0)
    g = _graph()
    s = HeteroKHop([10]).sample_type(g, "item", torch.tensor([3, 1]))      # full neighbourhoods
    block = s.blocks[0]
    h = {"user": torch.randn(block.num_src["user"], 5), "item": torch.randn(
        block.num_src["item"], 2)}
    conv = HeteroSAGEConv(g.edge_types, {"user": 5, "item": 2}, 3)
    out = conv(block, h)
    assert set(out) == {"item"} and out["item"].shape == (2, 3)        # no user is a dst
    # reference: loop over the seeds and their full neighbour lists in the graph
    pos = {t: {int(v): i for i, v in enumerate(ids)} for t, ids in s.input_nodes.items()}
    for i, v in enumerate([3, 1]):
        ref = torch.zeros(3)
        for et in (UI, II):                                            # relations into items
            csr = g.relations[et]
            nbrs = csr.indices[csr.indptr[v]:csr.indptr[v + 1]].tolist()
            mean = (torch.stack([h[et[0]][pos[et[0]][u]] for u in nbrs]).mean(0) if nbrs
                    else torch.zeros(h[et[0]].shape[1]))
            ref += conv.lin_self["__".join(et)](h["item"][i]) + conv.lin_neigh["__".join(et)](
                mean)
        assert torch.allclose(out["item"][i], ref, atol=1e-5), (v, out["item"][i], ref)


def test_hetero_graphsage_trains_with_learned_user_embeddings():
    torch.manual_seed(0)
    g = _graph()
    model = HeteroGraphSAGE(g, num_classes=2, target_type="item", num_layers=2, hidden=8,
                            dropout=0.0)
    assert "user" in model.embed and "item" not in model.embed
    s = HeteroKHop([3, 3]).sample_type(g, "item", torch.arange(4), torch.Generator().manual_seed(0))
    x = hetero_inputs(g, s)
    assert x["user"].dtype == torch.int64 and x["item"].shape[1] == 2
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    first = None
    for _ in range(30):
        loss = torch.nn.functional.cross_entropy(model(s.blocks, x), g.labels[s.seeds])
        first = float(loss.detach()) if first is None else first
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert float(loss) < 0.2 * first
    assert model.embed["user"].weight.grad is not None


def _unlabelled_pyg() -> FakeHeteroData:
    data = fake_pyg()
    del data["item"].y
    return data


def _unlabelled_dgl() -> FakeDGLHetero:
    g = FakeDGLHetero()
    del g.nodes["item"].data["label"]
    return g


def test_from_pyg_and_from_dgl_take_typed_graphs_without_labels():
    """A typed link or recommendation graph has no labels: the converters give a dataset whose
    graph keeps none (``labelled`` False), with every relation and feature as given."""
    for ds in (from_pyg(_unlabelled_pyg()), from_dgl(_unlabelled_dgl())):
        assert isinstance(ds, HeteroDataset) and not ds.labelled
        assert ds.graph.labels is None and ds.graph.num_nodes == NUM
        assert ds.graph.edge_types == [UI, IU, II]
        assert _edge_set(ds.graph.edge_index(UI)) == _edge_set(EDGES_UI)
        assert torch.equal(ds.graph.features["item"], X_ITEM) and "user" not in ds.graph.features
        assert "no labels" in repr(ds)
    assert from_pyg(fake_pyg()).labelled                      # labels, when given, still count
    with pytest.raises(ValueError, match=r"train= splits the nodes of a labelled type, but no "
                                         r"node type has labels"):
        from_pyg(_unlabelled_pyg(), train=torch.tensor([0]))
    with pytest.raises(ValueError, match=r"has no y"):       # a named target still needs its y
        from_pyg(_unlabelled_pyg(), target_type="item")
