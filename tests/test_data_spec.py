"""Dataset specs: parsing, dispatch to every loader, and malformed specs."""

from __future__ import annotations

import pytest
import torch

import fgnn.data as data
from fgnn.data import load_dataset, parse_spec, rmat_dataset, save_dataset


def test_exports():
    for name in ("Dataset", "Features", "load_dataset", "parse_spec", "save_dataset",
                 "load_planetoid", "load_ogb", "load_ondisk", "rmat_dataset",
                 "uniform_dataset", "write_features_npy_chunked", "from_pyg", "from_dgl",
                 "from_ogb", "split_ids"):
        assert name in data.__all__ and hasattr(data, name)


@pytest.mark.parametrize("spec, expected", [
    ("cora", ("cora", {})),
    ("PubMed", ("pubmed", {})),
    ("citeseer:normalize_features=false", ("citeseer", {"normalize_features": False})),
    ("rmat", ("rmat", {})),
    ("rmat:scale=20,edge_factor=16,feat_dim=128,train_frac=0.01,seed=0",
     ("rmat", {"scale": 20, "edge_factor": 16, "feat_dim": 128, "train_frac": 0.01,
               "seed": 0})),
    ("rmat: a=0.5 , b=0.2,c=0.2,num_classes=4,feat_dtype=float16,dedup=yes",
     ("rmat", {"a": 0.5, "b": 0.2, "c": 0.2, "num_classes": 4, "feat_dtype": "float16",
               "dedup": True})),
    ("uniform:scale=3,self_loops=0,weighted=off",
     ("uniform", {"scale": 3, "self_loops": False, "weighted": False})),
    ("ogb:/data/ogbn_products", ("ogb", {"path": "/data/ogbn_products"})),
    ("ondisk:rel/dir:with,comma=x", ("ondisk", {"path": "rel/dir:with,comma=x"})),
])
def test_parse_spec(spec, expected):
    assert parse_spec(spec) == expected


@pytest.mark.parametrize("spec, match", [
    ("", "non-empty"),
    ("reddit", "unknown kind 'reddit'"),
    ("rmat:scale=20,foo=1", r"'rmat:scale=20,foo=1'.*unknown key 'foo'"),
    ("uniform:a=0.5", "unknown key 'a' for uniform"),
    ("cora:scale=3", "unknown key 'scale' for cora"),
    ("rmat:scale=abc", r"key 'scale' has malformed value 'abc'"),
    ("rmat:scale=2.5", r"key 'scale' has malformed value '2.5'"),
    ("rmat:train_frac=x", r"key 'train_frac' has malformed value 'x'"),
    ("rmat:dedup=maybe", r"key 'dedup' has malformed value 'maybe'"),
    ("rmat:scale", r"item 'scale' is not key=value"),
    ("rmat:seed=1,seed=2", "key 'seed' given twice"),
    ("ogb:", "needs a directory"),
    ("ondisk:  ", "needs a directory"),
])
def test_parse_spec_errors(spec, match):
    with pytest.raises(ValueError, match=match):
        parse_spec(spec)


def test_load_synthetic():
    ds = load_dataset("rmat:scale=8,edge_factor=4,feat_dim=3,seed=2,num_classes=4")
    ref = rmat_dataset(8, 4, feat_dim=3, seed=2, num_classes=4)
    assert torch.equal(ds.graph.indices, ref.graph.indices) and ds.num_classes == 4
    u = load_dataset("uniform:scale=7,edge_factor=2,feat_dim=2,feat_dtype=float16")
    assert u.num_nodes == 128 and u.graph.num_edges == 256
    assert u.features.dtype == torch.float16


def test_load_synthetic_bad_value_names_spec():
    with pytest.raises(ValueError, match=r"'rmat:scale=4,a=0.9'.*a \+ b \+ c"):
        load_dataset("rmat:scale=4,a=0.9")
    with pytest.raises(ValueError, match=r"'uniform:scale=0'.*scale"):
        load_dataset("uniform:scale=0")


def test_load_ondisk_relative_to_root(tmp_path):
    ds = rmat_dataset(6, 2, feat_dim=2)
    save_dataset(ds, tmp_path / "saved")
    back = load_dataset("ondisk:saved", root=tmp_path)
    assert torch.equal(back.graph.indices, ds.graph.indices)
    assert load_dataset(f"ondisk:{tmp_path / 'saved'}").num_nodes == 64
    with pytest.raises(ValueError, match="manifest.json is missing"):
        load_dataset("ondisk:missing", root=tmp_path)


def test_load_ogb(tmp_path):
    from test_data_ogb import write_ogb

    write_ogb(tmp_path / "tiny")
    ds = load_dataset("ogb:tiny", root=tmp_path)
    assert ds.num_nodes == 5 and ds.graph.num_edges == 8


def test_load_planetoid_from_root_and_env(planetoid_root, monkeypatch):
    ds = load_dataset("cora", root=planetoid_root)
    assert (ds.num_nodes, ds.graph.num_edges) == (2708, 10556)
    monkeypatch.setenv("FGNN_PLANETOID_ROOT", str(planetoid_root))
    raw = load_dataset("cora:normalize_features=false")
    assert set(raw.features.unique().tolist()) == {0.0, 1.0}


def test_load_fake_citeseer_via_spec(tmp_path):
    from test_data_planetoid import write_fake_planetoid

    write_fake_planetoid(tmp_path, "citeseer", [515, 510, 513, 512])
    assert load_dataset("citeseer", root=tmp_path).num_nodes == 516


def test_planetoid_without_root(monkeypatch):
    monkeypatch.delenv("FGNN_PLANETOID_ROOT", raising=False)
    with pytest.raises(ValueError) as e:
        load_dataset("pubmed")
    msg = str(e.value)
    assert "'pubmed': no Planetoid data directory" in msg and "ind.pubmed.*" in msg
    assert "--data-root DIR" in msg and "data_root=DIR" in msg and "pass root=" not in msg
