"""The on-disk format for heterogeneous graphs: ``.npy`` files per node type and per relation.

Layout (ids are local to each node type, as in :class:`~fgnn.graph.hetero.HeteroGraph`)::

    DIR/manifest.json  {"format": "fgnn-ondisk-hetero", "version": 1, "name": str,
                        "node_types": [{"name": "user", "num_nodes": 3, "features": null},
                                       {"name": "item", "num_nodes": 4,
                                        "features": "node1.features.npy", "feat_dim": 8,
                                        "feat_dtype": "float32" | "float16"}],
                        "edge_types": [{"src": "user", "rel": "rates", "dst": "item",
                                        "num_edges": 6, "indptr": "edge0.indptr.npy",
                                        "indices": "edge0.indices.npy",
                                        "weights": "edge0.weights.npy" | null}],
                        "target": null | {"type": "item", "num_classes": 2,
                                          "labels": "labels.npy",
                                          "train_idx": "train_idx.npy" | null,
                                          "val_idx": ... | null, "test_idx": ... | null}}
    node<i>.features.npy  (num_nodes, feat_dim) of feat_dtype, C order; only for a type with
                          features (``"features": null``: learned embeddings)
    edge<j>.indptr.npy    (num_nodes[dst] + 1,) int64: row v = destination node v of type dst
    edge<j>.indices.npy   (num_edges,) int32 | int64 source ids of type src, sorted within a row
    edge<j>.weights.npy   (num_edges,) float32, only for a weighted relation
    labels.npy            (num_nodes[target type],) int64 class ids in [0, num_classes)
    *_idx.npy             ids (int) or an (num_nodes[target type],) bool mask of the target type

Node types and relations keep their list order. :func:`save_ondisk_hetero` writes a directory
atomically (as :func:`~fgnn.data.ondisk.save_dataset` does), :func:`load_ondisk_hetero` reads one
into a :class:`~fgnn.graph.hetero.HeteroGraph` with the same checks as ``ondisk:`` (each error
one line naming the file, the manifest field and the value; NaN/±inf features refused; a symlink
leaving ``DIR`` refused before it is opened). Feature files are memory-mapped copy-on-write, so
they are read on demand and the files are never written.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Optional

import numpy as np
import torch

from fgnn.data.dataset import split_ids
from fgnn.data.ondisk import (FEAT_DTYPES, FORMAT, HETERO_FORMAT, VERSION, _check_npy, _np,
                              _save_npy, _scan_features, check_rows_sorted, read_manifest,
                              write_dir_atomically, write_features_npy_chunked, write_manifest)
from fgnn.graph import CSRGraph

if TYPE_CHECKING:  # a type only: fgnn.graph.hetero is not needed at run time
    from fgnn.graph.hetero import HeteroGraph

__all__ = ["save_ondisk_hetero", "load_ondisk_hetero", "SPLIT_KEYS"]

SPLIT_KEYS = ("train_idx", "val_idx", "test_idx")
_INTS = ("int32", "int64")


# ---------------------------------------------------------------------------- writing
def _sorted_rows(indptr: torch.Tensor, indices: torch.Tensor, weights: Optional[torch.Tensor]
                 ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """``indices`` (and ``weights``) with each row sorted (the loader requires it)."""
    if indices.numel() < 2:
        return indices, weights
    rows = torch.repeat_interleave(torch.arange(indptr.numel() - 1), indptr.diff())
    key = rows * (int(indices.max()) + 1) + indices.long()
    if bool((key[1:] >= key[:-1]).all()):
        return indices, weights
    order = torch.argsort(key, stable=True)
    return indices[order], None if weights is None else weights[order]


def _target_section(graph: "HeteroGraph", tmp: Path, num_classes: Optional[int],
                    splits: Optional[Mapping[str, Any]]) -> Optional[dict]:
    if graph.labels is None:
        if splits:
            raise ValueError("save_ondisk_hetero: splits need labels (graph.labels is None)")
        return None
    n, y = graph.num_nodes[graph.target_type], graph.labels  # type: ignore[index]
    k = int(y.max()) + 1 if num_classes is None and y.numel() else int(num_classes or 0)
    if y.numel() and int(y.max()) >= k:
        raise ValueError(f"save_ondisk_hetero: labels hold class {int(y.max())}, outside "
                         f"num_classes={k}")
    _save_npy(tmp / "labels.npy", _np(y).astype(np.int64, copy=False))
    out: dict[str, Any] = {"type": graph.target_type, "num_classes": k, "labels": "labels.npy"}
    for key in SPLIT_KEYS:
        split = (splits or {}).get(key)
        if split is None:
            out[key] = None
            continue
        ids = split_ids(split, n, what=f"save_ondisk_hetero: {key}")
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= n):
            bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
            raise ValueError(f"save_ondisk_hetero: {key} holds id {bad}, outside "
                             f"num_nodes[{graph.target_type!r}]={n}")
        _save_npy(tmp / f"{key}.npy", _np(ids).astype(np.int64, copy=False))
        out[key] = f"{key}.npy"
    unknown = set(splits or {}) - set(SPLIT_KEYS)
    if unknown:
        raise ValueError(f"save_ondisk_hetero: unknown split {sorted(unknown)[0]!r} (splits: "
                         f"{', '.join(SPLIT_KEYS)})")
    return out


def save_ondisk_hetero(graph: "HeteroGraph", directory: str | os.PathLike, *,
                       name: Optional[str] = None, num_classes: Optional[int] = None,
                       splits: Optional[Mapping[str, Any]] = None, overwrite: bool = False,
                       feat_dtype: Optional[str] = None) -> Path:
    """Write ``graph`` atomically in the heterogeneous on-disk format (module docstring).

    Args:
        graph: the typed graph; features and labels as it holds them.
        directory: destination (created; must not exist unless ``overwrite``).
        name: dataset name (default ``graph.meta["name"]`` or ``"hetero"``).
        num_classes: classes of the labels (default the largest label + 1).
        splits: ``train_idx`` / ``val_idx`` / ``test_idx`` -> ids or ``(N_target,)`` bool mask
            of the target type (default ``graph.meta["splits"]``, what the loader puts there).
        overwrite: replace an existing directory.
        feat_dtype: ``"float32"`` or ``"float16"`` for every feature file (default each type's
            own dtype).

    Returns:
        The destination path.

    Raises:
        ValueError: one line naming the type, split or value: an existing destination, a
            feature dtype other than float32/float16, a non-finite feature, splits without
            labels, labels outside ``num_classes`` or a split id outside the target type.
    """
    if splits is None:
        splits = graph.meta.get("splits")
    title = name if name is not None else str(graph.meta.get("name", "hetero"))

    def fill(tmp: Path) -> None:
        ntypes = _write_node_types(graph, tmp, feat_dtype)
        etypes = _write_edge_types(graph, tmp)
        write_manifest(tmp, {"format": HETERO_FORMAT, "version": VERSION, "name": title,
                             "node_types": ntypes, "edge_types": etypes,
                             "target": _target_section(graph, tmp, num_classes, splits)})

    return write_dir_atomically(directory, fill, overwrite=overwrite)


def _write_node_types(graph: "HeteroGraph", tmp: Path, feat_dtype: Optional[str]
                      ) -> list[dict[str, Any]]:
    """Write each node type's feature file into ``tmp``; its manifest entries, in order."""
    ntypes = []
    for i, t in enumerate(graph.node_types):
        entry: dict[str, Any] = {"name": t, "num_nodes": graph.num_nodes[t], "features": None}
        x = graph.features.get(t)
        if x is not None:
            fname = f"node{i}.features.npy"
            try:
                write_features_npy_chunked(tmp / fname, x, dtype=feat_dtype)
            except ValueError as exc:
                raise ValueError(f"save_ondisk_hetero: node type {t!r} {exc}") from None
            entry.update(features=fname, feat_dim=int(x.shape[1]),
                         feat_dtype=feat_dtype or str(x.dtype).replace("torch.", ""))
        ntypes.append(entry)
    return ntypes


