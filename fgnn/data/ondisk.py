"""The fgnn on-disk dataset format: a directory of ``.npy`` files plus ``manifest.json``.

Layout (the disk tier relies on exactly these fields)::

    DIR/manifest.json   {"format": "fgnn-ondisk", "version": 1, "name": str,
                         "num_nodes": int, "num_edges": int, "feat_dim": int,
                         "feat_dtype": "float32" | "float16", "num_classes": int,
                         "files": {"indptr": "indptr.npy", "indices": "indices.npy",
                                   "weights": "weights.npy" | null, "features": "features.npy",
                                   "labels": "labels.npy", "train_idx": "train_idx.npy",
                                   "val_idx": "val_idx.npy", "test_idx": "test_idx.npy"}}
    DIR/features.npy    standard C-order 2-D .npy, (num_nodes, feat_dim) of feat_dtype
    DIR/indptr.npy      (num_nodes + 1,) int64;  indices.npy (num_edges,) int32 | int64
    DIR/weights.npy     (num_edges,) float32, only when the graph is weighted
    DIR/labels.npy, DIR/{train,val,test}_idx.npy    int64 (a split may also be an (N,) bool mask)

:func:`save_dataset` writes into a temporary sibling directory, fsyncs every file and then
renames it into place, so a reader never sees a half-written dataset. Features are streamed in
chunks, so a memory-mapped source larger than RAM can be re-saved. :func:`load_ondisk` loads the
topology, labels and splits and memory-maps the features (``np.load(..., mmap_mode="r")``).
A heterogeneous graph has its own manifest format, ``fgnn-ondisk-hetero``
(:mod:`fgnn.data.ondisk_hetero`), built from the same helpers; :func:`load_ondisk` refuses it
and names :func:`~fgnn.data.ondisk_hetero.load_ondisk_hetero`.
"""

from __future__ import annotations

import json
import mmap
import os
import shutil
import tempfile
import tokenize
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import torch

from fgnn.data.dataset import Dataset, Features, check_finite_features, first_non_finite
from fgnn.data.paths import inside_root
from fgnn.graph import CSRGraph, TopologyFiles

__all__ = ["save_dataset", "load_ondisk", "fsync_path", "write_features_npy_chunked", "read_npy_header",
           "FORMAT", "VERSION", "MANIFEST"]

FORMAT = "fgnn-ondisk"
#: ``format`` of a heterogeneous graph's manifest (:mod:`fgnn.data.ondisk_hetero`).
HETERO_FORMAT = "fgnn-ondisk-hetero"
VERSION = 1
MANIFEST = "manifest.json"
FEAT_DTYPES = ("float32", "float16")
FILE_KEYS = ("indptr", "indices", "weights", "features", "labels", "train_idx", "val_idx",
             "test_idx")
#: Feature files larger than this are dropped from the page cache after the load-time scan.
NAN_CHECK_LIMIT_BYTES = 1 << 30
_CHUNK_BYTES = 64 << 20


def _np(x: Features) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    return np.asarray(x) if not isinstance(x, np.ndarray) else x


