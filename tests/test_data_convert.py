"""Converters from PyG / DGL / OGB objects (duck-typed fakes; the real libraries when present)."""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from fgnn.data import Dataset, from_dgl, from_ogb, from_pyg

#   0 ──> 1 ──> 2        edge u -> v: a message from u to v, so row v lists u
#   ^     ^     │        (PyG edge_index[:, e] = (u, v), DGL g.edges() = (u, v))
#   │     3     │
#   └───────────┘        2 -> 0;  node 4 is isolated
EDGES = [[0, 1, 2, 3], [1, 2, 0, 1]]
ROWS = {0: [2], 1: [0, 3], 2: [1], 3: [], 4: []}
N, F = 5, 3
X = torch.arange(N * F, dtype=torch.float32).reshape(N, F)
Y = torch.tensor([0, 1, 2, 1, 0])
TRAIN = torch.tensor([True, True, False, False, False])
VAL = torch.tensor([False, False, True, False, False])
TEST = torch.tensor([False, False, False, True, True])


def _rows(g) -> dict[int, list[int]]:
    return {v: g.indices[g.indptr[v]:g.indptr[v + 1]].tolist() for v in range(g.num_nodes)}


def fake_pyg(**kw) -> SimpleNamespace:
    """The attributes of a ``torch_geometric.data.Data`` that the converter reads."""
    base = dict(x=X, y=Y, edge_index=torch.tensor(EDGES), num_nodes=N, train_mask=TRAIN,
                val_mask=VAL, test_mask=TEST)
    base.update(kw)
    return SimpleNamespace(**{k: v for k, v in base.items() if v is not None})


class FakeDGLGraph:
    """The methods of a homogeneous ``dgl.DGLGraph`` that the converter reads."""

    def __init__(self, ndata: dict, edata: dict | None = None, ntypes=("_N",)) -> None:
        self.ndata, self.edata, self.ntypes = ndata, edata or {}, list(ntypes)
        self.canonical_etypes = [("_N", "_E", "_N")] * (1 if len(ntypes) == 1 else 2)

    def edges(self):
        return torch.tensor(EDGES[0]), torch.tensor(EDGES[1])

    def num_nodes(self) -> int:
        return N


def fake_dgl(**extra) -> FakeDGLGraph:
    return FakeDGLGraph({"feat": X, "label": Y, "train_mask": TRAIN, "val_mask": VAL,
                         "test_mask": TEST, **extra})


class FakeOGB:
    """An ``ogb.nodeproppred.NodePropPredDataset``: ``[0]`` is (graph dict, (N, 1) labels)."""

    name = "ogbn-fake"

    def __init__(self, labels=None) -> None:
        self.labels = Y.numpy().reshape(-1, 1).astype(np.float64) if labels is None else labels

    def get_idx_split(self) -> dict:
        return {"train": np.array([0, 1]), "valid": np.array([2]), "test": np.array([3, 4])}

    def __getitem__(self, i):
        assert i == 0
        graph = {"edge_index": np.array(EDGES), "node_feat": X.numpy(), "edge_feat": None,
                 "num_nodes": N}
        return graph, self.labels


# ---------------------------------------------------------------------------- PyG


def test_from_pyg_keeps_pyg_direction_and_masks():
    ds = from_pyg(fake_pyg(), name="hand")
    assert ds.name == "hand" and ds.num_nodes == N and ds.num_classes == 3
    assert _rows(ds.graph) == ROWS
    assert torch.equal(ds.features, X) and torch.equal(ds.labels, Y)
    assert ds.train_idx.tolist() == [0, 1] and ds.val_idx.tolist() == [2]
    assert ds.test_idx.tolist() == [3, 4]
    assert ds.meta["source"] == "pyg"


def test_from_pyg_symmetrize_and_weights():
    w = torch.tensor([0.1, 0.2, 0.3, 0.4])                      # one per EDGES column
    ds = from_pyg(fake_pyg(edge_weight=w))
    g = ds.graph
    assert g.weights is not None
    got = {(v, int(u)): float(g.weights[i]) for v in range(N)
           for i, u in zip(range(g.indptr[v], g.indptr[v + 1]), g.indices[g.indptr[v]:])}
    assert got == pytest.approx({(1, 0): 0.1, (2, 1): 0.2, (0, 2): 0.3, (1, 3): 0.4})
    sym = from_pyg(fake_pyg(edge_index=torch.tensor([[0, 1, 1], [1, 0, 2]])), symmetrize=True)
    assert _rows(sym.graph) == {0: [1], 1: [0, 2], 2: [1], 3: [], 4: []}


