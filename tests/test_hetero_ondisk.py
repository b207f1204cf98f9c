"""The heterogeneous on-disk format: an exact round trip (types, relations, features, labels,
splits, weights, a featureless type) and every refusal, each one line naming the file or
manifest field and the value."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from fgnn.data import load_dataset, load_ondisk, load_ondisk_hetero, rmat_dataset, \
    save_dataset, save_ondisk_hetero
from fgnn.graph import CSRGraph
from fgnn import HeteroGraph

UI = ("user", "rates", "item")
IU = ("item", "rated_by", "user")
II = ("item", "also", "item")
EDGES_UI = torch.tensor([[0, 0, 1, 1, 1, 2, 4], [0, 1, 1, 2, 3, 3, 0]])
EDGES_II = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 1]])
NUM = {"user": 5, "item": 4}          # rectangular relations both ways


def _graph() -> HeteroGraph:
    gen = torch.Generator().manual_seed(0)
    g = HeteroGraph.from_edge_index(
        NUM, {UI: EDGES_UI, IU: EDGES_UI.flip(0), II: EDGES_II},
        {"item": torch.randn(4, 3, generator=gen)},
        labels=torch.tensor([0, 2, 1, 2]), target_type="item", meta={"name": "tiny"})
    csr = g.relations[II]                                   # one weighted relation
    g.relations[II] = CSRGraph(csr.indptr, csr.indices,
                               torch.arange(csr.num_edges, dtype=torch.float32) + 0.5)
    return g


SPLITS = {"train_idx": torch.tensor([True, True, False, False]), "test_idx": torch.tensor([3])}


@pytest.fixture
def saved(tmp_path) -> Path:
    return save_ondisk_hetero(_graph(), tmp_path / "het", splits=SPLITS)


def _manifest(d: Path) -> dict:
    return json.loads((d / "manifest.json").read_text())


def _write_manifest(d: Path, m: dict) -> None:
    (d / "manifest.json").write_text(json.dumps(m))


def _refused(d: Path, match: str, **kw) -> str:
    with pytest.raises(ValueError, match=match) as err:
        load_ondisk_hetero(d, **kw)
    assert "\n" not in str(err.value)
    return str(err.value)


# ---------------------------------------------------------------------------- round trip
def test_round_trip_is_exact(saved):
    g, back = _graph(), load_ondisk_hetero(saved)
    m = _manifest(saved)
    assert m["format"] == "fgnn-ondisk-hetero" and m["name"] == "tiny"
    assert [e["name"] for e in m["node_types"]] == ["user", "item"]
    assert m["node_types"][0]["features"] is None                  # learned embeddings
    assert m["target"] == {"type": "item", "num_classes": 3, "labels": "labels.npy",
                           "train_idx": "train_idx.npy", "val_idx": None,
                           "test_idx": "test_idx.npy"}
    assert back.num_nodes == NUM and back.edge_types == [UI, IU, II]
    for et in g.edge_types:
        a, b = g.relations[et], back.relations[et]
        assert torch.equal(a.indptr, b.indptr) and torch.equal(a.indices, b.indices), et
        assert a.indices.dtype == b.indices.dtype
    assert back.relations[UI].weights is None
    assert torch.equal(back.relations[II].weights, g.relations[II].weights)
    assert set(back.features) == {"item"}
    assert torch.equal(back.features["item"], g.features["item"])
    assert torch.equal(back.labels, g.labels) and back.target_type == "item"
    assert back.meta["num_classes"] == 3 and back.meta["name"] == "tiny"
    assert {k: v.tolist() for k, v in back.meta["splits"].items()} == \
        {"train_idx": [0, 1], "test_idx": [3]}
    assert sorted(p.name for p in saved.parent.iterdir()) == ["het"]   # no temp dirs left
    back.features["item"][0, 0] = 99.0                             # copy-on-write map
    assert load_ondisk_hetero(saved).features["item"][0, 0] != 99.0


def test_resave_keeps_splits_float16_and_overwrite(saved, tmp_path):
    back = load_ondisk_hetero(saved)
    again = save_ondisk_hetero(back, tmp_path / "again", feat_dtype="float16")
    two = load_ondisk_hetero(again)
    assert two.features["item"].dtype == torch.float16
    assert torch.equal(two.features["item"], back.features["item"].half())
    assert two.meta["splits"]["train_idx"].tolist() == [0, 1]
    with pytest.raises(ValueError, match="already exists"):
        save_ondisk_hetero(back, again)
    plain = HeteroGraph.from_edge_index({"a": 2}, {("a", "to", "a"): torch.tensor([[0], [1]])})
    save_ondisk_hetero(plain, again, overwrite=True)
    one = load_ondisk_hetero(again)
    assert one.labels is None and one.features == {} and one.meta["splits"] == {}


def test_writer_sorts_rows_and_refuses_bad_input(tmp_path):
    csr = CSRGraph(torch.tensor([0, 0, 2, 2]), torch.tensor([2, 0]))        # row 1 unsorted
    g = HeteroGraph({"a": 3}, {("a", "to", "a"): csr})
    back = load_ondisk_hetero(save_ondisk_hetero(g, tmp_path / "s"))
    assert back.relations[("a", "to", "a")].indices.tolist() == [0, 2]
    bad = _graph()
    bad.features["item"][2, 1] = float("nan")
    with pytest.raises(ValueError, match="node type 'item' features: non-finite value NaN at "
                                         "row 2, column 1"):
        save_ondisk_hetero(bad, tmp_path / "n")
    with pytest.raises(ValueError, match=r"test_idx holds id 4, outside num_nodes\['item'\]"):
        save_ondisk_hetero(_graph(), tmp_path / "n", splits={"test_idx": [4]})
    with pytest.raises(ValueError, match="unknown split 'dev'"):
        save_ondisk_hetero(_graph(), tmp_path / "n", splits={"dev": [1]})
    with pytest.raises(ValueError, match="labels hold class 2, outside num_classes=2"):
        save_ondisk_hetero(_graph(), tmp_path / "n", num_classes=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s"]     # nothing half-written


def test_formats_point_at_each_other(saved, tmp_path):
    with pytest.raises(ValueError, match="a heterogeneous graph; load it with "
                                         "fgnn.data.load_ondisk_hetero"):
        load_ondisk(saved)
    typed = load_dataset(f"ondisk:{saved}")    # the dataset spec reads both formats
    assert type(typed).__name__ == "HeteroDataset" and typed.target_type == "item"
    assert typed.train_idx.tolist() == [0, 1] and typed.test_idx.tolist() == [3]
    assert typed.val_idx.numel() == 0 and torch.equal(typed.labels, _graph().labels)
    homo = save_dataset(rmat_dataset(5, 2, feat_dim=2, num_classes=2), tmp_path / "homo")
    _refused(homo, "field 'format' is 'fgnn-ondisk', a homogeneous dataset: load it with "
                   "fgnn.data.load_ondisk")


# ---------------------------------------------------------------------------- manifest fields
@pytest.mark.parametrize("field", ["format", "version", "name", "node_types", "edge_types",
                                   "target"])
def test_top_level_field_missing(saved, field):
    m = _manifest(saved)
    del m[field]
    _write_manifest(saved, m)
    _refused(saved, f"manifest.json lacks field '{field}'")


@pytest.mark.parametrize("edit, match", [
    (lambda m: m.update(version=2), "field 'version' must be 1, got 2"),
    (lambda m: m.update(format="other"), "field 'format' must be 'fgnn-ondisk-hetero', got "
                                         "'other'"),
    (lambda m: m.update(node_types=[]), "field 'node_types' must list at least one"),
    (lambda m: m.update(node_types={}), "field 'node_types' must be a list, got {}"),
    (lambda m: m["node_types"][0].update(num_nodes="5"),
     r"field 'node_types\[0\].num_nodes' must be a non-negative int, got '5'"),
    (lambda m: m["node_types"][1].update(name="user"),
     r"field 'node_types\[1\].name' repeats node type 'user'"),
    (lambda m: m["node_types"][1].update(feat_dtype="float64"),
     r"field 'node_types\[1\].feat_dtype' must be one of .*got 'float64'"),
    (lambda m: m["node_types"][1].pop("feat_dim"),
     r"lacks field 'node_types\[1\].feat_dim'"),
    (lambda m: m["node_types"][1].update(features="../x.npy"),
     r"field 'node_types\[1\].features' must be a plain file name inside .* or null, got "
     r"'../x.npy'"),
    (lambda m: m["edge_types"][0].update(src="movie"),
     r"field 'edge_types\[0\].src' names node type 'movie', which node_types lacks"),
    (lambda m: m["edge_types"][1].update(indices=7),
     r"field 'edge_types\[1\].indices' must be a plain file name .*got 7"),
    (lambda m: m["edge_types"][2].pop("num_edges"), r"lacks field 'edge_types\[2\].num_edges'"),
    (lambda m: m["edge_types"].append(m["edge_types"][0]),
     r"field 'edge_types\[3\]' repeats relation \('user', 'rates', 'item'\)"),
    (lambda m: m["edge_types"].__setitem__(0, [1]),
     r"field 'edge_types\[0\]' must be a JSON object, got \[1\]"),
    (lambda m: m["target"].update(type="movie"),
     "field 'target.type' names node type 'movie', which node_types lacks"),
    (lambda m: m["target"].update(num_classes=-1),
     "field 'target.num_classes' must be a non-negative int, got -1"),
])
def test_bad_manifest_field(saved, edit, match):
    m = _manifest(saved)
    edit(m)
    _write_manifest(saved, m)
    msg = _refused(saved, match)
    assert "manifest.json" in msg


# ---------------------------------------------------------------------------- files
@pytest.mark.parametrize("name, field", [("node1.features.npy", r"node_types\[1\].features"),
                                         ("edge0.indices.npy", r"edge_types\[0\].indices"),
                                         ("edge2.weights.npy", r"edge_types\[2\].weights"),
                                         ("labels.npy", "target.labels"),
                                         ("test_idx.npy", "target.test_idx")])
def test_missing_file(saved, name, field):
    (saved / name).unlink()
    _refused(saved, rf"{name} \(manifest field {field}\) is missing")


def test_shape_dtype_truncation_and_order(saved):
    m = _manifest(saved)
    m["edge_types"][0]["num_edges"] = 6
    _write_manifest(saved, m)
    _refused(saved, r"edge0\.indices\.npy \(edge_types\[0\]\.indices\) has shape \(7,\), "
                    r"expected \(6,\)")
    m["edge_types"][0]["num_edges"] = 7
    m["node_types"][1]["feat_dtype"] = "float16"
    _write_manifest(saved, m)
    _refused(saved, r"node1\.features\.npy \(node_types\[1\]\.features\) has dtype float32, "
                    r"expected float16")
    m["node_types"][1]["feat_dtype"] = "float32"
    _write_manifest(saved, m)
    np.save(saved / "edge1.indptr.npy", np.zeros(4, dtype=np.int64))   # users: 5 + 1 rows
    _refused(saved, r"edge1\.indptr\.npy \(edge_types\[1\]\.indptr\) has shape \(4,\), "
                    r"expected \(6,\)")
    feats = np.load(saved / "node1.features.npy")
    np.save(saved / "node1.features.npy", np.asfortranarray(feats))
    _refused(saved, r"node_types\[1\]\.features\) must be C-order")
    np.save(saved / "node1.features.npy", feats)
    data = (saved / "node1.features.npy").read_bytes()
    (saved / "node1.features.npy").write_bytes(data[:-5])
    _refused(saved, r"node1\.features\.npy \(node_types\[1\]\.features\) is truncated")
    (saved / "node1.features.npy").write_bytes(b"hello")
    _refused(saved, r"node1\.features\.npy is not a valid \.npy file")


def test_bad_csr(saved):
    good = np.load(saved / "edge0.indices.npy")
    bad = good.copy()
    bad[-1] = 5                                                   # users are 0..4
    np.save(saved / "edge0.indices.npy", bad)
    _refused(saved, r"edge0\.indices\.npy \(edge_types\[0\]\.indices\) holds source id 5, "
                    r"outside num_nodes\['user'\]=5")
    bad[-1] = -1
    np.save(saved / "edge0.indices.npy", bad)
    _refused(saved, r"holds source id -1")
    np.save(saved / "edge0.indices.npy", good)
    ip = np.load(saved / "edge0.indptr.npy")
    ip2 = ip.copy()
    ip2[1], ip2[2] = ip[2] + 1, ip[1]
    np.save(saved / "edge0.indptr.npy", ip2)
    _refused(saved, r"edge0\.indptr\.npy/edge0\.indices\.npy in .* \(edge_types\[0\]\) form "
                    r"an inconsistent CSR graph")
    np.save(saved / "edge0.indptr.npy", ip)
    row = int(np.nonzero(np.diff(ip) >= 2)[0][0])                 # item 1: users 0, 1
    swapped = good.copy()
    swapped[ip[row]], swapped[ip[row] + 1] = good[ip[row] + 1], good[ip[row]]
    np.save(saved / "edge0.indices.npy", swapped)
    _refused(saved, rf"edge0\.indices\.npy \(edge_types\[0\]\.indices\) is not sorted within "
                    rf"row {row}")


def test_bad_labels_and_splits(saved):
    np.save(saved / "labels.npy", np.array([0, 1, 3, 0]))
    _refused(saved, r"labels\.npy \(target\.labels\) holds class 3, outside \[0, "
                    r"num_classes=3\)")
    np.save(saved / "labels.npy", np.array([0, 1, 2, 0]))
    np.save(saved / "test_idx.npy", np.array([1, 4]))
    _refused(saved, r"test_idx\.npy \(target\.test_idx\) holds id 4, outside "
                    r"num_nodes\['item'\]=4")
    np.save(saved / "test_idx.npy", np.array([True, False]))
    _refused(saved, r"test_idx\.npy \(target\.test_idx\) is a boolean mask of length 2")
    np.save(saved / "test_idx.npy", np.array([0.5]))
    _refused(saved, r"test_idx\.npy \(target\.test_idx\) has dtype float64")


@pytest.mark.parametrize("value, shown", [(np.nan, "NaN"), (np.inf, "inf"), (-np.inf, "-inf")])
def test_non_finite_features_refused(saved, value, shown):
    feats = np.load(saved / "node1.features.npy")
    feats[3, 2] = value
    np.save(saved / "node1.features.npy", feats)
    _refused(saved, rf"node1\.features\.npy \(node_types\[1\]\.features\): non-finite value "
                    rf"{shown} at row 3, column 2")
    assert load_ondisk_hetero(saved, check_nan=False).num_nodes == NUM   # opt-out


def test_symlink_leaving_the_directory_is_refused(saved, tmp_path):
    outside = tmp_path / "outside.npy"
    os.replace(saved / "edge1.indices.npy", outside)
    (saved / "edge1.indices.npy").symlink_to(outside)
    _refused(saved, r"on-disk file .*edge1\.indices\.npy is a symlink that leaves the dataset "
                    r"directory")
    os.replace(outside, saved / "inside.npy")                     # a link inside is followed
    (saved / "edge1.indices.npy").unlink()
    (saved / "edge1.indices.npy").symlink_to(saved / "inside.npy")
    assert load_ondisk_hetero(saved).num_edges(IU) == 7
    man = saved / "manifest.json"
    os.replace(man, tmp_path / "m.json")
    man.symlink_to(tmp_path / "m.json")
    _refused(saved, "on-disk manifest .*manifest.json is a symlink that leaves")