def fsync_path(path: Path) -> None:
    """fsync a file or directory by path."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _save_npy(path: Path, arr: np.ndarray) -> None:
    with open(path, "wb") as f:
        np.save(f, np.ascontiguousarray(arr), allow_pickle=False)
        f.flush()
        os.fsync(f.fileno())


def write_features_npy_chunked(path: str | os.PathLike, source: Features, *,
                               dtype: Optional[str] = None,
                               chunk_bytes: int = _CHUNK_BYTES) -> None:
    """Stream a ``(N, F)`` feature matrix into a standard ``.npy`` file, chunk by chunk.

    The source (tensor, array or read-only memmap) is never copied whole, so features larger
    than RAM can be written; each chunk is checked for NaN/±inf. The file is fsynced.

    Args:
        path: destination ``.npy`` file.
        source: ``(N, F)`` features.
        dtype: ``"float32"`` or ``"float16"``; default the source's dtype.
        chunk_bytes: bytes of source rows per chunk.

    Raises:
        ValueError: on a non-2-D source, an unsupported dtype or a non-finite feature.
    """
    src = source
    if src.ndim != 2:
        raise ValueError(f"features must be 2-D (N, F), got shape {tuple(src.shape)}")
    src_dtype = str(src.dtype).replace("torch.", "")
    dtype = dtype or src_dtype
    if dtype not in FEAT_DTYPES:
        raise ValueError(f"feat_dtype must be one of {FEAT_DTYPES}, got {dtype!r} "
                         f"(features dtype {src_dtype})")
    n, f = int(src.shape[0]), int(src.shape[1])
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.dtype(dtype), shape=(n, f))
    rows = max(1, chunk_bytes // max(1, f * np.dtype(dtype).itemsize))
    for lo in range(0, n, rows):
        block = _np(src[lo:lo + rows])
        hit = first_non_finite(block)
        if hit is not None:
            shown = "NaN" if hit[2] != hit[2] else f"{hit[2]:g}"
            raise ValueError(f"features: non-finite value {shown} at row {lo + hit[0]}, column "
                             f"{hit[1]}; not writing {path}")
        out[lo:lo + rows] = block
    out.flush()
    del out
    fsync_path(Path(path))


def save_dataset(dataset: Dataset, directory: str | os.PathLike, *,
                 overwrite: bool = False, feat_dtype: Optional[str] = None) -> Path:
    """Write ``dataset`` atomically in the fgnn on-disk format.

    Args:
        dataset: the dataset; features may be a tensor or a (memory-mapped) array.
        directory: destination directory (created; must not exist unless ``overwrite``).
        overwrite: replace an existing directory (the old one is removed after the rename).
        feat_dtype: ``"float32"`` or ``"float16"``; default the features' own dtype.

    Returns:
        The destination path.

    Raises:
        ValueError: if the destination exists without ``overwrite`` or the features' dtype is
            not float32/float16.
    """
    def fill(tmp: Path) -> None:
        g = dataset.graph
        files: dict[str, Optional[str]] = {k: f"{k}.npy" for k in FILE_KEYS}
        write_features_npy_chunked(tmp / "features.npy", dataset.features, dtype=feat_dtype)
        _save_npy(tmp / "indptr.npy", _np(g.indptr).astype(np.int64, copy=False))
        _save_npy(tmp / "indices.npy", _np(g.indices))
        if g.weights is not None:
            _save_npy(tmp / "weights.npy", _np(g.weights).astype(np.float32, copy=False))
        else:
            files["weights"] = None
        _save_npy(tmp / "labels.npy", _np(dataset.labels).astype(np.int64, copy=False))
        for k in ("train_idx", "val_idx", "test_idx"):
            _save_npy(tmp / f"{k}.npy", _np(getattr(dataset, k)).astype(np.int64, copy=False))
        manifest = {
            "format": FORMAT, "version": VERSION, "name": dataset.name,
            "num_nodes": g.num_nodes, "num_edges": g.num_edges, "feat_dim": dataset.feat_dim,
            "feat_dtype": feat_dtype or str(dataset.features.dtype).replace("torch.", ""),
            "num_classes": int(dataset.num_classes), "files": files,
        }
        write_manifest(tmp, manifest)

    return write_dir_atomically(directory, fill, overwrite=overwrite)


def write_manifest(directory: Path, manifest: dict) -> None:
    """Write ``directory/manifest.json`` and fsync it."""
    with open(directory / MANIFEST, "w") as f:
        json.dump(manifest, f, indent=2)
        f.flush()
        os.fsync(f.fileno())


def write_dir_atomically(directory: str | os.PathLike, fill: Callable[[Path], None], *,
                         overwrite: bool = False) -> Path:
    """Have ``fill(tmp)`` write a dataset into a temporary sibling directory, fsync it and
    rename it onto ``directory`` (a reader sees the old directory or the whole new one).

    Raises:
        ValueError: if ``directory`` exists without ``overwrite``; whatever ``fill`` raises
            (nothing is left behind then).
    """
    dest = Path(directory)
    if dest.exists() and not overwrite:
        raise ValueError(f"on-disk dataset directory {dest} already exists (pass overwrite=True)")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=dest.parent))
    try:
        os.chmod(tmp, 0o777 & ~current_umask())  # mkdtemp's 0700, as os.mkdir would have it
        fill(tmp)
        fsync_path(tmp)
        old = None
        if dest.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{dest.name}.old-", dir=dest.parent))
            os.replace(dest, old / dest.name)
        os.replace(tmp, dest)
        fsync_path(dest.parent)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest


def current_umask() -> int:
    """The process's umask, read without changing it where Linux says it (``/proc``); else
    set and restored at once."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# ---------------------------------------------------------------------------- loading
