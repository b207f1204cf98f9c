"""The third hostile trial (issue 40), malformed on-disk data: a ``.npy`` header that does not
tokenize, a manifest nested past Python's recursion limit, zero-width features and a typed
manifest without relations are each refused in one line naming the file (exit 2 on the command
line, ``ValueError`` from the API); ``save_dataset`` creates its directory as the umask says.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from fgnn.cli import main
from fgnn.data import load_dataset, load_ondisk, rmat_dataset, save_dataset
from fgnn.data.ondisk import read_npy_header
from fgnn.data.ondisk_hetero import save_ondisk_hetero
from fgnn.job import Job


@pytest.fixture(scope="module")
def small():
    return rmat_dataset(7, 4, feat_dim=5, num_classes=3, train_frac=0.3)


@pytest.fixture
def saved(tmp_path, small) -> Path:
    return save_dataset(small, tmp_path / "ds")


@pytest.fixture
def no_ray(monkeypatch):
    """Any path that would start Ray fails the test."""
    def refuse(self):
        raise AssertionError("Ray would start")
    monkeypatch.setattr(Job, "_init_ray", refuse)


def _cli_refusal(spec: str, capsys, tmp_path: Path) -> str:
    """The one stderr line of a launch.py run on ``spec`` that exits 2 and writes no report."""
    report = tmp_path / "r.json"
    with pytest.raises(SystemExit) as e:
        main(["--dataset", spec, "--epochs", "1", "--no-progress", "--dashboard-host", "off",
              "--report", str(report)])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert not report.exists()
    return err[0]


def _untokenizable_header(path: Path) -> None:
    """Rewrite ``path``'s .npy header as an unclosed dict: Python's tokenizer, which numpy's
    header parser runs, raises ``tokenize.TokenError`` (not a ``ValueError``) on it."""
    raw = path.read_bytes()
    offset = read_npy_header(path)[3]
    text = b"{'descr': '<i8', 'fortran_order': False, 'shape': (128, "
    header = text.ljust(offset - 10 - 1) + b"\n"
    path.write_bytes(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header
                     + raw[offset:])


def _deep_manifest(d: Path) -> None:
    """A manifest.json holding a list nested past the JSON decoder's recursion limit."""
    m = json.loads((d / "manifest.json").read_text())
    text = json.dumps(m)[:-1] + ', "extra": ' + "[" * 100_000 + "]" * 100_000 + "}"
    (d / "manifest.json").write_text(text)


def _zero_width(d: Path) -> None:
    """Features of zero columns, the manifest agreeing (``feat_dim`` 0)."""
    m = json.loads((d / "manifest.json").read_text())
    np.save(d / "features.npy", np.zeros((m["num_nodes"], 0), np.float32))
    m["feat_dim"] = 0
    (d / "manifest.json").write_text(json.dumps(m))


def test_untokenizable_npy_header_is_refused_naming_the_file(saved):
    _untokenizable_header(saved / "labels.npy")
    with pytest.raises(ValueError, match=r"labels\.npy is not a valid \.npy file: its header "
                                         r"does not parse"):
        read_npy_header(saved / "labels.npy")
    with pytest.raises(ValueError, match=r"labels\.npy"):
        load_ondisk(saved)


def test_deeply_nested_manifest_is_refused_naming_the_file(saved):
    _deep_manifest(saved)
    with pytest.raises(ValueError, match=r"manifest\.json is nested too deeply"):
        load_ondisk(saved)


def test_zero_width_features_are_refused_naming_the_file(saved):
    _zero_width(saved)
    with pytest.raises(ValueError, match=r"manifest\.json: field 'feat_dim' must be >= 1"):
        load_ondisk(saved)


def test_typed_manifest_without_relations_is_refused_naming_the_file(tmp_path):
    d = tmp_path / "typed"
    typed = load_dataset("hetero:papers=60,authors=30,seed=0")
    save_ondisk_hetero(typed.graph, d, num_classes=typed.num_classes)
    load_dataset(f"ondisk:{d}")  # loads as saved
    m = json.loads((d / "manifest.json").read_text())
    m["edge_types"] = []
    (d / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(ValueError, match=r"manifest\.json: field 'edge_types' must list at "
                                         r"least one relation, got \[\]"):
        load_dataset(f"ondisk:{d}")


@pytest.mark.parametrize("damage, named", [
    (lambda d: _untokenizable_header(d / "labels.npy"), "labels.npy"),
    (_deep_manifest, "manifest.json"),
    (_zero_width, "manifest.json"),
])
def test_cli_exits_2_naming_the_file(saved, damage, named, capsys, tmp_path, no_ray):
    damage(saved)
    line = _cli_refusal(f"ondisk:{saved}", capsys, tmp_path)
    assert line.startswith("launch.py: error: argument --dataset:"), line
    assert str(saved / named) in line, line


@pytest.mark.parametrize("umask, want", [(0o022, 0o755), (0o077, 0o700), (0o002, 0o775)])
def test_save_dataset_honours_the_umask(small, tmp_path, umask, want):
    old = os.umask(umask)
    try:
        d = save_dataset(small, tmp_path / f"ds{umask:o}")
    finally:
        os.umask(old)
    assert d.stat().st_mode & 0o777 == want
    assert (d / "features.npy").stat().st_mode & 0o777 == want & 0o666