def _write_edge_types(graph: "HeteroGraph", tmp: Path) -> list[dict[str, Any]]:
    """Write each relation's CSR files (rows sorted) into ``tmp``; its manifest entries, in
    order."""
    etypes = []
    for j, et in enumerate(graph.edge_types):
        csr = graph.relations[et]
        indptr = csr.indptr[:graph.num_nodes[et[2]] + 1].long()
        indices, weights = _sorted_rows(indptr, csr.indices, csr.weights)
        entry = {"src": et[0], "rel": et[1], "dst": et[2], "num_edges": csr.num_edges,
                 "indptr": f"edge{j}.indptr.npy", "indices": f"edge{j}.indices.npy",
                 "weights": None if weights is None else f"edge{j}.weights.npy"}
        _save_npy(tmp / entry["indptr"], _np(indptr))
        _save_npy(tmp / entry["indices"], _np(indices))
        if weights is not None:
            _save_npy(tmp / entry["weights"], _np(weights).astype(np.float32, copy=False))
        etypes.append(entry)
    return etypes


# ---------------------------------------------------------------------------- reading
class _Manifest:
    """Typed field access to a manifest: each error names the manifest, the field and the
    value."""

    def __init__(self, path: Path, root: Path) -> None:
        self.path, self.root = path, root

    def get(self, obj: Any, where: str, key: str, kind: str, nullable: bool = False) -> Any:
        """``obj[key]`` of ``kind`` (``int`` >= 0, ``str`` non-empty, ``file``, ``list``,
        ``dict``); ``where`` is the dotted path of ``obj`` in the manifest."""
        full = f"{where}.{key}" if where else key
        if not isinstance(obj, dict):
            raise ValueError(f"on-disk manifest {self.path}: field {where!r} must be a JSON "
                             f"object, got {obj!r}")
        if key not in obj:
            raise ValueError(f"on-disk manifest {self.path} lacks field {full!r}")
        v = obj[key]
        if v is None and nullable:
            return None
        ok, want = {
            "int": (isinstance(v, int) and not isinstance(v, bool) and v >= 0,
                    "a non-negative int"),
            "str": (isinstance(v, str) and bool(v), "a non-empty string"),
            "file": (isinstance(v, str) and bool(v) and Path(v).name == v,
                     f"a plain file name inside {self.root}"),
            "list": (isinstance(v, list), "a list"),
            "dict": (isinstance(v, dict), "an object"),
        }[kind]
        if not ok:
            raise ValueError(f"on-disk manifest {self.path}: field {full!r} must be {want}"
                             f"{' or null' if nullable else ''}, got {v!r}")
        return v

    def fail(self, field: str, what: str) -> ValueError:
        """The error for field ``field``: ``what`` says what is wrong, with its value."""
        return ValueError(f"on-disk manifest {self.path}: field {field!r} {what}")


