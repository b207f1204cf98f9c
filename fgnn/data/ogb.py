"""OGB node-property datasets from their raw directory (no ``ogb`` package needed).

Layout (as unpacked from the OGB download, e.g. ``ogbn_products/``)::

    DIR/raw/edge.csv.gz              one "src,dst" pair per line
    DIR/raw/node-feat.csv.gz         one comma-separated float row per node
    DIR/raw/node-label.csv.gz        one class id per line ("nan" = unlabelled, papers100M)
    DIR/raw/num-node-list.csv.gz     optional: the node count N
    DIR/split/<type>/train.csv.gz    node ids, one per line (likewise valid.csv.gz, test.csv.gz)

``<type>`` is whichever single subdirectory ``split/`` holds (``sales_ranking``, ``time``, ...).
Uncompressed ``.csv`` files are accepted too. Edges are symmetrised by default, as for
ogbn-products / ogbn-arxiv in the usual GNN pipelines, and always deduplicated.
"""

from __future__ import annotations

import gzip
import os
import warnings
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from fgnn.data.dataset import Dataset, check_finite_features
from fgnn.data.paths import inside_root
from fgnn.graph import CSRGraph

__all__ = ["load_ogb", "read_csv_matrix"]


def _find(root: Path, path: Path, required: bool = True) -> Optional[Path]:
    """``path`` (``*.csv.gz``) or its uncompressed ``*.csv`` twin, inside ``root``."""
    if inside_root(root, path, "OGB file").is_file():
        return path
    plain = path.with_suffix("")                                  # strip ".gz"
    if inside_root(root, plain, "OGB file").is_file():
        return plain
    if required:
        raise ValueError(f"OGB file {path} is missing")
    return None


