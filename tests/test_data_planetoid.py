"""Planetoid loader: the real Cora files and tiny fake CiteSeer/PubMed-format directories."""

from __future__ import annotations

import pickle
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from fgnn.data import load_planetoid

# ------------------------------------------------------------------------------ real Cora


def test_cora_counts(planetoid_root):
    ds = load_planetoid("cora", planetoid_root)
    assert ds.num_nodes == 2708
    assert ds.graph.num_edges == 10556
    assert ds.feat_dim == 1433
    assert ds.num_classes == 7
    assert (ds.train_idx.numel(), ds.val_idx.numel(), ds.test_idx.numel()) == (140, 500, 1000)
    assert torch.equal(ds.train_idx, torch.arange(140))
    assert torch.equal(ds.val_idx, torch.arange(140, 640))
    # 20 training nodes per class; PyG's class histogram.
    assert torch.equal(torch.bincount(ds.labels[ds.train_idx]), torch.full((7,), 20))
    assert torch.bincount(ds.labels).tolist() == [351, 217, 418, 818, 426, 298, 180]


def test_cora_graph_symmetric_without_self_loops(planetoid_root):
    g = load_planetoid("cora", planetoid_root).graph
    src, dst = g.edge_index()
    assert not bool((src == dst).any())
    assert torch.equal(g.reverse().indices, g.indices)           # symmetric
    key = dst * g.num_nodes + src
    assert key.unique().numel() == key.numel()                   # no duplicates


def test_cora_features_normalised_or_raw(planetoid_root):
    ds = load_planetoid("cora", planetoid_root)
    assert ds.features.dtype == torch.float32
    sums = ds.features.sum(1)
    assert torch.allclose(sums[sums > 0], torch.ones(int((sums > 0).sum())), atol=1e-5)
    raw = load_planetoid("cora", planetoid_root, normalize_features=False)
    assert set(raw.features.unique().tolist()) == {0.0, 1.0}
    # Test rows are placed at the ids listed in ind.cora.test.index.
    listed = np.loadtxt(Path(planetoid_root) / "ind.cora.test.index", dtype=np.int64)
    assert torch.equal(raw.test_idx, torch.from_numpy(listed))


# ------------------------------------------------------------------------------ fake files
F, C, NTRAIN, NALL = 4, 3, 6, 510


def _dump(path: Path, obj) -> None:
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=2)                          # Python-2 compatible


def _onehot(classes: np.ndarray) -> np.ndarray:
    return np.eye(C, dtype=np.int32)[classes]


def write_fake_planetoid(root: Path, name: str, test_index: list[int],
                         graph: dict | None = None) -> None:
    """A Planetoid-format directory: node ``v``'s first feature is ``v``, its class ``v % 3``.

    Train = nodes 0..5, val = 6..505, allx covers 0..509, test ids as listed (tx/ty rows in
    the listed order, as in the real files).
    """
    allx_ids = np.arange(NALL)
    test = np.asarray(test_index)

    def feats(ids):
        m = np.zeros((len(ids), F), dtype=np.float32)
        m[:, 0] = ids
        m[:, 1] = 1.0
        return sp.csr_matrix(m)

    _dump(root / f"ind.{name}.x", feats(allx_ids[:NTRAIN]))
    _dump(root / f"ind.{name}.y", _onehot(allx_ids[:NTRAIN] % C))
    _dump(root / f"ind.{name}.allx", feats(allx_ids))
    _dump(root / f"ind.{name}.ally", _onehot(allx_ids % C))
    _dump(root / f"ind.{name}.tx", feats(test))
    _dump(root / f"ind.{name}.ty", _onehot(test % C))
    if graph is None:
        # 0-1 one way, 1-2 both ways, a duplicate 2-3, a self-loop 4-4, a test node edge.
        graph = {0: [1], 1: [2], 2: [1, 3, 3], 4: [4], 5: [int(test.max())]}
    _dump(root / f"ind.{name}.graph", graph)
    (root / f"ind.{name}.test.index").write_text("\n".join(map(str, test_index)) + "\n")


@pytest.mark.parametrize("name", ["citeseer", "pubmed", "cora"])
def test_fake_planetoid_contiguous(tmp_path, name):
    test_index = [513, 510, 512, 511]                            # unsorted, contiguous
    write_fake_planetoid(tmp_path, name, test_index)
    ds = load_planetoid(name.upper(), tmp_path, normalize_features=False)
    assert ds.name == name
    assert ds.num_nodes == 514 and ds.num_classes == C and ds.feat_dim == F
    assert torch.equal(ds.train_idx, torch.arange(NTRAIN))
    assert torch.equal(ds.val_idx, torch.arange(NTRAIN, NTRAIN + 500))
    assert ds.test_idx.tolist() == test_index
    ids = torch.arange(ds.num_nodes)
    assert torch.equal(ds.features[:, 0], ids.float())           # every row at its own id
    assert torch.equal(ds.labels, ids % C)
    # Edges: 0-1, 1-2, 2-3, 5-513 symmetrised; self-loop and duplicate dropped.
    src, dst = ds.graph.edge_index()
    pairs = set(zip(src.tolist(), dst.tolist()))
    want = {(0, 1), (1, 2), (2, 3), (5, 513)}
    assert pairs == want | {(b, a) for a, b in want}
    assert ds.graph.num_edges == 8