def _node_types(m: _Manifest, manifest: dict, check_nan: Optional[bool]
                ) -> tuple[dict[str, int], dict[str, torch.Tensor], dict[str, str]]:
    entries = m.get(manifest, "", "node_types", "list")
    if not entries:
        raise m.fail("node_types", "must list at least one node type, got []")
    num_nodes: dict[str, int] = {}
    feats, dtypes = {}, {}
    for i, e in enumerate(entries):
        where = f"node_types[{i}]"
        t = m.get(e, where, "name", "str")
        if t in num_nodes:
            raise m.fail(f"{where}.name", f"repeats node type {t!r}")
        n = num_nodes[t] = m.get(e, where, "num_nodes", "int")
        fname = m.get(e, where, "features", "file", nullable=True)
        if fname is None:
            continue
        fdim = m.get(e, where, "feat_dim", "int")
        fdtype = m.get(e, where, "feat_dtype", "str")
        if fdtype not in FEAT_DTYPES:
            raise m.fail(f"{where}.feat_dtype", f"must be one of {FEAT_DTYPES}, got {fdtype!r}")
        label = f"{where}.features"
        path = _check_npy(m.root, fname, "features", (n, fdim), (fdtype,), label)
        # copy-on-write: writable for torch, the file untouched (numpy cannot map 0 bytes)
        x = np.load(path, mmap_mode="c") if n and fdim else np.load(path)
        if check_nan is not False:
            _scan_features(x, path, label)
        feats[t], dtypes[t] = torch.from_numpy(x), fdtype
    return num_nodes, feats, dtypes