@pytest.mark.filterwarnings("ignore:Sparse")
def test_from_pyg_adj_t_equals_edge_index():
    ei = torch.tensor(EDGES)
    # adj_t[v, u] = 1 for every edge u -> v (PyG's ToSparseTensor layout)
    adj_t = torch.sparse_coo_tensor(torch.stack([ei[1], ei[0]]), torch.ones(4), (N, N))
    ds = from_pyg(fake_pyg(edge_index=None, adj_t=adj_t.to_sparse_csr()))
    assert _rows(ds.graph) == ROWS and ds.graph.weights is None


def test_from_pyg_split_overrides_and_2d_masks():
    ds = from_pyg(fake_pyg(), train=np.array([4, 0]), val=[1], test=TEST)
    assert ds.train_idx.tolist() == [4, 0] and ds.val_idx.tolist() == [1]
    two = torch.stack([TRAIN, TEST], dim=1)                     # (N, 2): two splits
    with pytest.raises(ValueError, match=r"train_mask has shape \(5, 2\): 2 splits.*split=0\.\.1"):
        from_pyg(fake_pyg(train_mask=two))
    assert from_pyg(fake_pyg(train_mask=two), split=1).train_idx.tolist() == [3, 4]


def test_from_pyg_unlabelled_nodes():
    y = torch.tensor([0, 1, -1, 1, 0])                         # node 2 unlabelled
    with pytest.raises(ValueError, match="val split holds node 2, which has no label"):
        from_pyg(fake_pyg(y=y))
    ds = from_pyg(fake_pyg(y=y), val=[1])
    assert ds.labels.tolist() == [0, 1, 0, 1, 0] and ds.meta["unlabelled"] == 1
    yf = torch.tensor([[0.0], [1.0], [float("nan")], [2.0], [1.0]])
    assert from_pyg(fake_pyg(y=yf), val=[1]).labels.tolist() == [0, 1, 0, 2, 1]


@pytest.mark.parametrize("kw, match", [
    (dict(x=None), "features is missing"),
    (dict(y=None), "labels is missing"),
    (dict(edge_index=None), r"neither edge_index nor adj_t.*dataset\[0\]"),
    (dict(x=torch.ones(4, F)), r"features must have shape \(5, F\), got \(4, 3\)"),
    (dict(y=torch.ones(N, 3)), "multi-label targets are not supported"),
    (dict(y=torch.tensor([0.0, 0.5, 1, 1, 0])), "holds 0.5, not a class id"),
    (dict(train_mask=torch.ones(4, dtype=torch.bool)), r"train split is a boolean mask of "
                                                        r"length 4, but the graph has 5 nodes"),
    (dict(val_mask=torch.tensor([0.0, 1.0])), "val split must hold integer node ids or be a "
                                               "boolean mask, got dtype torch.float32"),
    (dict(test_mask=None), "no test split found; pass test="),
    (dict(edge_index=torch.tensor([[0, 9], [1, 2]])), "node id 9, outside num_nodes=5"),
])
def test_from_pyg_bad_input(kw, match):
    with pytest.raises(ValueError, match=match) as e:
        from_pyg(fake_pyg(**kw))
    assert "PyG data 'pyg'" in str(e.value)