def read_csv_matrix(path: str | os.PathLike, dtype: np.dtype, *,
                    ncols: Optional[int] = None) -> np.ndarray:
    """Read a headerless comma-separated numeric file (optionally gzip-compressed).

    Args:
        path: ``*.csv`` or ``*.csv.gz`` file.
        dtype: target dtype: an integer dtype parses as int64, a float dtype directly.
        ncols: expected number of columns; inferred from the first line when ``None``.

    Returns:
        A ``(rows, cols)`` array.

    Raises:
        ValueError: naming the file when it cannot be read, a value does not parse, or rows
            have different lengths.
    """
    path = Path(path)
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rb") as f:
            data = f.read()
    except OSError as exc:  # gzip's text quotes the first bytes: not echoed
        why = exc.strerror or ("not a gzip file" if isinstance(exc, gzip.BadGzipFile)
                               else type(exc).__name__)
        raise ValueError(f"OGB file {path} cannot be read: {why}") from None
    except EOFError:
        raise ValueError(f"OGB file {path} cannot be read: it is truncated") from None
    lines = data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)
    first = data.split(b"\n", 1)[0].strip()
    cols = first.count(b",") + 1 if first else 0
    if ncols is not None and cols not in (0, ncols):
        raise ValueError(f"OGB file {path} has {cols} columns, expected {ncols}")
    if not data.strip():
        return np.zeros((0, ncols or 0), dtype=dtype)
    # Parse straight into the target float width (no float64 copy of a large feature file).
    parse_dtype = np.int64 if np.issubdtype(dtype, np.integer) else np.dtype(dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")                            # partial parse -> exception
        try:
            flat = np.fromstring(data.replace(b",", b" "), dtype=parse_dtype, sep=" ")
        except (ValueError, DeprecationWarning) as exc:
            raise ValueError(f"OGB file {path} holds a value that is not "
                             f"{np.dtype(parse_dtype).name}: {exc}") from exc
    if flat.size != lines * cols or data.count(b",") != lines * (cols - 1):
        raise ValueError(f"OGB file {path} is malformed: {flat.size} values on {lines} lines "
                         f"do not form rows of {cols} columns")
    return flat.reshape(lines, cols).astype(dtype, copy=False)


def _ids(path: Path, n: int, what: str) -> np.ndarray:
    arr = read_csv_matrix(path, np.int64, ncols=1).reshape(-1)
    if arr.size and (arr.min() < 0 or arr.max() >= n):
        bad = int(arr.min()) if arr.min() < 0 else int(arr.max())
        raise ValueError(f"OGB file {path} holds {what} {bad}, outside [0, {n})")
    return arr



def _split_paths(root: Path, split_type: Optional[str]) -> tuple[str, dict[str, Path]]:
    """``(split_type, {"train"|"valid"|"test": path})`` under ``root/split``; ``None`` takes
    the only subdirectory present."""
    split_root = root / "split"
    if split_type is None:
        types = sorted(p.name for p in split_root.iterdir() if p.is_dir()) \
            if split_root.is_dir() else []
        if len(types) != 1:
            raise ValueError(f"OGB directory {split_root} must hold exactly one split "
                             f"subdirectory (or pass split_type), found {types}")
        split_type = types[0]
    split_dir = split_root / split_type
    if not split_dir.is_dir():
        raise ValueError(f"OGB split directory {split_dir} is missing (split_type="
                         f"{split_type!r})")
    return split_type, {s: _find(root, split_dir / f"{s}.csv.gz")
                        for s in ("train", "valid", "test")}


def _features(feat_p: Path, nn_p: Optional[Path]) -> np.ndarray:
    """The ``(N, F)`` float32 features, checked finite and against ``num-node-list``."""
    feats = read_csv_matrix(feat_p, np.float32)
    n = feats.shape[0]
    if nn_p is not None:
        nn = read_csv_matrix(nn_p, np.int64, ncols=1).reshape(-1)
        if nn.size != 1 or nn[0] < 0:
            raise ValueError(f"OGB file {nn_p} must hold one non-negative node count, got "
                             f"{nn.tolist()}")
        if int(nn[0]) != n:
            raise ValueError(f"OGB file {feat_p} has {n} rows but {nn_p} says num_nodes="
                             f"{int(nn[0])}")
    check_finite_features(feats, f"OGB file {feat_p}")
    return feats


def _labels(label_p: Path, n: int, feat_p: Path) -> tuple[np.ndarray, np.ndarray]:
    """``(labels, unlabelled)``: int64 class ids (0 where unlabelled) and the ``nan`` mask."""
    lab = read_csv_matrix(label_p, np.float64)
    if lab.ndim != 2 or lab.shape[1] != 1:
        raise ValueError(f"OGB file {label_p} must hold one class id per line (single-label "
                         f"node classification), got {lab.shape[1]} columns")
    lab = lab.reshape(-1)
    if lab.size != n:
        raise ValueError(f"OGB file {label_p} has {lab.size} rows but {feat_p} has {n}")
    unlabelled = np.isnan(lab)
    known = lab[~unlabelled]
    if known.size and (known.min() < 0 or np.any(known != np.floor(known))):
        bad = known[(known < 0) | (known != np.floor(known))][0]
        raise ValueError(f"OGB file {label_p} holds label {bad}, not a class id >= 0")
    return np.where(unlabelled, 0, lab).astype(np.int64), unlabelled


def _graph(edge_p: Path, n: int, symmetrize: bool) -> CSRGraph:
    """The deduplicated CSR graph of ``edge.csv.gz``, int32 indices when they fit."""
    edges = read_csv_matrix(edge_p, np.int64, ncols=2)
    if edges.size and (edges.min() < 0 or edges.max() >= n):
        bad = int(edges.min()) if edges.min() < 0 else int(edges.max())
        raise ValueError(f"OGB file {edge_p} holds node id {bad}, outside [0, {n})")
    try:
        return CSRGraph.from_edge_index(edges.T, num_nodes=n, symmetrize=symmetrize,
                                        dedup=True,
                                        index_dtype=torch.int32 if n < 2 ** 31 else torch.int64)
    except ValueError as exc:
        raise ValueError(f"OGB file {edge_p}: {exc}") from exc


def _split_ids(path: Path, n: int, unlabelled: np.ndarray, label_p: Path) -> torch.Tensor:
    """One split's node ids, none of them unlabelled."""
    ids = _ids(path, n, "node id")
    if ids.size and unlabelled[ids].any():
        bad = int(ids[unlabelled[ids]][0])
        raise ValueError(f"OGB file {path} holds node {bad}, whose label in {label_p} is nan")
    return torch.from_numpy(ids)

def load_ogb(root: str | os.PathLike, *, symmetrize: bool = True,
             split_type: Optional[str] = None, name: Optional[str] = None) -> Dataset:
    """Load an OGB node-property dataset from its raw directory.

    Args:
        root: the dataset directory holding ``raw/`` and ``split/``.
        symmetrize: add the reverse of every edge (then deduplicate).
        split_type: subdirectory of ``split/``; ``None`` takes the only one present.
        name: dataset name, default the directory name.

    Returns:
        A :class:`~fgnn.data.Dataset` with float32 features and int64 labels; unlabelled nodes
        (``nan`` labels) get class 0 and must not appear in any split.

    Raises:
        ValueError: naming the file on a missing or malformed file, an out-of-range node id,
            a row-count mismatch, NaN features or an unlabelled node inside a split.
    """
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"OGB directory {str(root)!r} does not exist")
    raw = root / "raw"
    edge_p = _find(root, raw / "edge.csv.gz")
    feat_p = _find(root, raw / "node-feat.csv.gz")
    label_p = _find(root, raw / "node-label.csv.gz")
    nn_p = _find(root, raw / "num-node-list.csv.gz", required=False)

    split_type, split_ps = _split_paths(root, split_type)
    feats = _features(feat_p, nn_p)
    n = feats.shape[0]
    labels, unlabelled = _labels(label_p, n, feat_p)
    num_classes = int(labels.max()) + 1 if n else 1
    graph = _graph(edge_p, n, symmetrize)
    splits = {s: _split_ids(p, n, unlabelled, label_p) for s, p in split_ps.items()}
    return Dataset(
        name=name or root.name,
        graph=graph,
        features=torch.from_numpy(feats),
        labels=torch.from_numpy(labels),
        train_idx=splits["train"],
        val_idx=splits["valid"],
        test_idx=splits["test"],
        num_classes=num_classes,
        meta={"source": "ogb", "root": str(root), "split_type": split_type,
              "symmetrize": bool(symmetrize), "unlabelled": int(unlabelled.sum())},
    )
