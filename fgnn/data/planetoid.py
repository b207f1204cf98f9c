"""Planetoid citation graphs (Cora, CiteSeer, PubMed) from their raw ``ind.<name>.*`` files.

The files are those of Yang, Cohen & Salakhutdinov, *Revisiting Semi-Supervised Learning with
Graph Embeddings* (ICML 2016): Python-2 pickles of scipy sparse feature matrices (``x``, ``tx``,
``allx``), one-hot label arrays (``y``, ``ty``, ``ally``), an adjacency dict (``graph``) and a text
file of test node ids (``test.index``). The split is the standard one PyG's ``Planetoid`` uses:
train = ``range(len(y))`` (20 per class), val = the next 500 nodes, test = ``test.index``.

The pickles are read by a restricted unpickler (:func:`read_planetoid_pickle`) that admits only
the numpy / scipy.sparse / builtin reconstructors these files need, so a crafted file cannot run
code: any other global it names is refused with an error naming the file.

Like PyG, CiteSeer's isolated test nodes (ids inside the test range but absent from
``test.index``) get zero feature rows and label 0 and belong to no split; self-loops are dropped
and edges are symmetrised and deduplicated (Cora: 2708 nodes, 10556 directed edges).
"""

from __future__ import annotations

import itertools
import os
import pickle
import re
import warnings
from pathlib import Path

import numpy as np
import torch

from fgnn.data.dataset import Dataset, check_finite_features
from fgnn.data.paths import inside_root
from fgnn.graph import CSRGraph

__all__ = ["load_planetoid", "read_planetoid_pickle", "PLANETOID_NAMES", "PLANETOID_FILES",
           "PICKLE_GLOBALS"]

#: Dataset names this loader knows (any ``ind.<name>.*`` set in the same format also loads).
PLANETOID_NAMES = ("cora", "citeseer", "pubmed")
#: File suffixes of one Planetoid dataset.
PLANETOID_FILES = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")


def _path(root: Path, name: str, suffix: str) -> Path:
    path = inside_root(root, root / f"ind.{name}.{suffix}", "Planetoid file")
    if not path.is_file():
        raise ValueError(f"Planetoid file {path} is missing (field {suffix!r} of {name!r}); "
                         f"point --data-root (launch.py) or data_root= (JobConfig) at the "
                         f"directory holding ind.{name}.*")
    return path


#: The only globals a Planetoid pickle may name, as ``(module, name)``: what the original
#: Python-2 files reference (numpy arrays, scipy CSR matrices, ``defaultdict(list)``), plus the
#: Python-3 spellings of the same reconstructors for files re-pickled by current numpy / scipy
#: (``numpy._core``, ``scipy.sparse._csr``, ``builtins``, and ``_codecs.encode``, which protocol 2
#: uses for byte strings). ``numpy.core.multiarray.scalar`` rebuilds a numpy scalar.
PICKLE_GLOBALS = frozenset({
    ("numpy", "ndarray"), ("numpy", "dtype"),
    ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
    ("scipy.sparse.csr", "csr_matrix"), ("scipy.sparse._csr", "csr_matrix"),
    ("collections", "defaultdict"),
    ("__builtin__", "list"), ("builtins", "list"),
    ("_codecs", "encode"),
})


class _RefusedGlobal(pickle.UnpicklingError):
    """A pickle names a global outside :data:`PICKLE_GLOBALS`."""


class _PlanetoidUnpickler(pickle.Unpickler):
    """Resolves only :data:`PICKLE_GLOBALS`; every other global (``os.system``, ``builtins.eval``,
    ...) is refused before it is imported or called."""

    def find_class(self, module: str, name: str):  # noqa: D102
        if (module, name) not in PICKLE_GLOBALS:
            raise _RefusedGlobal(f"{module}.{name}")
        return super().find_class(module, name)


def _unpickle(f) -> object:
    """Load one pickle from the binary file ``f`` with the restricted unpickler."""
    return _PlanetoidUnpickler(f, encoding="latin1").load()


def read_planetoid_pickle(path: str | os.PathLike) -> object:
    """Read one Planetoid pickle, admitting only the reconstructors of :data:`PICKLE_GLOBALS`.

    Args:
        path: an ``ind.<name>.<suffix>`` file (Python-2 pickle, read as latin-1).

    Returns:
        The unpickled object (a numpy array, a scipy CSR matrix or an adjacency dict).

    Raises:
        ValueError: naming the file when it names any other global (nothing of it is called)
            or is not a readable pickle.
    """
    path = Path(path)
    try:
        with open(path, "rb") as f, warnings.catch_warnings():
            # Old pickles name numpy.core / scipy.sparse.csr, deprecated module paths.
            warnings.simplefilter("ignore", DeprecationWarning)
            return _unpickle(f)
    except _RefusedGlobal as exc:
        named = str(exc) if re.fullmatch(r"[\w.]{1,120}", str(exc)) else "(not a Python name)"
        raise ValueError(f"Planetoid file {path} is refused: it names the global {named}, which "
                         f"is not a numpy / scipy.sparse / builtin reconstructor of Planetoid "
                         f"data (a crafted or foreign pickle; nothing in it was run)") from None
    except OSError as exc:
        raise ValueError(f"Planetoid file {path} cannot be read "
                         f"({exc.strerror or type(exc).__name__})") from None
    except Exception as exc:  # a malformed file; the unpickler's text may quote its bytes
        raise ValueError(f"Planetoid file {path} is not a readable pickle "
                         f"({type(exc).__name__})") from None