def _relation(m: _Manifest, e: Any, j: int, num_nodes: dict[str, int]
              ) -> tuple[tuple[str, str, str], CSRGraph]:
    where = f"edge_types[{j}]"
    src, rel, dst = (m.get(e, where, k, "str") for k in ("src", "rel", "dst"))
    for k, t in (("src", src), ("dst", dst)):
        if t not in num_nodes:
            raise m.fail(f"{where}.{k}", f"names node type {t!r}, which node_types lacks "
                                         f"(types: {list(num_nodes)})")
    ne = m.get(e, where, "num_edges", "int")
    ns, nd = num_nodes[src], num_nodes[dst]
    ip = _check_npy(m.root, m.get(e, where, "indptr", "file"), "indptr", (nd + 1,), ("int64",),
                    f"{where}.indptr")
    ix = _check_npy(m.root, m.get(e, where, "indices", "file"), "indices", (ne,), _INTS,
                    f"{where}.indices")
    wname = m.get(e, where, "weights", "file", nullable=True)
    wp = None if wname is None else _check_npy(m.root, wname, "weights", (ne,), ("float32",),
                                               f"{where}.weights")
    indptr, indices = torch.from_numpy(np.load(ip)), torch.from_numpy(np.load(ix))
    if ne and (int(indices.min()) < 0 or int(indices.max()) >= ns):
        bad = int(indices.min()) if int(indices.min()) < 0 else int(indices.max())
        raise ValueError(f"on-disk file {ix} ({where}.indices) holds source id {bad}, outside "
                         f"num_nodes[{src!r}]={ns}")
    size = max(ns, nd)   # the HeteroGraph CSR spans max(ns, nd) ids; rows past nd are empty
    full = torch.cat([indptr, indptr[-1:].expand(size - nd)]) if indptr.numel() else indptr
    try:
        csr = CSRGraph(full, indices, None if wp is None else torch.from_numpy(np.load(wp)))
    except ValueError as exc:
        raise ValueError(f"on-disk files {ip.name}/{ix.name} in {m.root} ({where}) form an "
                         f"inconsistent CSR graph: {exc}") from None
    check_rows_sorted(indptr, indices, ix, f"{where}.indices")
    return (src, rel, dst), csr


