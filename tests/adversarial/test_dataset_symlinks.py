"""Dataset directories (issue 19): a symlink whose target leaves the directory is refused with one
line, and no error message ever prints a file's contents."""

from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from fgnn.cli import main
from fgnn.data import load_dataset
from fgnn.data.ogb import load_ogb
from fgnn.data.ondisk import load_ondisk, save_dataset
from fgnn.data.planetoid import load_planetoid

TINY = "rmat:scale=6,edge_factor=4,feat_dim=4,num_classes=2,train_frac=0.5,seed=0"
PLANETOID = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "planetoid"
#: Stands in for /etc/passwd: a file outside the dataset that must never be echoed.
SECRET = "root:x:0:0:SECRET-LINE:/root:/bin/bash\n"


@pytest.fixture()
def secret(tmp_path) -> Path:
    p = tmp_path / "outside" / "passwd"
    p.parent.mkdir()
    p.write_text(SECRET)
    return p


@pytest.fixture()
def ondisk(tmp_path) -> Path:
    return save_dataset(load_dataset(TINY), tmp_path / "ds")


def _refusal(fn, *args) -> str:
    with pytest.raises(ValueError) as info:
        fn(*args)
    line = str(info.value)
    assert len(line.splitlines()) == 1, line
    # not a line, nor its first bytes (gzip quotes b'ro', the unpickler the key 'r')
    assert not any(frag in line for frag in ("root:", "SECRET", "b'ro", "'r'")), line
    return line


@pytest.mark.parametrize("name", ["labels.npy", "features.npy", "manifest.json"])
def test_ondisk_symlink_leaving_the_directory_refused(ondisk, secret, name):
    (ondisk / name).unlink()
    (ondisk / name).symlink_to(secret)
    line = _refusal(load_ondisk, ondisk)
    assert name in line and "leaves the dataset directory" in line


def test_ondisk_symlink_inside_the_directory_followed(ondisk):
    (ondisk / "sub").mkdir()
    os.replace(ondisk / "labels.npy", ondisk / "sub" / "labels.npy")
    (ondisk / "labels.npy").symlink_to(Path("sub") / "labels.npy")
    assert load_ondisk(ondisk).num_nodes == 64


@pytest.mark.parametrize("name", ["labels.npy", "manifest.json"])
def test_ondisk_error_never_prints_contents(ondisk, name):
    (ondisk / name).write_text(SECRET)
    line = _refusal(load_ondisk, ondisk)
    assert name in line


def test_cli_refuses_symlinked_labels_in_one_line(ondisk, secret, capsys):
    import ray

    (ondisk / "labels.npy").unlink()
    (ondisk / "labels.npy").symlink_to(secret)
    with pytest.raises(SystemExit) as e:
        main(["--dataset", f"ondisk:{ondisk}", "--epochs", "1"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "labels.npy" in err[0] and "root:x" not in err[0], err
    assert not ray.is_initialized()


@pytest.fixture()
def cora_copy(tmp_path) -> Path:
    if not (PLANETOID / "ind.cora.x").is_file():
        pytest.skip(f"no Cora files under {PLANETOID}")
    root = tmp_path / "planetoid"
    shutil.copytree(PLANETOID, root)
    for p in root.iterdir():
        p.chmod(0o644)
    return root


def test_planetoid_symlink_leaving_the_root_refused(cora_copy, secret):
    (cora_copy / "ind.cora.test.index").unlink()
    (cora_copy / "ind.cora.test.index").symlink_to(secret)
    line = _refusal(load_planetoid, "cora", cora_copy)
    assert "ind.cora.test.index" in line and "leaves the dataset directory" in line


@pytest.mark.parametrize("name", ["ind.cora.test.index", "ind.cora.graph", "ind.cora.x"])
def test_planetoid_error_never_prints_contents(cora_copy, name):
    (cora_copy / name).write_text(SECRET)
    line = _refusal(load_planetoid, "cora", cora_copy)
    assert name in line


def _ogb(root: Path) -> Path:
    files = {"raw/edge.csv.gz": "0,1\n1,2\n", "raw/node-feat.csv.gz": "1,2\n3,4\n5,6\n",
             "raw/node-label.csv.gz": "0\n1\n0\n", "split/s/train.csv.gz": "0\n",
             "split/s/valid.csv.gz": "1\n", "split/s/test.csv.gz": "2\n"}
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        with gzip.open(root / rel, "wt") as f:
            f.write(text)
    return root


def test_ogb_symlink_leaving_the_directory_refused(tmp_path, secret):
    root = _ogb(tmp_path / "ogbn_x")
    assert load_ogb(root).num_nodes == 3
    (root / "raw" / "node-label.csv.gz").unlink()
    (root / "raw" / "node-label.csv.gz").symlink_to(secret)
    line = _refusal(load_ogb, root)
    assert "node-label.csv.gz" in line and "leaves the dataset directory" in line


def test_ogb_error_never_prints_contents(tmp_path):
    root = _ogb(tmp_path / "ogbn_x")
    (root / "raw" / "node-label.csv.gz").write_text(SECRET)  # not gzip: its bytes not echoed
    line = _refusal(load_ogb, root)
    assert "node-label.csv.gz" in line


def test_npy_with_garbage_header_not_echoed(ondisk):
    raw = (ondisk / "labels.npy").read_bytes()
    header_end = raw.index(b"\n") + 1
    bad = b"\x93NUMPY\x01\x00" + len(b"{SECRET-LINE}\n").to_bytes(2, "little") + \
        b"{SECRET-LINE}\n"
    (ondisk / "labels.npy").write_bytes(bad + raw[header_end:])
    assert "does not parse" in _refusal(load_ondisk, ondisk)
    np.save(ondisk / "labels.npy", np.zeros(64, dtype=np.int64))
    load_ondisk(ondisk)