def _read_matrix(path: Path, *, sparse: bool) -> np.ndarray:
    import scipy.sparse as sp                                    # lazy: keeps `import fgnn` light

    obj = read_planetoid_pickle(path)
    if sp.issparse(obj):
        arr = obj.toarray()
    elif isinstance(obj, np.ndarray):
        arr = obj
    else:
        kind = "a scipy sparse matrix" if sparse else "a numpy array"
        raise ValueError(f"Planetoid file {path} must hold {kind}, got {type(obj).__name__}")
    if arr.ndim != 2:
        raise ValueError(f"Planetoid file {path} must hold a 2-D matrix, got shape {arr.shape}")
    if not np.issubdtype(arr.dtype, np.number) and arr.dtype != bool:
        raise ValueError(f"Planetoid file {path} holds non-numeric dtype {arr.dtype}")
    return arr


def _read_test_index(path: Path) -> np.ndarray:
    try:
        words = path.read_bytes().split()
    except OSError as exc:
        raise ValueError(f"Planetoid file {path} cannot be read "
                         f"({exc.strerror or type(exc).__name__})") from None
    bad = next((i for i, w in enumerate(words) if not w.lstrip(b"-").isdigit()), None)
    if bad is not None:  # say where, not what: the text is the file's
        raise ValueError(f"Planetoid file {path} must hold one integer node id per line; "
                         f"entry {bad + 1} is not one")
    idx = np.array([int(w) for w in words], dtype=np.int64)
    if idx.size == 0:
        raise ValueError(f"Planetoid file {path} holds no test node ids")
    if len(np.unique(idx)) != idx.size:
        raise ValueError(f"Planetoid file {path} repeats a test node id")
    return idx


def _read_graph(path: Path, num_nodes: int) -> np.ndarray:
    """Adjacency dict -> ``(2, E)`` int64 pairs ``[key, neighbour]``."""
    graph = read_planetoid_pickle(path)
    if not isinstance(graph, dict):
        raise ValueError(f"Planetoid file {path} must hold a dict of adjacency lists, got "
                         f"{type(graph).__name__}")
    try:
        keys = np.fromiter(graph.keys(), dtype=np.int64, count=len(graph))
        lengths = np.fromiter(map(len, graph.values()), dtype=np.int64, count=len(graph))
        nbrs = np.fromiter(itertools.chain.from_iterable(graph.values()), dtype=np.int64,
                           count=int(lengths.sum()))
    except (TypeError, ValueError, OverflowError) as exc:
        raise ValueError(f"Planetoid file {path} must map integer node ids to lists of integer "
                         f"node ids: {exc}") from exc
    rows = np.repeat(keys, lengths)
    for what, arr in (("node id", rows), ("neighbour id", nbrs)):
        if arr.size and (arr.min() < 0 or arr.max() >= num_nodes):
            bad = int(arr.min()) if arr.min() < 0 else int(arr.max())
            raise ValueError(f"Planetoid file {path} holds {what} {bad}, outside "
                             f"[0, {num_nodes})")
    return np.stack([rows, nbrs])


