"""On-disk format: atomic save, memory-mapped load, and every malformed-directory case."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from fgnn.data import Dataset, load_ondisk, rmat_dataset, save_dataset
from fgnn.data.ondisk import write_features_npy_chunked
from fgnn.graph import CSRGraph


@pytest.fixture(scope="module")
def small():
    return rmat_dataset(8, 4, feat_dim=5, num_classes=4, train_frac=0.1)


@pytest.fixture
def saved(tmp_path, small) -> Path:
    return save_dataset(small, tmp_path / "ds")


def _manifest(d: Path) -> dict:
    return json.loads((d / "manifest.json").read_text())


def _write_manifest(d: Path, m: dict) -> None:
    (d / "manifest.json").write_text(json.dumps(m))


def test_round_trip(saved, small):
    m = _manifest(saved)
    assert m == {
        "format": "fgnn-ondisk", "version": 1, "name": "rmat-8", "num_nodes": 256,
        "num_edges": 1024, "feat_dim": 5, "feat_dtype": "float32", "num_classes": 4,
        "files": {"indptr": "indptr.npy", "indices": "indices.npy", "weights": "weights.npy",
                  "features": "features.npy", "labels": "labels.npy",
                  "train_idx": "train_idx.npy", "val_idx": "val_idx.npy",
                  "test_idx": "test_idx.npy"}}
    ds = load_ondisk(saved)
    assert isinstance(ds.features, np.memmap) and ds.features.mode == "r"
    assert np.array_equal(np.asarray(ds.features), small.features.numpy())
    assert torch.equal(ds.graph.indptr, small.graph.indptr)
    assert torch.equal(ds.graph.indices, small.graph.indices)
    assert ds.graph.indices.dtype == torch.int32
    assert torch.equal(ds.graph.weights, small.graph.weights)
    for k in ("labels", "train_idx", "val_idx", "test_idx"):
        assert torch.equal(getattr(ds, k), getattr(small, k))
    assert ds.num_classes == 4 and ds.name == "rmat-8"
    # The features file is a standard .npy any reader opens.
    assert np.load(saved / "features.npy").shape == (256, 5)
    assert sorted(p.name for p in saved.parent.iterdir()) == ["ds"]  # no temp dirs left


def test_unweighted_float16_and_overwrite(tmp_path, small):
    g = CSRGraph(small.graph.indptr, small.graph.indices)
    ds = Dataset("plain", g, small.features.half(), small.labels, small.train_idx,
                 small.val_idx, small.test_idx, small.num_classes)
    d = save_dataset(ds, tmp_path / "ds")
    m = _manifest(d)
    assert m["files"]["weights"] is None and m["feat_dtype"] == "float16"
    assert not (d / "weights.npy").exists()
    back = load_ondisk(d)
    assert back.graph.weights is None and back.features.dtype == np.float16
    with pytest.raises(ValueError, match="already exists"):
        save_dataset(ds, d)
    # Re-save from the memory-mapped source, converting dtype, over the same directory.
    save_dataset(back, d, overwrite=True, feat_dtype="float32")
    again = load_ondisk(d)
    assert again.features.dtype == np.float32
    assert np.allclose(np.asarray(again.features), small.features.half().float().numpy())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]


def test_write_features_chunked_streams(tmp_path):
    src = np.lib.format.open_memmap(tmp_path / "src.npy", mode="w+", dtype=np.float32,
                                    shape=(37, 3))
    src[:] = np.arange(111, dtype=np.float32).reshape(37, 3)
    src.flush()
    ro = np.load(tmp_path / "src.npy", mmap_mode="r")
    write_features_npy_chunked(tmp_path / "out.npy", ro, chunk_bytes=24)   # 2 rows per chunk
    assert np.array_equal(np.load(tmp_path / "out.npy"), np.asarray(ro))
    with pytest.raises(ValueError, match="feat_dtype"):
        write_features_npy_chunked(tmp_path / "x.npy", torch.zeros(2, 2, dtype=torch.float64))
    with pytest.raises(ValueError, match="2-D"):
        write_features_npy_chunked(tmp_path / "x.npy", np.zeros(3, dtype=np.float32))


def test_save_nan_features_leaves_nothing(tmp_path, small):
    feats = small.features.numpy().copy()
    feats[9, 1] = np.nan
    ds = Dataset("nan", small.graph, feats, small.labels, small.train_idx, small.val_idx,
                 small.test_idx, small.num_classes, check_features=False)
    with pytest.raises(ValueError, match=r"NaN at row 9, column 1"):
        save_dataset(ds, tmp_path / "ds")
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------ bad directories


def test_missing_manifest(tmp_path):
    with pytest.raises(ValueError, match=r"manifest\.json is missing"):
        load_ondisk(tmp_path)


def test_manifest_not_json(saved):
    (saved / "manifest.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"manifest\.json is not valid JSON"):
        load_ondisk(saved)


@pytest.mark.parametrize("field", ["format", "version", "name", "num_nodes", "num_edges",
                                   "feat_dim", "feat_dtype", "num_classes", "files"])
def test_manifest_field_missing(saved, field):
    m = _manifest(saved)
    del m[field]
    _write_manifest(saved, m)
    with pytest.raises(ValueError, match=f"lacks field '{field}'"):
        load_ondisk(saved)


@pytest.mark.parametrize("field, value, match", [
    ("num_nodes", "256", "field 'num_nodes' must be a non-negative int"),
    ("num_edges", -1, "field 'num_edges' must be a non-negative int"),
    ("feat_dim", True, "field 'feat_dim'"),
    ("name", 3, "field 'name' must be str"),
    ("files", [], "field 'files' must be dict"),
    ("format", "other", "field 'format' must be 'fgnn-ondisk'"),
    ("version", 2, "field 'version' must be 1"),
    ("feat_dtype", "float64", "field 'feat_dtype' must be one of"),
])
def test_manifest_field_wrong(saved, field, value, match):
    m = _manifest(saved)
    m[field] = value
    _write_manifest(saved, m)
    with pytest.raises(ValueError, match=match):
        load_ondisk(saved)


@pytest.mark.parametrize("key", ["indptr", "features", "test_idx"])
def test_files_entry_missing_or_bad(saved, key):
    m = _manifest(saved)
    del m["files"][key]
    _write_manifest(saved, m)
    with pytest.raises(ValueError, match=f"lacks field 'files.{key}'"):
        load_ondisk(saved)
    m["files"][key] = "../escape.npy"
    _write_manifest(saved, m)
    with pytest.raises(ValueError, match=f"'files.{key}' must be a plain file name"):
        load_ondisk(saved)


@pytest.mark.parametrize("name", ["features.npy", "indices.npy", "labels.npy", "weights.npy"])
def test_missing_file(saved, name):
    (saved / name).unlink()
    with pytest.raises(ValueError, match=f"{name} .*is missing"):
        load_ondisk(saved)


def test_feature_shape_mismatch(saved):
    m = _manifest(saved)
    m["feat_dim"] = 6
    _write_manifest(saved, m)
    with pytest.raises(ValueError, match=r"features\.npy \(files\.features\) has shape "
                                         r"\(256, 5\), expected \(256, 6\)"):
        load_ondisk(saved)


def test_feature_dtype_mismatch(saved):
    m = _manifest(saved)
    m["feat_dtype"] = "float16"
    _write_manifest(saved, m)
    with pytest.raises(ValueError, match=r"features\.npy .*dtype float32, expected float16"):
        load_ondisk(saved)


def test_label_row_count_mismatch(saved):
    np.save(saved / "labels.npy", np.zeros(255, dtype=np.int64))
    with pytest.raises(ValueError, match=r"labels\.npy \(files\.labels\) has shape \(255,\)"):
        load_ondisk(saved)


def test_num_edges_mismatch(saved):
    m = _manifest(saved)
    m["num_edges"] = 1000
    _write_manifest(saved, m)
    with pytest.raises(ValueError, match=r"indices\.npy \(files\.indices\) has shape"):
        load_ondisk(saved)


def test_truncated_features(saved):
    path = saved / "features.npy"
    data = path.read_bytes()
    path.write_bytes(data[:-7])
    with pytest.raises(ValueError, match=r"features\.npy \(files\.features\) is truncated"):
        load_ondisk(saved)


def test_not_an_npy(saved):
    (saved / "indptr.npy").write_bytes(b"hello")
    with pytest.raises(ValueError, match=r"indptr\.npy is not a valid \.npy"):
        load_ondisk(saved)


def test_fortran_order_features(saved, small):
    np.save(saved / "features.npy", np.asfortranarray(small.features.numpy()))
    with pytest.raises(ValueError, match="C-order"):
        load_ondisk(saved)


def test_inconsistent_csr(saved, small):
    indptr = small.graph.indptr.numpy().copy()
    indptr[5], indptr[6] = indptr[6] + 1, indptr[5]              # non-monotone, same length
    np.save(saved / "indptr.npy", indptr)
    with pytest.raises(ValueError, match=r"indptr\.npy/indices\.npy .*inconsistent CSR"):
        load_ondisk(saved)


def test_out_of_range_neighbour(saved, small):
    indices = small.graph.indices.numpy().copy()
    indices[-1] = 256
    np.save(saved / "indices.npy", indices)
    with pytest.raises(ValueError, match=r"inconsistent CSR.*node id 256"):
        load_ondisk(saved)


def test_unsorted_row(saved, small):
    g = small.graph
    indices = g.indices.numpy().copy()
    starts = g.indptr[:-1].numpy()
    ok = (g.degrees().numpy() >= 2)
    ok[ok] = indices[starts[ok]] != indices[starts[ok] + 1]      # first two differ
    row = int(np.nonzero(ok)[0][0])
    lo = int(starts[row])
    indices[lo], indices[lo + 1] = indices[lo + 1], indices[lo]
    np.save(saved / "indices.npy", indices)
    with pytest.raises(ValueError, match=rf"indices\.npy \(files\.indices\) is not sorted "
                                         rf"within row {row}"):
        load_ondisk(saved)


def test_split_out_of_range(saved):
    np.save(saved / "val_idx.npy", np.array([0, 999], dtype=np.int64))
    with pytest.raises(ValueError, match="val_idx holds node id 999"):
        load_ondisk(saved)


def test_nan_features_on_load(saved, small):
    feats = small.features.numpy().copy()
    feats[200, 0] = np.nan
    np.save(saved / "features.npy", feats)
    with pytest.raises(ValueError, match=r"features\.npy \(files\.features\): non-finite "
                                         r"value NaN at row 200, column 0"):
        load_ondisk(saved)
    assert load_ondisk(saved, check_nan=False).num_nodes == 256   # opt-out