def test_fake_citeseer_isolated_test_nodes_padded(tmp_path):
    test_index = [515, 510, 513, 512]                            # 511 and 514 are isolated
    write_fake_planetoid(tmp_path, "citeseer", test_index)
    ds = load_planetoid("citeseer", tmp_path, normalize_features=False)
    assert ds.num_nodes == 516
    assert ds.test_idx.tolist() == test_index
    for v in test_index:
        assert float(ds.features[v, 0]) == v and int(ds.labels[v]) == v % C
    for v in (511, 514):
        assert not bool(ds.features[v].any()) and int(ds.labels[v]) == 0
        assert v not in ds.train_idx and v not in ds.val_idx and v not in ds.test_idx
    norm = load_planetoid("citeseer", tmp_path)                  # zero rows survive normalising
    assert not bool(torch.isnan(norm.features).any())
    assert torch.allclose(norm.features[515].sum(), torch.tensor(1.0))


# ------------------------------------------------------------------------------ bad input


def _fake(tmp_path, **kw) -> Path:
    write_fake_planetoid(tmp_path, "citeseer", [513, 510, 512, 511], **kw)
    return tmp_path


def test_missing_file(tmp_path):
    (_fake(tmp_path) / "ind.citeseer.ty").unlink()
    with pytest.raises(ValueError, match=r"ind\.citeseer\.ty.*missing"):
        load_planetoid("citeseer", tmp_path)


def test_missing_root(tmp_path):
    with pytest.raises(ValueError, match="not a directory"):
        load_planetoid("cora", tmp_path / "nope")


def test_not_a_pickle(tmp_path):
    (_fake(tmp_path) / "ind.citeseer.allx").write_bytes(b"garbage")
    with pytest.raises(ValueError, match=r"ind\.citeseer\.allx.*pickle"):
        load_planetoid("citeseer", tmp_path)


def test_wrong_object_type(tmp_path):
    _dump(_fake(tmp_path) / "ind.citeseer.x", [1, 2, 3])
    with pytest.raises(ValueError, match=r"ind\.citeseer\.x must hold"):
        load_planetoid("citeseer", tmp_path)


def test_feature_label_row_mismatch(tmp_path):
    _dump(_fake(tmp_path) / "ind.citeseer.ally", _onehot(np.arange(NALL - 1) % C))
    with pytest.raises(ValueError, match=r"ind\.citeseer\.allx has 510 rows.*ally has 509"):
        load_planetoid("citeseer", tmp_path)


def test_test_index_count_mismatch(tmp_path):
    (_fake(tmp_path) / "ind.citeseer.test.index").write_text("510\n511\n")
    with pytest.raises(ValueError, match=r"test\.index lists 2 test nodes"):
        load_planetoid("citeseer", tmp_path)


def test_test_index_not_integer(tmp_path):
    (_fake(tmp_path) / "ind.citeseer.test.index").write_text("510\nabc\n512\n513\n")
    with pytest.raises(ValueError, match=r"test\.index must hold one integer"):
        load_planetoid("citeseer", tmp_path)


def test_test_index_out_of_range(tmp_path):
    (_fake(tmp_path) / "ind.citeseer.test.index").write_text("3\n511\n512\n513\n")
    with pytest.raises(ValueError, match=r"smallest test node id is 3"):
        load_planetoid("citeseer", tmp_path)


def test_graph_node_id_out_of_range(tmp_path):
    _fake(tmp_path, graph={0: [1], 1: [9999]})
    with pytest.raises(ValueError, match=r"ind\.citeseer\.graph holds neighbour id 9999"):
        load_planetoid("citeseer", tmp_path)


def test_graph_not_a_dict(tmp_path):
    _fake(tmp_path, graph=[[0, 1]])
    with pytest.raises(ValueError, match=r"ind\.citeseer\.graph must hold a dict"):
        load_planetoid("citeseer", tmp_path)


def test_graph_non_integer_ids(tmp_path):
    _fake(tmp_path, graph={0: ["a"]})
    with pytest.raises(ValueError, match=r"ind\.citeseer\.graph must map integer"):
        load_planetoid("citeseer", tmp_path)