def _target(m: _Manifest, manifest: dict, num_nodes: dict[str, int]
            ) -> tuple[Optional[str], Optional[torch.Tensor], Optional[int], dict]:
    tgt = m.get(manifest, "", "target", "dict", nullable=True)
    if tgt is None:
        return None, None, None, {}
    t = m.get(tgt, "target", "type", "str")
    if t not in num_nodes:
        raise m.fail("target.type", f"names node type {t!r}, which node_types lacks (types: "
                                    f"{list(num_nodes)})")
    n, k = num_nodes[t], m.get(tgt, "target", "num_classes", "int")
    lp = _check_npy(m.root, m.get(tgt, "target", "labels", "file"), "labels", (n,), _INTS,
                    "target.labels")
    y = torch.from_numpy(np.load(lp).astype(np.int64, copy=False))
    if y.numel() and (int(y.min()) < 0 or int(y.max()) >= k):
        bad = int(y.min()) if int(y.min()) < 0 else int(y.max())
        raise ValueError(f"on-disk file {lp} (target.labels) holds class {bad}, outside "
                         f"[0, num_classes={k})")
    splits = {}
    for key in SPLIT_KEYS:
        fname = m.get(tgt, "target", key, "file", nullable=True)
        if fname is None:
            continue
        sp = _check_npy(m.root, fname, key, (-1,), _INTS + ("bool",), f"target.{key}")
        ids = split_ids(np.load(sp), n, what=f"on-disk file {sp} (target.{key})")
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= n):
            bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
            raise ValueError(f"on-disk file {sp} (target.{key}) holds id {bad}, outside "
                             f"num_nodes[{t!r}]={n}")
        splits[key] = ids
    return t, y, k, splits


def load_ondisk_hetero(directory: str | os.PathLike, *, check_nan: Optional[bool] = None
                       ) -> "HeteroGraph":
    """Load a heterogeneous on-disk dataset (module docstring) into a ``HeteroGraph``.

    Args:
        directory: the dataset directory holding ``manifest.json``.
        check_nan: scan every feature file for NaN and ±inf chunk by chunk (``None``/``True``),
            or skip the scan (``False``), as :func:`~fgnn.data.ondisk.load_ondisk`.

    Returns:
        The graph; features are copy-on-write memory maps of the files. ``meta`` holds
        ``name``, ``num_classes`` (``None`` without a target), ``splits`` (``train_idx`` /
        ``val_idx`` / ``test_idx`` -> int64 ids of the target type, for the files present),
        ``feat_dtype`` per type, ``source`` and ``root``.

    Raises:
        ValueError: one line naming the file and manifest field with the bad value: a
            missing file or field, a mistyped field, an unknown node type, a shape or dtype
            mismatch, a truncated file, an inconsistent or unsorted CSR, a source id outside
            its type, a label outside ``num_classes``, a split id outside the target type,
            non-finite features, or a symlink that leaves ``directory``.
    """
    from fgnn.graph.hetero import HeteroGraph

    root = Path(directory)
    mpath, manifest = read_manifest(root)
    m = _Manifest(mpath, root)
    fmt = m.get(manifest, "", "format", "str")
    if fmt == FORMAT:
        raise m.fail("format", f"is {fmt!r}, a homogeneous dataset: load it with "
                               f"fgnn.data.load_ondisk (or --dataset ondisk:{root})")
    if fmt != HETERO_FORMAT:
        raise m.fail("format", f"must be {HETERO_FORMAT!r}, got {fmt!r}")
    version = m.get(manifest, "", "version", "int")
    if version != VERSION:
        raise m.fail("version", f"must be {VERSION}, got {version!r}")
    name = m.get(manifest, "", "name", "str")
    num_nodes, feats, dtypes = _node_types(m, manifest, check_nan)
    rels = {}
    edge_types = m.get(manifest, "", "edge_types", "list")
    if not edge_types:
        raise m.fail("edge_types", "must list at least one relation, got [] (a typed graph "
                                   "without edges has no neighbourhood to sample)")
    for j, e in enumerate(edge_types):
        et, csr = _relation(m, e, j, num_nodes)
        if et in rels:
            raise m.fail(f"edge_types[{j}]", f"repeats relation {et!r}")
        rels[et] = csr
    target, labels, k, splits = _target(m, manifest, num_nodes)
    meta = {"source": "ondisk", "root": str(root), "name": name, "num_classes": k,
            "splits": splits, "feat_dtype": dtypes}
    try:
        return HeteroGraph(num_nodes, rels, feats, labels, target, meta)
    except ValueError as exc:
        raise ValueError(f"on-disk dataset {root}: {exc}") from None