@pytest.mark.filterwarnings("ignore:Sparse")
def test_from_pyg_real_library_matches_message_passing():
    """With PyG installed: its own scatter over edge_index (source -> target) equals a sum over
    each fgnn row, so both use the same message direction."""
    pyg = pytest.importorskip("torch_geometric")
    from torch_geometric.data import Data
    from torch_geometric.utils import scatter
    g = torch.Generator().manual_seed(0)
    n = 40
    key = torch.randint(0, n * n, (160,), generator=g).unique()   # no repeated edge
    ei = torch.stack([key % n, key // n])
    x = torch.randn(n, 6, generator=g)
    data = Data(x=x, edge_index=ei, y=torch.randint(0, 4, (n,), generator=g),
                train_mask=torch.rand(n, generator=g) < 0.5, val_mask=torch.zeros(n, dtype=bool),
                test_mask=torch.ones(n, dtype=bool))
    ds = from_pyg(data)
    want = scatter(x[ei[0]], ei[1], dim=0, dim_size=n, reduce="sum")
    rows = torch.repeat_interleave(torch.arange(n), ds.graph.degrees())
    got = torch.zeros(n, 6).index_add_(0, rows, x[ds.graph.indices.long()])
    assert torch.allclose(got, want, atol=1e-5)
    assert torch.equal(ds.train_idx, data.train_mask.nonzero().flatten())
    adj = pyg.transforms.ToSparseTensor()(data.clone())          # adj_t instead of edge_index
    assert getattr(adj, "edge_index", None) is None
    assert _rows(from_pyg(adj).graph) == _rows(ds.graph)


# ---------------------------------------------------------------------------- DGL


def test_from_dgl_direction_keys_and_weights():
    ds = from_dgl(fake_dgl())
    assert _rows(ds.graph) == ROWS and ds.graph.weights is None
    assert ds.train_idx.tolist() == [0, 1] and ds.test_idx.tolist() == [3, 4]
    g = FakeDGLGraph({"h": X, "cls": Y, "train_mask": TRAIN, "val_mask": VAL, "test_mask": TEST},
                     {"w": torch.tensor([1.0, 2.0, 3.0, 4.0])})
    ds = from_dgl(g, feat_key="h", label_key="cls", weight_key="w")
    assert float(ds.graph.weights[ds.graph.indptr[0]]) == 3.0    # edge 2 -> 0
    assert ds.meta["source"] == "dgl"


def test_from_dgl_bad_input():
    with pytest.raises(ValueError, match=r"no ndata\['feat'\].*pass feat_key="):
        from_dgl(FakeDGLGraph({"label": Y}))
    with pytest.raises(ValueError, match=r"no edata\['w'\]"):
        from_dgl(fake_dgl(), weight_key="w")
    with pytest.raises(TypeError, match=r"from_dgl: target_type='a' does not apply to DGL graph "
                                        r"'dgl', a homogeneous graph"):
        from_dgl(fake_dgl(), target_type="a")


def test_homogeneous_objects_still_give_a_dataset_and_reject_typed_keywords():
    for ds in (from_pyg(fake_pyg()), from_dgl(fake_dgl())):
        assert type(ds) is Dataset and _rows(ds.graph) == ROWS
    with pytest.raises(TypeError, match=r"from_pyg: seed=3 does not apply to PyG data 'pyg', a "
                                        r"homogeneous graph"):
        from_pyg(fake_pyg(), seed=3)
    for wrong in ([1, 2], object()):   # neither a graph nor a typed graph: the type is named
        with pytest.raises(ValueError, match=rf"neither edge_index nor adj_t, nor the node_types "
                                             rf"and edge_types of a HeteroData \(got "
                                             rf"{type(wrong).__name__};"):
            from_pyg(wrong)


def test_from_dgl_real_library():
    dgl = pytest.importorskip("dgl")
    g = dgl.graph((torch.tensor(EDGES[0]), torch.tensor(EDGES[1])), num_nodes=N)
    g.ndata.update({"feat": X, "label": Y, "train_mask": TRAIN, "val_mask": VAL,
                    "test_mask": TEST})
    assert _rows(from_dgl(g).graph) == ROWS


# ---------------------------------------------------------------------------- OGB


def test_from_ogb_object():
    ds = from_ogb(FakeOGB())
    assert ds.name == "ogbn-fake" and ds.meta["source"] == "ogb"
    # symmetrised by default, like the ogb:DIR spec
    assert _rows(ds.graph) == {0: [1, 2], 1: [0, 2, 3], 2: [0, 1], 3: [1], 4: []}
    assert _rows(from_ogb(FakeOGB(), symmetrize=False).graph) == ROWS
    assert ds.labels.tolist() == Y.tolist() and ds.num_classes == 3
    assert (ds.train_idx.tolist(), ds.val_idx.tolist(), ds.test_idx.tolist()) == \
        ([0, 1], [2], [3, 4])


def test_from_ogb_nan_label_in_split():
    labels = np.array([[0.0], [1.0], [np.nan], [2.0], [1.0]])
    with pytest.raises(ValueError, match="OGB dataset 'ogbn-fake': the val split holds node 2, "
                                         "which has no label"):
        from_ogb(FakeOGB(labels))


def test_from_ogb_pyg_twin():
    """A ``PygNodePropPredDataset``: ``[0]`` is a Data, the splits come from get_idx_split()."""
    class PygTwin(FakeOGB):
        def __getitem__(self, i):
            return fake_pyg(train_mask=None, val_mask=None, test_mask=None,
                            y=Y.reshape(-1, 1))
    ds = from_ogb(PygTwin(), symmetrize=False)
    assert _rows(ds.graph) == ROWS and ds.train_idx.tolist() == [0, 1]


def test_from_ogb_name_needs_the_ogb_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "ogb", None)               # import ogb -> ImportError
    monkeypatch.setitem(sys.modules, "ogb.nodeproppred", None)
    with pytest.raises(ImportError, match=r"from_ogb\('ogbn-arxiv'\) needs the ogb package.*"
                                          r"pip install ogb.*ogb:DIR"):
        from_ogb("ogbn-arxiv")


def test_from_ogb_name_with_the_ogb_package(monkeypatch, tmp_path):
    opened = {}

    def open_dataset(name, root):
        opened.update(name=name, root=root)
        return FakeOGB()
    mod = types.ModuleType("ogb.nodeproppred")
    mod.NodePropPredDataset = open_dataset
    monkeypatch.setitem(sys.modules, "ogb", types.ModuleType("ogb"))
    monkeypatch.setitem(sys.modules, "ogb.nodeproppred", mod)
    ds = from_ogb("ogbn-fake", root=str(tmp_path))
    assert opened == {"name": "ogbn-fake", "root": str(tmp_path)} and ds.num_nodes == N