def test_nan_features(tmp_path):
    m = np.ones((NALL, F), dtype=np.float32)
    m[7, 2] = np.nan
    _dump(_fake(tmp_path) / "ind.citeseer.allx", sp.csr_matrix(m))
    with pytest.raises(ValueError, match=r"NaN at row 7, column 2"):
        load_planetoid("citeseer", tmp_path)


# ------------------------------------------------------------------------------ crafted pickles


class _EvalPayload:
    """Pickles as ``builtins.eval(code)``: writes ``marker``, then returns the real object read
    from ``original`` -- a file that loads cleanly under plain ``pickle.load``."""

    def __init__(self, marker: Path, original: Path) -> None:
        self.code = (f"(open({str(marker)!r}, 'w').write('pwned'), "
                     f"__import__('pickle').load(open({str(original)!r}, 'rb'), "
                     f"encoding='latin1'))[1]")

    def __reduce__(self):
        return (eval, (self.code,))


class _SystemPayload:
    """Pickles as ``os.system('touch marker')``."""

    def __init__(self, marker: Path, original: Path) -> None:
        self.cmd = f"touch {marker}"

    def __reduce__(self):
        import os
        return (os.system, (self.cmd,))


def _plant(root: Path, name: str, payload_cls, tmp_path: Path) -> tuple[Path, Path]:
    """Replace ``ind.<name>.x`` under ``root`` by a payload; return (payload file, marker)."""
    target = root / f"ind.{name}.x"
    original = tmp_path / "x.original"
    original.write_bytes(target.read_bytes())
    marker = tmp_path / "pwned.txt"
    _dump(target, payload_cls(marker, original))
    return target, marker


@pytest.mark.parametrize("payload", [_EvalPayload, _SystemPayload])
def test_code_running_pickle_refused_without_side_effect(tmp_path, payload):
    root = tmp_path / "data"
    root.mkdir()
    write_fake_planetoid(root, "citeseer", [513, 510, 512, 511])
    target, marker = _plant(root, "citeseer", payload, tmp_path)
    with pytest.raises(ValueError) as e:
        load_planetoid("citeseer", root)
    msg = str(e.value)
    assert len(msg.splitlines()) == 1
    assert str(target) in msg and "refused" in msg
    assert ("eval" if payload is _EvalPayload else "system") in msg
    assert not marker.exists()


def test_plain_pickle_load_would_run_the_payload(tmp_path, monkeypatch):
    """The same eval payload under plain ``pickle.load`` (the loader before the fix): it loads
    without error and writes the file -- what the test above guards against."""
    import fgnn.data.planetoid as planetoid
    root = tmp_path / "data"
    root.mkdir()
    write_fake_planetoid(root, "citeseer", [513, 510, 512, 511])
    _, marker = _plant(root, "citeseer", _EvalPayload, tmp_path)
    monkeypatch.setattr(planetoid, "_unpickle", lambda f: pickle.load(f, encoding="latin1"))
    ds = load_planetoid("citeseer", root)
    assert ds.num_nodes == 514
    assert marker.read_text() == "pwned"


def test_real_cora_with_payload_refused(planetoid_root, tmp_path):
    root = tmp_path / "cora"
    root.mkdir()
    for p in Path(planetoid_root).glob("ind.cora.*"):
        (root / p.name).write_bytes(p.read_bytes())
    target, marker = _plant(root, "cora", _EvalPayload, tmp_path)
    with pytest.raises(ValueError, match=r"ind\.cora\.x is refused: it names the global "):
        load_planetoid("cora", root)
    assert not marker.exists()


@pytest.mark.parametrize("make", [
    lambda: defaultdict(list, {0: [1, 2], 3: []}),
    lambda: {0: [1, 2]},
    lambda: sp.csr_matrix(np.eye(3, dtype=np.float32)),
    lambda: np.arange(6, dtype=np.int32).reshape(2, 3),
    lambda: np.int64(7),
], ids=["defaultdict", "dict", "csr", "ndarray", "scalar"])
@pytest.mark.parametrize("protocol", [2, 4])
def test_restricted_unpickler_admits_planetoid_types(tmp_path, make, protocol):
    """Objects of the Planetoid types, pickled by today's numpy/scipy, round-trip."""
    from fgnn.data.planetoid import read_planetoid_pickle
    obj = make()
    path = tmp_path / "obj.pkl"
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=protocol)
    back = read_planetoid_pickle(path)
    assert type(back) is type(obj)
    if sp.issparse(obj):
        assert (back != obj).nnz == 0
    elif isinstance(obj, dict):
        assert back == obj
    else:
        assert np.array_equal(back, obj) and back.dtype == obj.dtype