def read_npy_header(path: str | os.PathLike) -> tuple[tuple[int, ...], np.dtype, bool, int]:
    """Read a ``.npy`` header without loading data.

    Returns:
        ``(shape, dtype, fortran_order, data_offset)``.

    Raises:
        ValueError: naming the file if it is not a readable ``.npy``.
    """
    path = Path(path)
    why = None
    try:
        with open(path, "rb") as f:
            if f.read(6) != b"\x93NUMPY":
                why = "it does not start with the .npy magic \\x93NUMPY"
            else:
                f.seek(0)
                version = np.lib.format.read_magic(f)
                if version == (1, 0):
                    shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
                elif version == (2, 0):
                    shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
                else:
                    why = f"unsupported .npy version {version}"
                offset = f.tell()
    except OSError as exc:
        why = f"cannot be read ({exc.strerror or type(exc).__name__})"
    except (ValueError, SyntaxError, TypeError, tokenize.TokenError, RecursionError):
        why = "its header does not parse"  # numpy's text quotes the header: not echoed
    if why is not None:
        raise ValueError(f"on-disk file {path} is not a valid .npy file: {why}")
    return tuple(int(s) for s in shape), np.dtype(dtype), bool(fortran), int(offset)


def _manifest_field(manifest: dict, path: Path, key: str, typ: type) -> Any:
    if key not in manifest:
        raise ValueError(f"on-disk manifest {path} lacks field {key!r}")
    value = manifest[key]
    if typ is int:
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    else:
        ok = isinstance(value, typ)
    if not ok:
        raise ValueError(f"on-disk manifest {path}: field {key!r} must be "
                         f"{'a non-negative int' if typ is int else typ.__name__}, got {value!r}")
    return value


def _check_npy(directory: Path, name: str, field: str, shape: tuple[int, ...],
               dtypes: tuple[str, ...], label: Optional[str] = None) -> Path:
    """Validate one file's header against the manifest and its size against the header;
    messages call the manifest field ``label`` (default ``files.<field>``)."""
    label = label or f"files.{field}"
    path = inside_root(directory, directory / name, "on-disk file")
    if not path.is_file():
        raise ValueError(f"on-disk file {path} (manifest field {label}) is missing")
    got_shape, dtype, fortran, offset = read_npy_header(path)
    if fortran and len(got_shape) > 1:
        raise ValueError(f"on-disk file {path} ({label}) must be C-order, got Fortran order")
    if dtype.name not in dtypes:
        raise ValueError(f"on-disk file {path} ({label}) has dtype {dtype.name}, expected "
                         f"{' or '.join(dtypes)}")
    for i, want in enumerate(shape):
        if len(got_shape) != len(shape) or (want >= 0 and got_shape[i] != want):
            raise ValueError(f"on-disk file {path} ({label}) has shape {got_shape}, "
                             f"expected {tuple('?' if s < 0 else s for s in shape)}")
    need = offset + int(np.prod(got_shape, dtype=np.int64)) * dtype.itemsize
    size = path.stat().st_size
    if size < need:
        raise ValueError(f"on-disk file {path} ({label}) is truncated: {size} bytes, "
                         f"header needs {need}")
    return path


def _scan_features(features: np.ndarray, path: Path, label: str = "files.features") -> None:
    """Refuse NaN/±inf features, reading the memory-mapped file chunk by chunk; a file larger
    than :data:`NAN_CHECK_LIMIT_BYTES` is then dropped from the page cache again, so the scan
    neither holds it in memory nor warms the cache a disk-tier run measures."""
    check_finite_features(features, f"on-disk file {path} ({label})", _CHUNK_BYTES)
    if features.size * features.dtype.itemsize > NAN_CHECK_LIMIT_BYTES \
            and hasattr(os, "posix_fadvise"):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def advise_random(features: np.ndarray) -> bool:
    """Tell the kernel a memory-mapped feature file larger than half of what the host can give
    is read at random (``MADV_RANDOM``): a row read then faults in its own pages, not the
    read-around window of its neighbours, which would evict the pages still wanted. A file
    that fits keeps read-around (its cold first pass loads faster). True when advised."""
    mm = getattr(features, "_mmap", None)
    if mm is None or not hasattr(mm, "madvise") or not hasattr(mmap, "MADV_RANDOM"):
        return False
    from fgnn.data.memory import host_memory_limit

    limit = host_memory_limit()
    if limit is None or features.nbytes <= limit.bytes // 2:
        return False
    mm.madvise(mmap.MADV_RANDOM)
    return True


