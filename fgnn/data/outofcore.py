"""The out-of-core builder: a synthetic graph written straight into the ``ondisk:`` format in
bounded memory, for graphs whose edges or features do not fit in RAM.

A :class:`GraphRecipe` says what to draw (sizes, degree law, classes, splits); :func:`build` writes
it; :func:`ensure_built` reuses a finished build from a cache directory or makes one. Memory:

1. one pass draws every edge's destination, chunk by chunk, and counts the row lengths into
   ``indptr`` (int64, ``N + 1``): the one ``N``-sized array the builder keeps;
2. a two-pass counting sort fills ``indices`` (int32) row range by row range: each range's
   edges fit one buffer of at most ``memory_cap / 4`` bytes; every edge is drawn again for each
   range (drawing is cheaper than spilling edges to disk), its source kept only when its
   destination lies in the range; rows are sorted, the range is written sequentially;
3. features, labels and splits are written in row chunks.

Peak memory is ``indptr`` plus the range buffer, its cursors and the chunk buffers
(:func:`build_peak_bytes`), whatever the edge count. Every random number is a counter-based hash
(:mod:`fgnn.data._build_kernels`), so the bytes do not depend on the memory cap: each file's
BLAKE2b digest is kept in the manifest (``build.checksums``). A build writes into a sibling
``.<name>.partial-<pid>`` directory that has no manifest until the end and is renamed into place
only when complete; a killed build leaves no directory that loads, and the next build removes it
and starts again.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import math
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

from fgnn.data.memory import MemoryLimit, format_bytes, host_memory_limit
from fgnn.data.ondisk import FORMAT, MANIFEST, VERSION, fsync_path, write_manifest

__all__ = ["GraphRecipe", "BuildResult", "build", "ensure_built", "build_peak_bytes",
           "cache_root", "default_memory_cap", "CACHE_ENV", "BUILDER_VERSION"]

#: Environment variable naming the directory where built datasets are kept and reused.
CACHE_ENV = "FGNN_DATASET_CACHE"
#: Part of every build's identity: a change to what the builder draws bumps it.
BUILDER_VERSION = 1
#: Edges drawn per chunk (their destinations are held while the chunk is counted or filled).
EDGE_CHUNK = 1 << 22
#: Largest buffer of one row range (bytes of int32 sources); smaller under a memory cap.
RANGE_BYTES = 1 << 30
#: Bytes of feature rows generated and written at a time.
FEATURE_CHUNK_BYTES = 64 << 20
_STREAMS = {"dst": 1, "src": 2, "homophily": 3, "features": 4, "split": 5, "weights": 6,
            "centroids": 7, "offset": 8}
_ID_LIMIT = 2 ** 31 - 1                                          # int32 indices end to end


@dataclass(frozen=True)
class GraphRecipe:
    """What a build draws.

    Attributes:
        name: the dataset's name.
        num_nodes: N (below 2^31: indices are int32).
        num_edges: E, directed edges (multi-edges and self-loops kept).
        feat_dim: F.
        feat_dtype: ``"float32"`` or ``"float16"`` (the file's dtype).
        num_classes: C; a vertex's class is its degree rank mod C.
        skew: exponent ``a`` of the Zipf law of both endpoints, ``w(rank) ~ (rank + head)^-a``,
            in ``[0, 1)``; 0 draws endpoints uniformly. Degrees follow a power law of exponent
            ``1 + 1/a`` in their tail.
        head: the law's offset: a larger one flattens the hubs.
        homophily: chance that an edge's source is moved to its destination's class.
        signal: feature rows are ``signal / sqrt(F) * centroid[class] + noise``, centroids
            standard normal, noise uniform in [-1, 1): two classes' centroids lie about
            ``1.4 * signal`` apart against the noise's 0.58 per dimension, so a vertex's own
            features name its class only in part and its neighbourhood adds the rest.
        train_frac, val_frac, test_frac: each vertex's split is one draw.
        weighted: also write uniform ``(0.1, 1]`` edge weights.
        seed: the seed of every stream.
        law: ``"zipf"`` (the law above) or ``"rmat"`` (R-MAT quadrants ``rmat_abc``; N must be
            a power of two; ``skew``, ``head`` and ``homophily`` are not used).
        rmat_abc: R-MAT's ``a, b, c`` (``d = 1 - a - b - c``).
    """

    name: str
    num_nodes: int
    num_edges: int
    feat_dim: int = 128
    feat_dtype: str = "float32"
    num_classes: int = 16
    skew: float = 0.5
    head: float = 10.0
    homophily: float = 0.5
    signal: float = 1.0
    train_frac: float = 0.01
    val_frac: float = 0.005
    test_frac: float = 0.01
    weighted: bool = False
    seed: int = 0
    law: str = "zipf"
    rmat_abc: tuple[float, float, float] = (0.57, 0.19, 0.19)

    def __post_init__(self) -> None:
        for name in ("num_nodes", "num_edges", "feat_dim", "num_classes", "seed"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise ValueError(f"graph recipe {self.name!r}: {name} must be a non-negative "
                                 f"integer, got {v!r}")
        if not 1 <= self.num_nodes <= _ID_LIMIT:
            raise ValueError(f"graph recipe {self.name!r}: num_nodes must lie in [1, 2^31 - 1], "
                             f"got {self.num_nodes}")
        if self.feat_dim < 1 or self.num_classes < 1:
            raise ValueError(f"graph recipe {self.name!r}: feat_dim and num_classes must be >= 1, "
                             f"got {self.feat_dim} and {self.num_classes}")
        if self.feat_dtype not in ("float32", "float16"):
            raise ValueError(f"graph recipe {self.name!r}: feat_dtype must be float32 or "
                             f"float16, got {self.feat_dtype!r}")
        if not 0.0 <= self.skew < 1.0:
            raise ValueError(f"graph recipe {self.name!r}: skew must lie in [0, 1), got "
                             f"{self.skew!r}")
        if not self.head > 0.0:
            raise ValueError(f"graph recipe {self.name!r}: head must be > 0, got {self.head!r}")
        for name in ("homophily", "train_frac", "val_frac", "test_frac"):
            if not 0.0 <= float(getattr(self, name)) <= 1.0:
                raise ValueError(f"graph recipe {self.name!r}: {name} must lie in [0, 1], got "
                                 f"{getattr(self, name)!r}")
        if self.law not in ("zipf", "rmat"):
            raise ValueError(f"graph recipe {self.name!r}: law must be zipf or rmat, got "
                             f"{self.law!r}")
        if self.law == "rmat" and self.num_nodes & (self.num_nodes - 1):
            raise ValueError(f"graph recipe {self.name!r}: an R-MAT graph has 2^scale nodes, "
                             f"got {self.num_nodes}")
        if self.train_frac + self.val_frac + self.test_frac > 1.0:
            raise ValueError(f"graph recipe {self.name!r}: train_frac + val_frac + test_frac "
                             f"must be <= 1")

    def identity(self) -> dict[str, Any]:
        """The fields that define the bytes (the name aside), with the builder's version."""
        d = dataclasses.asdict(self)
        d.pop("name")
        d["rmat_abc"] = list(d["rmat_abc"])
        return {"builder": BUILDER_VERSION, **d}

    def digest(self) -> str:
        """A short hash of :meth:`identity`: the cache directory's suffix."""
        text = json.dumps(self.identity(), sort_keys=True)
        return hashlib.blake2b(text.encode(), digest_size=6).hexdigest()

    @property
    def feature_bytes(self) -> int:
        """Bytes of the feature file's rows."""
        return self.num_nodes * self.feat_dim * (2 if self.feat_dtype == "float16" else 4)

    @property
    def topology_bytes(self) -> int:
        """Bytes of ``indptr`` + ``indices`` (+ ``weights``)."""
        return 8 * (self.num_nodes + 1) + (8 if self.weighted else 4) * self.num_edges


@dataclass(frozen=True)
class BuildResult:
    """A finished build: where it is and what it cost.

    Attributes:
        path: the dataset directory (``ondisk:PATH``).
        reused: it was already built and was not built again.
        seconds: build time (0 when reused).
        phases: seconds per phase (``count``, ``fill``, ``features``, ``splits``).
    """

    path: Path
    reused: bool
    seconds: float
    phases: dict[str, float]


def cache_root() -> Path:
    """Where built datasets are kept: ``$FGNN_DATASET_CACHE``, else
    ``~/.cache/fgnn/datasets``."""
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "fgnn" / "datasets"


def _kernels():
    """The compiled loops, imported on first use (numba loads scipy: not at import)."""
    from fgnn.data import _build_kernels

    return _build_kernels


def default_memory_cap(limit: Optional[MemoryLimit]) -> Optional[int]:
    """The buffers' share of what the host can give (a quarter, at least 64 MiB); None (the
    largest buffers) when no limit is known."""
    return None if limit is None else max(64 << 20, limit.bytes // 4)


def _range_bytes(memory_cap: Optional[int]) -> int:
    if memory_cap is None:
        return RANGE_BYTES
    return max(4096, min(RANGE_BYTES, int(memory_cap) // 4))


def _edge_chunk(memory_cap: Optional[int]) -> int:
    if memory_cap is None:
        return EDGE_CHUNK
    return max(1024, min(EDGE_CHUNK, int(memory_cap) // 64))


def _feature_chunk_bytes(memory_cap: Optional[int]) -> int:
    if memory_cap is None:
        return FEATURE_CHUNK_BYTES
    return max(4096, min(FEATURE_CHUNK_BYTES, int(memory_cap) // 16))


def build_peak_bytes(recipe: GraphRecipe, memory_cap: Optional[int] = None) -> int:
    """The builder's peak host bytes: ``indptr``, the row-range buffer and its cursors (each at
    most the range's bytes), an edge chunk's destinations, a row's sort copy, a feature chunk
    and the split ids, plus the interpreter's own (measured: about 150 MiB with numba loaded)."""
    n, e = recipe.num_nodes, recipe.num_edges
    range_b = min(_range_bytes(memory_cap), 4 * max(e, 1))
    splits = 8 * int(n * (recipe.train_frac + recipe.val_frac + recipe.test_frac)) * 2
    feat = _feature_chunk_bytes(memory_cap)
    chunk = _edge_chunk(memory_cap)
    return int(8 * (n + 1) + 3 * range_b + 6 * chunk + feat + splits + _BASE_BYTES)


#: The builder process's own memory besides its buffers (Python, numpy, numba, torch).
_BASE_BYTES = 400 << 20


# ---------------------------------------------------------------------------- the draw
@dataclass(frozen=True)
class _Law:
    """Constants of the endpoint law and the id bijection, shared by every kernel call."""

    n: int
    classes: int
    homophily: float
    mult: int
    inv_mult: int
    offset: int
    om: float
    head: float
    base: float
    span: float
    keys: dict[str, np.uint64]
    rmat: Optional[tuple[int, float, float, float]]    # scale, a, a + b, a + b + c

    @classmethod
    def of(cls, r: GraphRecipe) -> "_Law":
        n = r.num_nodes
        keys = {k: _kernels().stream_key(r.seed, s) for k, s in _STREAMS.items()}
        mult = max(1, int(n * 0.6180339887498949)) | 1
        while math.gcd(mult, n) != 1:
            mult += 2
        mult %= n
        inv = pow(mult, -1, n) if n > 1 else 0
        offset = int(keys["offset"]) % n
        om = 1.0 - float(r.skew)
        base = float(r.head) ** om
        span = (n + float(r.head)) ** om - base
        a, b, c = (float(x) for x in r.rmat_abc)
        rmat = (n.bit_length() - 1, a, a + b, a + b + c) if r.law == "rmat" else None
        return cls(n, r.num_classes, float(r.homophily), mult, inv, offset, om,
                   float(r.head), base, span, keys, rmat)

    def dst(self, lo: int, out: np.ndarray) -> None:
        if self.rmat is not None:
            _kernels().rmat_dst_ids(np.int64(lo), np.int64(self.n), np.int64(self.mult),
                           np.int64(self.offset), np.int64(self.rmat[0]), self.keys["dst"],
                           *self.rmat[1:], out)
            return
        _kernels().dst_ids(np.int64(lo), np.int64(self.n), np.int64(self.mult), np.int64(self.offset),
                  self.keys["dst"], self.om, self.head, self.base, self.span, out)

    def fill(self, lo: int, dst: np.ndarray, row_lo: int, row_hi: int, cursor: np.ndarray,
             out: np.ndarray) -> None:
        if self.rmat is not None:
            _kernels().rmat_fill_rows(np.int64(lo), dst, np.int64(self.n), np.int64(self.mult),
                             np.int64(self.offset), np.int64(self.rmat[0]), self.keys["dst"],
                             *self.rmat[1:], np.int64(row_lo), np.int64(row_hi), cursor, out)
            return
        _kernels().fill_rows(np.int64(lo), dst, np.int64(self.n), np.int64(self.classes),
                    self.homophily, np.int64(self.mult), np.int64(self.offset),
                    self.keys["src"], self.keys["homophily"], self.om, self.head, self.base,
                    self.span, np.int64(self.inv_mult), np.int64(row_lo), np.int64(row_hi),
                    cursor, out)


class _Progress:
    """One tqdm bar over the build's work (edges drawn per pass plus feature rows), with an
    ETA; silent when ``enabled`` is false."""

    def __init__(self, total: int, name: str, enabled: bool) -> None:
        self.bar = None
        if enabled:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, desc=f"building {name}", unit=" items",
                            unit_scale=True, file=sys.stderr, mininterval=1.0)

    def __call__(self, n: int) -> None:
        if self.bar is not None:
            self.bar.update(n)

    def set_total(self, total: int) -> None:
        if self.bar is not None:
            self.bar.total = total
            self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _ranges(indptr: np.ndarray, cap_edges: int, cap_rows: int) -> list[tuple[int, int]]:
    """Row ranges ``[lo, hi)`` of at most ``cap_rows`` rows whose edges fit ``cap_edges`` (a
    row longer than that stands alone)."""
    n = indptr.size - 1
    out, lo = [], 0
    while lo < n:
        hi = int(np.searchsorted(indptr, indptr[lo] + cap_edges, side="right")) - 1
        hi = min(n, lo + cap_rows, max(hi, lo + 1))
        out.append((lo, hi))
        lo = hi
    return out


class _Digest:
    """A file written sequentially, hashed as it goes."""

    def __init__(self, path: Path, header_dtype: str, shape: tuple[int, ...]) -> None:
        self.path, self.f = path, open(path, "wb")
        self.h = hashlib.blake2b(digest_size=16)
        header = {"descr": np.dtype(header_dtype).str, "fortran_order": False,
                  "shape": tuple(int(s) for s in shape)}
        np.lib.format.write_array_header_1_0(self.f, header)

    def write(self, arr: np.ndarray) -> None:
        view = memoryview(np.ascontiguousarray(arr)).cast("B")
        self.h.update(view)
        self.f.write(view)

    def close(self) -> str:
        self.f.flush()
        os.fsync(self.f.fileno())
        self.f.close()
        return self.h.hexdigest()


def _count(law: _Law, recipe: GraphRecipe, chunk: int, tick: Callable[[int], None]
           ) -> np.ndarray:
    """Pass 1: ``indptr`` from the destinations of every edge."""
    indptr = np.zeros(recipe.num_nodes + 1, dtype=np.int64)
    dst = np.empty(chunk, dtype=np.int32)
    counts = indptr[1:]
    for lo in range(0, recipe.num_edges, chunk):
        part = dst[:min(chunk, recipe.num_edges - lo)]
        law.dst(lo, part)
        _kernels().count_rows(part, counts)
        tick(part.size)
    np.cumsum(indptr, out=indptr)
    return indptr


def _fill(law: _Law, recipe: GraphRecipe, indptr: np.ndarray, out: _Digest,
          ranges: list[tuple[int, int]], chunk: int, tick: Callable[[int], None]) -> None:
    """Pass 2: the sources of every row range, sorted within rows, written in row order."""
    longest = max(int(indptr[hi] - indptr[lo]) for lo, hi in ranges) if ranges else 0
    buf = np.empty(max(1, longest), dtype=np.int32)
    dst = np.empty(chunk, dtype=np.int32)
    for row_lo, row_hi in ranges:
        base = int(indptr[row_lo])
        size = int(indptr[row_hi]) - base
        cursor = indptr[row_lo:row_hi] - base
        part_out = buf[:size]
        for lo in range(0, recipe.num_edges, chunk):
            part = dst[:min(chunk, recipe.num_edges - lo)]
            law.dst(lo, part)
            law.fill(lo, part, row_lo, row_hi, cursor, part_out)
            tick(part.size)
        del cursor
        _kernels().sort_rows(indptr[row_lo:row_hi + 1] - base, part_out)
        out.write(part_out)


def _features(law: _Law, recipe: GraphRecipe, out: _Digest, chunk_bytes: int,
              tick: Callable[[int], None]) -> None:
    f = recipe.feat_dim
    rows = max(1, chunk_bytes // (4 * f))
    rng = np.random.default_rng([recipe.seed, _STREAMS["centroids"]])
    centroids = rng.standard_normal((recipe.num_classes, f)).astype(np.float32)
    buf = np.empty((rows, f), dtype=np.float32)                  # the kernels write float32
    half = np.empty((rows, f), dtype=np.float16) if recipe.feat_dtype == "float16" else None
    for lo in range(0, recipe.num_nodes, rows):
        part = buf[:min(rows, recipe.num_nodes - lo)]
        _kernels().write_features(np.int64(lo), np.int64(law.n), np.int64(law.classes),
                         np.int64(law.inv_mult), np.int64(law.offset), centroids,
                         float(recipe.signal) / math.sqrt(f), law.keys["features"], part)
        if half is not None:
            np.copyto(half[:part.shape[0]], part, casting="same_kind")
            part = half[:part.shape[0]]
        out.write(part)
        tick(part.shape[0])


def _labels_and_splits(law: _Law, recipe: GraphRecipe, tmp: Path, chunk: int
                       ) -> dict[str, str]:
    """``labels.npy`` (int32 classes) and the three split files; their digests."""
    labels = _Digest(tmp / "labels.npy", "<i4", (recipe.num_nodes,))
    split: dict[int, list[np.ndarray]] = {0: [], 1: [], 2: []}
    cls = np.empty(chunk, dtype=np.int32)
    code = np.empty(chunk, dtype=np.int8)
    for lo in range(0, recipe.num_nodes, chunk):
        hi = min(lo + chunk, recipe.num_nodes)
        _kernels().class_of_ids(np.int64(lo), np.int64(hi), np.int64(law.n), np.int64(law.classes),
                       np.int64(law.inv_mult), np.int64(law.offset), cls[:hi - lo])
        labels.write(cls[:hi - lo])
        _kernels().split_codes(np.int64(lo), np.int64(hi), law.keys["split"], recipe.train_frac,
                      recipe.val_frac, recipe.test_frac, code[:hi - lo])
        for s in split:
            split[s].append(np.flatnonzero(code[:hi - lo] == s).astype(np.int64) + lo)
    sums = {"labels": labels.close()}
    for s, key in enumerate(("train_idx", "val_idx", "test_idx")):
        ids = np.concatenate(split[s]) if split[s] else np.zeros(0, dtype=np.int64)
        w = _Digest(tmp / f"{key}.npy", "<i8", (ids.size,))
        w.write(ids)
        sums[key] = w.close()
    return sums


def _weights(law: _Law, recipe: GraphRecipe, tmp: Path, chunk: int) -> str:
    w = _Digest(tmp / "weights.npy", "<f4", (recipe.num_edges,))
    buf = np.empty(chunk, dtype=np.float32)
    for lo in range(0, recipe.num_edges, chunk):
        part = buf[:min(chunk, recipe.num_edges - lo)]
        _kernels().edge_weights(np.int64(lo), law.keys["weights"], part)
        w.write(part)
    return w.close()


def _fill_dir(recipe: GraphRecipe, tmp: Path, memory_cap: Optional[int], progress: bool
              ) -> dict[str, Any]:
    """Write every file of the dataset into ``tmp``; the manifest's ``build`` section."""
    law, chunk = _Law.of(recipe), _edge_chunk(memory_cap)
    range_b = _range_bytes(memory_cap)
    bar = _Progress(recipe.num_edges * 2 + recipe.num_nodes, recipe.name, progress)
    phases: dict[str, float] = {}
    sums: dict[str, str] = {}
    try:
        t = time.perf_counter()
        indptr = _count(law, recipe, chunk, bar)
        phases["count"] = time.perf_counter() - t
        ranges = [r for r in _ranges(indptr, max(1, range_b // 4), max(1, range_b // 8))
                  if indptr[r[1]] > indptr[r[0]]]
        bar.set_total(recipe.num_edges * (1 + len(ranges)) + recipe.num_nodes)
        w = _Digest(tmp / "indptr.npy", "<i8", indptr.shape)
        w.write(indptr)
        sums["indptr"] = w.close()
        t = time.perf_counter()
        w = _Digest(tmp / "indices.npy", "<i4", (recipe.num_edges,))
        _fill(law, recipe, indptr, w, ranges, chunk, bar)
        sums["indices"] = w.close()
        phases["fill"] = time.perf_counter() - t
        del indptr
        t = time.perf_counter()
        w = _Digest(tmp / "features.npy", recipe.feat_dtype, (recipe.num_nodes, recipe.feat_dim))
        _features(law, recipe, w, _feature_chunk_bytes(memory_cap), bar)
        sums["features"] = w.close()
        phases["features"] = time.perf_counter() - t
        t = time.perf_counter()
        sums.update(_labels_and_splits(law, recipe, tmp, chunk))
        if recipe.weighted:
            sums["weights"] = _weights(law, recipe, tmp, chunk)
        phases["splits"] = time.perf_counter() - t
    finally:
        bar.close()
    return {"recipe": recipe.identity(), "checksums": sums, "phases_s": phases,
            "row_ranges": len(ranges), "memory_cap": memory_cap}


def build(recipe: GraphRecipe, directory: str | os.PathLike, *,
          memory_cap: Optional[int] = None, progress: bool = True) -> BuildResult:
    """Write ``recipe`` as an ``ondisk:`` dataset at ``directory`` (which must not exist).

    Args:
        recipe: what to draw.
        directory: the dataset directory to create.
        memory_cap: bytes the build may hold beyond ``indptr`` (smaller buffers, more passes);
            default: large buffers (:data:`RANGE_BYTES`).
        progress: draw a progress bar with an ETA on stderr.

    Raises:
        ValueError: the directory exists.
    """
    dest = Path(directory)
    if dest.exists():
        raise ValueError(f"on-disk dataset directory {dest} already exists")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.parent / f".{dest.name}.partial-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    t0 = time.perf_counter()
    try:
        info = _fill_dir(recipe, tmp, memory_cap, progress)
        seconds = time.perf_counter() - t0
        files = {k: f"{k}.npy" for k in ("indptr", "indices", "features", "labels",
                                         "train_idx", "val_idx", "test_idx")}
        files["weights"] = "weights.npy" if recipe.weighted else None
        write_manifest(tmp, {
            "format": FORMAT, "version": VERSION, "name": recipe.name,
            "num_nodes": recipe.num_nodes, "num_edges": recipe.num_edges,
            "feat_dim": recipe.feat_dim, "feat_dtype": recipe.feat_dtype,
            "num_classes": recipe.num_classes, "files": files,
            "build": {**info, "seconds": seconds}})
        fsync_path(tmp)
        os.replace(tmp, dest)
        fsync_path(dest.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return BuildResult(dest, False, seconds, info["phases_s"])


def _stale_partials(dest: Path) -> list[Path]:
    """Partial builds of ``dest`` whose process is gone."""
    out = []
    for p in dest.parent.glob(f".{dest.name}.partial-*"):
        pid = p.name.rpartition("-")[2]
        alive = pid.isdigit() and Path(f"/proc/{pid}").exists() and int(pid) != os.getpid()
        if not alive:
            out.append(p)
    return out


def _complete(dest: Path, recipe: GraphRecipe) -> bool:
    try:
        manifest = json.loads((dest / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    return manifest.get("build", {}).get("recipe") == recipe.identity()


def ensure_built(recipe: GraphRecipe, directory: Optional[str | os.PathLike] = None, *,
                 memory_cap: Optional[int] = None, progress: bool = True,
                 log: Optional[Callable[[str], None]] = None) -> BuildResult:
    """The finished build of ``recipe``: reused when ``directory`` holds it, else built there.

    Args:
        recipe: what to draw.
        directory: the dataset directory; default ``cache_root()/<name>-<digest>``.
        memory_cap: as for :func:`build`; default a quarter of what the host can give.
        progress: draw a progress bar.
        log: where to say that a build starts or is reused (one line each).

    Concurrent callers take turns (``flock`` on a sibling lock file), so one builds and the
    others reuse. A directory of the same name that holds another recipe is refused.

    Raises:
        ValueError: ``directory`` exists and holds another dataset.
    """
    dest = Path(directory) if directory is not None else \
        cache_root() / f"{recipe.name}-{recipe.digest()}"
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest.parent / f".{dest.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _complete(dest, recipe):
            if log:
                log(f"dataset {recipe.name}: reusing the build in {dest}")
            return BuildResult(dest, True, 0.0, {})
        if dest.exists():
            raise ValueError(f"dataset {recipe.name}: {dest} exists but holds another build "
                             f"(manifest build.recipe differs); remove it or name another "
                             f"directory")
        for stale in _stale_partials(dest):
            shutil.rmtree(stale, ignore_errors=True)
        if memory_cap is None:
            memory_cap = default_memory_cap(host_memory_limit())
        if log:
            log(f"dataset {recipe.name}: building {recipe.num_nodes:,} vertices, "
                f"{recipe.num_edges:,} edges, {format_bytes(recipe.feature_bytes)} of "
                f"{recipe.feat_dtype} features into {dest} (once; later jobs reuse it)")
        return build(recipe, dest, memory_cap=memory_cap, progress=progress)
