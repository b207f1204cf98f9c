"""OGB raw-directory loader on tiny directories written by the tests."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest
import torch

from fgnn.data import load_ogb
from fgnn.data.ogb import read_csv_matrix

# A 5-node graph, directed edges 0->1, 1->2, 2->0, 3->4, 0->1 (duplicate).
EDGES = "0,1\n1,2\n2,0\n3,4\n0,1\n"
FEATS = "\n".join(f"{v}.5,{-v},1e-3" for v in range(5)) + "\n"
LABELS = "0\n2\n1\n2\n0\n"


def _w(path: Path, text: str, gz: bool = True) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if gz:
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        path.with_suffix("").write_text(text)                    # plain .csv


def write_ogb(root: Path, *, edges=EDGES, feats=FEATS, labels=LABELS, num_nodes="5\n",
              split="sales_ranking", train="0\n1\n", valid="2\n", test="3\n4\n",
              gz=True) -> Path:
    raw = root / "raw"
    _w(raw / "edge.csv.gz", edges, gz)
    _w(raw / "node-feat.csv.gz", feats, gz)
    _w(raw / "node-label.csv.gz", labels, gz)
    if num_nodes is not None:
        _w(raw / "num-node-list.csv.gz", num_nodes, gz)
    for name, text in (("train", train), ("valid", valid), ("test", test)):
        _w(root / "split" / split / f"{name}.csv.gz", text, gz)
    return root


def _pairs(g) -> set[tuple[int, int]]:
    src, dst = g.edge_index()
    return set(zip(src.tolist(), dst.tolist()))


@pytest.mark.parametrize("gz", [True, False])
def test_load_symmetrised(tmp_path, gz):
    ds = load_ogb(write_ogb(tmp_path / "ogbn_tiny", gz=gz))
    assert ds.name == "ogbn_tiny" and ds.num_nodes == 5 and ds.num_classes == 3
    assert ds.features.dtype == torch.float32 and ds.features.shape == (5, 3)
    assert torch.allclose(ds.features[:, 0], torch.arange(5) + 0.5)
    assert torch.allclose(ds.features[:, 1], -torch.arange(5).float())
    assert ds.labels.tolist() == [0, 2, 1, 2, 0]
    assert ds.train_idx.tolist() == [0, 1] and ds.val_idx.tolist() == [2]
    assert ds.test_idx.tolist() == [3, 4]
    directed = {(0, 1), (1, 2), (2, 0), (3, 4)}
    assert _pairs(ds.graph) == directed | {(b, a) for a, b in directed}
    assert ds.graph.num_edges == 8                               # duplicate removed
    assert ds.meta["split_type"] == "sales_ranking"


def test_load_directed_row_is_destination(tmp_path):
    ds = load_ogb(write_ogb(tmp_path / "d", num_nodes=None), symmetrize=False)
    assert _pairs(ds.graph) == {(0, 1), (1, 2), (2, 0), (3, 4)}
    # Row 1 (destination) aggregates from 0.
    g = ds.graph
    assert g.indices[g.indptr[1]:g.indptr[2]].tolist() == [0]


def test_unlabelled_nodes_outside_splits(tmp_path):
    ds = load_ogb(write_ogb(tmp_path / "d", labels="0\n1\nnan\n1\n1\n", valid=""))
    assert ds.labels.tolist() == [0, 1, 0, 1, 1] and ds.meta["unlabelled"] == 1
    assert ds.val_idx.numel() == 0


def test_read_csv_matrix_shapes(tmp_path):
    p = tmp_path / "m.csv"
    p.write_text("1,2,3\n4,5,6")                                  # no final newline
    assert read_csv_matrix(p, np.int64).tolist() == [[1, 2, 3], [4, 5, 6]]


# ------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize("rel", ["raw/edge.csv.gz", "raw/node-feat.csv.gz",
                                 "raw/node-label.csv.gz", "split/sales_ranking/valid.csv.gz"])
def test_missing_file(tmp_path, rel):
    root = write_ogb(tmp_path / "d")
    (root / rel).unlink()
    with pytest.raises(ValueError, match=rf"{rel.split('/')[-1]} is missing"):
        load_ogb(root)


def test_missing_directory(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        load_ogb(tmp_path / "nope")


@pytest.mark.parametrize("kw, match", [
    (dict(edges="0,1\n1,x\n"), r"edge\.csv\.gz holds a value that is not int64"),
    (dict(edges="0,1\n1\n2,3\n"), r"edge\.csv\.gz is malformed"),
    (dict(edges="0,1,2\n"), r"edge\.csv\.gz has 3 columns, expected 2"),
    (dict(edges="0,1\n1,7\n"), r"edge\.csv\.gz holds node id 7, outside \[0, 5\)"),
    (dict(edges="0,1\n-1,2\n"), r"edge\.csv\.gz holds node id -1"),
    (dict(feats="1,2\n3\n4,5\n5,6\n7,8\n"), r"node-feat\.csv\.gz is malformed"),
    (dict(feats="1,2\n3,nan\n4,5\n5,6\n7,8\n"), r"node-feat\.csv\.gz: non-finite value NaN "
                                                r"at row 1, column 1"),
    (dict(num_nodes="6\n"), r"node-feat\.csv\.gz has 5 rows but .*num_nodes=6"),
    (dict(labels="0\n1\n2\n"), r"node-label\.csv\.gz has 3 rows but .*has 5"),
    (dict(labels="0\n1\n2\n-1\n0\n"), r"node-label\.csv\.gz holds label -1"),
    (dict(labels="0\n1.5\n2\n1\n0\n"), r"node-label\.csv\.gz holds label 1\.5"),
    (dict(labels="0,1\n1,0\n1,1\n0,0\n1,1\n"), r"node-label\.csv\.gz must hold one class id"),
    (dict(labels="0\nnan\n1\n1\n1\n"), r"train\.csv\.gz holds node 1, whose label"),
    (dict(test="3\n5\n"), r"test\.csv\.gz holds node id 5, outside \[0, 5\)"),
    (dict(train="0\nabc\n"), r"train\.csv\.gz holds a value"),
])
def test_bad_files(tmp_path, kw, match):
    root = write_ogb(tmp_path / "d", **kw)
    with pytest.raises(ValueError, match=match):
        load_ogb(root)


def test_corrupt_gzip(tmp_path):
    root = write_ogb(tmp_path / "d")
    (root / "raw" / "edge.csv.gz").write_bytes(b"\x1f\x8b not really gzip")
    with pytest.raises(ValueError, match=r"edge\.csv\.gz cannot be read"):
        load_ogb(root)


def test_split_type_choice(tmp_path):
    root = write_ogb(tmp_path / "d")
    write_ogb(root, split="time", train="4\n")
    with pytest.raises(ValueError, match=r"exactly one split .*\['sales_ranking', 'time'\]"):
        load_ogb(root)
    assert load_ogb(root, split_type="time").train_idx.tolist() == [4]
    with pytest.raises(ValueError, match="split_type='nope'"):
        load_ogb(root, split_type="nope")


def test_ogb_name_reads_the_folder_ogb_downloads_into(tmp_path):
    """``ogbn-arxiv`` with a root reads ``root/ogbn_arxiv`` (OGB's layout), no package needed."""
    from fgnn.data import load_dataset
    write_ogb(tmp_path / "ogbn_arxiv")
    ds = load_dataset("ogbn-arxiv", root=tmp_path)
    assert ds.num_nodes == 5 and ds.num_classes == 3
    assert load_dataset("OGBN-ARXIV", root=tmp_path).num_nodes == 5


@pytest.mark.parametrize("root", [None, "missing"])
def test_ogb_name_without_files_says_where_they_are_expected(tmp_path, root):
    from fgnn.data import load_dataset
    with pytest.raises(ValueError) as err:
        load_dataset("ogbn-products", root=None if root is None else tmp_path / root)
    msg = str(err.value)
    assert "ogbn_products/raw/edge.csv.gz" in msg and "never downloads" in msg
    if root is not None:
        assert str(tmp_path / root / "ogbn_products") in msg


def test_ogb_name_takes_no_parameters():
    from fgnn.data import parse_spec
    with pytest.raises(ValueError, match="takes no parameters"):
        parse_spec("ogbn-arxiv:x=1")


def test_cli_refuses_a_missing_ogb_folder_before_loading(tmp_path, cli_error):
    # launch.py's main in this process: exit 2 with one line (no traceback) on stderr, from
    # the check before loading (the loader's own error says "does not exist")
    line = cli_error(["--dataset", "ogbn-arxiv", "--data-root", str(tmp_path), "--epochs", "1"])
    assert "ogbn_arxiv" in line and "Traceback" not in line, line
    assert "OGB files not found under" in line, line