def read_manifest(root: Path) -> tuple[Path, dict]:
    """``(path, object)`` of ``root/manifest.json``.

    Raises:
        ValueError: naming the manifest when it is missing, a symlink out of ``root``,
            unreadable, not JSON or not a JSON object.
    """
    mpath = inside_root(root, root / MANIFEST, "on-disk manifest")
    if not mpath.is_file():
        raise ValueError(f"on-disk manifest {mpath} is missing")
    try:
        manifest = json.loads(mpath.read_text())
    except OSError as exc:
        raise ValueError(f"on-disk manifest {mpath} cannot be read "
                         f"({exc.strerror or type(exc).__name__})") from None
    except UnicodeDecodeError:
        raise ValueError(f"on-disk manifest {mpath} is not valid JSON: not UTF-8 text") from None
    except RecursionError:  # the decoder recurses once per nesting level
        raise ValueError(f"on-disk manifest {mpath} is nested too deeply to read (a manifest "
                         f"is a flat object of fields and one files table)") from None
    except json.JSONDecodeError as exc:  # its position, not the text
        raise ValueError(f"on-disk manifest {mpath} is not valid JSON (line {exc.lineno}, "
                         f"column {exc.colno})") from None
    if not isinstance(manifest, dict):
        raise ValueError(f"on-disk manifest {mpath} must be a JSON object")
    return mpath, manifest


def check_rows_sorted(indptr: torch.Tensor, indices: torch.Tensor, path: Path,
                      label: str, chunk: int = 1 << 24) -> None:
    """Refuse CSR ``indices`` not sorted within each row, naming ``path``, ``label`` and the
    first unsorted row and position; scanned ``chunk`` edges at a time (bounded memory)."""
    e = int(indices.numel())
    for lo in range(0, max(0, e - 1), chunk):
        seg = indices[lo:min(e, lo + chunk + 1)]
        # sorted within each row: a decrease is allowed only where a new row starts
        drop = (seg[1:] < seg[:-1]).nonzero().flatten() + (lo + 1)
        if not drop.numel():
            continue
        at = torch.searchsorted(indptr, drop).clamp_(max=indptr.numel() - 1)
        bad = drop[indptr[at] != drop]
        if bad.numel():
            pos = int(bad[0])
            row = int(torch.searchsorted(indptr, torch.tensor(pos), right=True)) - 1
            raise ValueError(f"on-disk file {path} ({label}) is not sorted within row "
                             f"{row} (position {pos})")


def load_ondisk(directory: str | os.PathLike, *, check_nan: Optional[bool] = None) -> Dataset:
    """Load an fgnn on-disk dataset; features stay memory-mapped (read-only).

    Args:
        directory: the dataset directory holding ``manifest.json``.
        check_nan: scan the features for NaN and ±inf chunk by chunk (never the whole file in
            memory); ``None`` (the default) and ``True`` scan, ``False`` skips the scan (a file
            whose features are known finite: a scan reads the whole file once).

    Returns:
        A :class:`~fgnn.data.Dataset` whose ``features`` is a read-only ``np.memmap``.

    Raises:
        ValueError: naming the file and field on a missing file, a missing or mistyped
            manifest field, a shape/dtype mismatch, a truncated file, an inconsistent or
            unsorted CSR, or non-finite (NaN, ±inf) features (naming the row and column).
    """
    root = Path(directory)
    mpath, manifest = read_manifest(root)
    _check_format(manifest, mpath)
    name = _manifest_field(manifest, mpath, "name", str)
    n = _manifest_field(manifest, mpath, "num_nodes", int)
    e = _manifest_field(manifest, mpath, "num_edges", int)
    fdim = _manifest_field(manifest, mpath, "feat_dim", int)
    if fdim < 1:
        raise ValueError(f"on-disk manifest {mpath}: field 'feat_dim' must be >= 1 (a model "
                         f"needs at least one input feature), got {fdim}")
    fdtype = _manifest_field(manifest, mpath, "feat_dtype", str)
    if fdtype not in FEAT_DTYPES:
        raise ValueError(f"on-disk manifest {mpath}: field 'feat_dtype' must be one of "
                         f"{FEAT_DTYPES}, got {fdtype!r}")
    num_classes = _manifest_field(manifest, mpath, "num_classes", int)
    files = _manifest_files(manifest, mpath, root)

    ints = ("int32", "int64")
    fpath = _check_npy(root, files["features"], "features", (n, fdim), (fdtype,))
    ip_path = _check_npy(root, files["indptr"], "indptr", (n + 1,), ("int64",))
    ix_path = _check_npy(root, files["indices"], "indices", (e,), ints)
    w_path = (None if files["weights"] is None
              else _check_npy(root, files["weights"], "weights", (e,), ("float32",)))
    l_path = _check_npy(root, files["labels"], "labels", (n,), ints)
    s_paths = {k: _check_npy(root, files[k], k, (-1,), ints + ("bool",))  # ids or a mask
               for k in ("train_idx", "val_idx", "test_idx")}

    graph = _load_graph(root, ip_path, ix_path, w_path)
    features = np.load(fpath, mmap_mode="r")
    if check_nan is not False:
        _scan_features(features, fpath)
    advise_random(features)
    labels = torch.from_numpy(np.load(l_path).astype(np.int64, copy=False))
    splits = {k: torch.from_numpy(np.load(p)) for k, p in s_paths.items()}  # Dataset: -> ids
    try:
        return Dataset(name=name, graph=graph, features=features, labels=labels,
                       train_idx=splits["train_idx"], val_idx=splits["val_idx"],
                       test_idx=splits["test_idx"], num_classes=num_classes,
                       meta={"source": "ondisk", "root": str(root), "feat_dtype": fdtype,
                             "build_s": _build_seconds(manifest)},
                       check_features=False)  # scanned above, naming the file
    except ValueError as exc:
        raise ValueError(f"on-disk dataset {root} (labels/splits files): {exc}") from exc