def load_planetoid(name: str, root: str | os.PathLike, *,
                   normalize_features: bool = True) -> Dataset:
    """Load a Planetoid dataset from ``root/ind.<name>.*`` with the standard split.

    Args:
        name: ``"cora"``, ``"citeseer"`` or ``"pubmed"`` (case-insensitive; any name whose files
            follow the format loads).
        root: directory holding the raw ``ind.<name>.*`` files.
        normalize_features: row-normalise features to sum 1 (PyG's ``NormalizeFeatures``, the
            usual GCN preprocessing; all-zero rows stay zero). ``False`` keeps the raw values
            (binary bag of words for Cora/CiteSeer, TF-IDF for PubMed).

    Returns:
        A :class:`~fgnn.data.Dataset`: float32 features ``(N, F)``, int64 labels ``(N,)``,
        a symmetric deduplicated graph without self-loops, and train/val/test ids.

    Raises:
        ValueError: naming the file when one is missing or malformed, when row counts disagree,
            or when a node id is out of range or a feature is NaN.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"Planetoid name must be a non-empty string, got {name!r}")
    name = name.lower()
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"Planetoid root {str(root)!r} is not a directory")
    paths = {s: _path(root, name, s) for s in PLANETOID_FILES}
    x, tx, allx = (_read_matrix(paths[s], sparse=True) for s in ("x", "tx", "allx"))
    y, ty, ally = (_read_matrix(paths[s], sparse=False) for s in ("y", "ty", "ally"))
    test_index = _read_test_index(paths["test.index"])

    _check_shapes(paths, x, tx, allx, y, ty, ally, test_index)
    num_train = y.shape[0]
    tx, ty, sorted_test = _pad_isolated_tests(paths, tx, ty, allx.shape[0], test_index)
    feats = np.concatenate([allx, tx]).astype(np.float32)
    n = feats.shape[0]
    check_finite_features(feats, f"Planetoid features of {name!r} (files "
                                 f"{paths['allx'].name}/{paths['tx'].name})")
    labels = np.concatenate([ally, ty]).argmax(axis=1).astype(np.int64)
    # Test rows are stored in sorted-id order; move them to their listed ids (as PyG does).
    feats[test_index] = feats[sorted_test]
    labels[test_index] = labels[sorted_test]
    if normalize_features:
        sums = feats.sum(axis=1, keepdims=True)
        np.divide(feats, sums, out=feats, where=sums != 0)
    graph = _graph(paths["graph"], n)
    return Dataset(
        name=name,
        graph=graph,
        features=torch.from_numpy(feats),
        labels=torch.from_numpy(labels),
        train_idx=torch.arange(num_train, dtype=torch.int64),
        val_idx=torch.arange(num_train, num_train + 500, dtype=torch.int64),
        test_idx=torch.from_numpy(test_index),
        num_classes=int(y.shape[1]),
        meta={"source": "planetoid", "root": str(root),
              "normalize_features": bool(normalize_features)},
    )


def _check_shapes(paths: dict[str, Path], x: np.ndarray, tx: np.ndarray, allx: np.ndarray,
                  y: np.ndarray, ty: np.ndarray, ally: np.ndarray,
                  test_index: np.ndarray) -> None:
    """The files' row, feature and class counts agree with one another."""
    for f_name, f, l_name, lab in (("x", x, "y", y), ("tx", tx, "ty", ty),
                                   ("allx", allx, "ally", ally)):
        if f.shape[0] != lab.shape[0]:
            raise ValueError(f"Planetoid file {paths[f_name]} has {f.shape[0]} rows but "
                             f"{paths[l_name]} has {lab.shape[0]}")
    for s, m in (("tx", tx), ("allx", allx)):
        if m.shape[1] != x.shape[1]:
            raise ValueError(f"Planetoid file {paths[s]} has {m.shape[1]} feature columns, "
                             f"{paths['x']} has {x.shape[1]}")
    for s, m in (("ty", ty), ("ally", ally)):
        if m.shape[1] != y.shape[1]:
            raise ValueError(f"Planetoid file {paths[s]} has {m.shape[1]} classes, "
                             f"{paths['y']} has {y.shape[1]}")
    if tx.shape[0] != test_index.size:
        raise ValueError(f"Planetoid file {paths['test.index']} lists {test_index.size} test "
                         f"nodes but {paths['tx']} has {tx.shape[0]} rows")
    num_train = y.shape[0]
    if num_train + 500 > allx.shape[0]:
        raise ValueError(f"Planetoid file {paths['allx']} has {allx.shape[0]} rows, fewer than "
                         f"len(y) + 500 = {num_train + 500} (train + validation nodes)")


def _pad_isolated_tests(paths: dict[str, Path], tx: np.ndarray, ty: np.ndarray, num_all: int,
                        test_index: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(tx, ty, sorted test ids)``, ``tx``/``ty`` padded with zero rows to the whole test id
    range (CiteSeer's isolated test nodes), which must start at ``num_all = len(allx)``."""
    sorted_test = np.sort(test_index)
    lo, hi = int(sorted_test[0]), int(sorted_test[-1])
    if lo != num_all:
        raise ValueError(f"Planetoid file {paths['test.index']}: the smallest test node id is "
                         f"{lo}, expected len(allx) = {num_all}")
    if hi - lo + 1 > tx.shape[0]:
        tx_ext = np.zeros((hi - lo + 1, tx.shape[1]), dtype=tx.dtype)
        tx_ext[sorted_test - lo] = tx
        ty_ext = np.zeros((hi - lo + 1, ty.shape[1]), dtype=ty.dtype)
        ty_ext[sorted_test - lo] = ty
        tx, ty = tx_ext, ty_ext
    return tx, ty, sorted_test


def _graph(path: Path, n: int) -> CSRGraph:
    """The symmetric, deduplicated graph of ``ind.<name>.graph`` without self-loops."""
    edges = _read_graph(path, n)
    edges = edges[:, edges[0] != edges[1]]                       # drop self-loops, as PyG
    try:
        return CSRGraph.from_edge_index(edges, num_nodes=n, symmetrize=True, dedup=True)
    except ValueError as exc:
        raise ValueError(f"Planetoid file {path}: {exc}") from exc