def _build_seconds(manifest: dict) -> Optional[float]:
    """Seconds the out-of-core builder took to write this dataset, when it did."""
    build = manifest.get("build")
    seconds = build.get("seconds") if isinstance(build, dict) else None
    return float(seconds) if isinstance(seconds, (int, float)) else None


def _check_format(manifest: dict, mpath: Path) -> None:
    """The manifest's ``format`` (homogeneous) and ``version`` fields."""
    fmt = _manifest_field(manifest, mpath, "format", str)
    if fmt == HETERO_FORMAT:
        raise ValueError(f"on-disk manifest {mpath}: field 'format' is {fmt!r}, a "
                         f"heterogeneous graph; load it with fgnn.data.load_ondisk_hetero "
                         f"(or fgnn.data.load_dataset / launch.py --dataset ondisk:DIR, which read "
                         f"both formats)")
    if fmt != FORMAT:
        raise ValueError(f"on-disk manifest {mpath}: field 'format' must be {FORMAT!r}, got "
                         f"{fmt!r}")
    version = _manifest_field(manifest, mpath, "version", int)
    if version != VERSION:
        raise ValueError(f"on-disk manifest {mpath}: field 'version' must be {VERSION}, got "
                         f"{version!r}")


def _manifest_files(manifest: dict, mpath: Path, root: Path) -> dict:
    """The manifest's ``files`` table: every :data:`FILE_KEYS` entry a plain file name in
    ``root`` (``weights`` may be ``None``)."""
    files = _manifest_field(manifest, mpath, "files", dict)
    for key in FILE_KEYS:
        if key not in files:
            raise ValueError(f"on-disk manifest {mpath} lacks field 'files.{key}'")
        val = files[key]
        if val is None and key == "weights":
            continue
        if not isinstance(val, str) or not val or Path(val).name != val:
            raise ValueError(f"on-disk manifest {mpath}: field 'files.{key}' must be a plain "
                             f"file name inside {root}, got {val!r}")
    return files


def _load_graph(root: Path, ip_path: Path, ix_path: Path, w_path: Optional[Path]) -> CSRGraph:
    """The CSR graph of the ``indptr``/``indices``/``weights`` files, memory-mapped (the page
    cache holds one copy for every process that maps them, :class:`~fgnn.graph.TopologyFiles`),
    checked consistent and row-sorted."""
    files = TopologyFiles(str(ip_path.resolve()), str(ix_path.resolve()),
                          None if w_path is None else str(w_path.resolve()))
    mapped = files.open()
    try:
        graph = CSRGraph(mapped.indptr, mapped.indices, mapped.weights, files=files)
    except ValueError as exc:
        raise ValueError(f"on-disk files {ip_path.name}/{ix_path.name} in {root} form an "
                         f"inconsistent CSR graph: {exc}") from exc
    check_rows_sorted(graph.indptr, graph.indices, ix_path, "files.indices")
    return graph
