"""Synthetic graphs: R-MAT (skewed, power-law-like degrees) and uniform random (Erdős–Rényi).

Both generators share one pipeline so a skewed and an unskewed graph differ only in how edge
endpoints are drawn:

1. Edges are drawn in fixed-size chunks (:data:`EDGE_CHUNK`), each from its own
   ``numpy.random.Generator`` seeded with ``(seed, stream, chunk)``, so the output depends only on
   the parameters and the seed, never on the machine, and the peak memory stays bounded.
2. R-MAT (Chakrabarti, Zhan & Faloutsos, *R-MAT: A Recursive Model for Graph Mining*, SDM 2004,
   §3): for each of the ``scale`` bits one vectorised draw per chunk chooses a quadrant
   ``a | b | c | d`` for every edge at once. Node ids are then relabelled with a seeded random
   permutation so the hubs are spread over the id space instead of sitting at id 0.
3. Edges are packed chunk-wise into one array of ``dst * N + src`` int64 keys, sorted in place
   (numpy, no extra copy) and split into a CSR graph whose row ``v`` lists the sources of the
   edges into ``v`` (:class:`fgnn.graph.CSRGraph` convention); ``indices`` are int32 while
   ``N < 2**31``.
4. Features are ``torch.rand`` rows in ``[0, 1)`` written chunk-wise into one preallocated
   ``(N, F)`` tensor; labels follow a seeded linear rule of each vertex's own features
   (:func:`_planted_labels`), so they can be learned; the train/val/test splits are
   disjoint prefixes of one seeded permutation; edge weights are uniform in ``(0.1, 1.0]``.

Multi-edges and self-loops are kept by default (``dedup=False``, ``self_loops=True``), so a graph
has exactly ``edge_factor * N`` directed edges and its memory is known in advance; pass
``dedup=True`` / ``self_loops=False`` to drop them. Peak memory is about the larger of
``16 E`` bytes (keys, then int32 indices and float32 weights) and the final dataset plus
``Dataset.validate``'s NaN mask (``N F (itemsize + 1)``): scale 24 with edge factor 16 (2^28
edges) and 128 float32 features needs about 12 GiB (scale 21 measured 1.8 GiB peak RSS).

The datasets measure system throughput; the planted labels only show that training learns (they
depend on a vertex's own features, not on the graph), so accuracy on them says nothing about a
model's use of structure.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from fgnn.data.dataset import MAX_CLASSES, Dataset
from fgnn.graph import CSRGraph

__all__ = ["rmat_dataset", "uniform_dataset", "rmat_edges", "uniform_edges", "estimate_bytes",
           "EDGE_CHUNK"]

#: Edges drawn per chunk; part of the output's definition (changing it changes the graphs).
#: Small enough that one chunk's working set stays in the CPU's cache.
EDGE_CHUNK = 1 << 18
#: Elements per pass of the in-place post-processing loops (bounds their temporaries).
_WORK_CHUNK = 1 << 22
#: Feature rows generated per chunk.
_FEAT_CHUNK_ELEMS = 1 << 24
_MAX_SCALE = 31                                                  # keys dst * N + src fit int64
_FEAT_DTYPES = {"float32": torch.float32, "float16": torch.float16}
# Independent random streams per purpose.
_S_EDGES, _S_PERM, _S_WEIGHTS, _S_FEATS, _S_LABELS, _S_SPLIT = range(6)


def _rng(seed: int, stream: int, chunk: int = 0) -> np.random.Generator:
    return np.random.default_rng([int(seed), stream, chunk])


def _check_common(scale: int, edge_factor: int, feat_dim: int, num_classes: int,
                  train_frac: float, val_frac: float, test_frac: float, feat_dtype: str,
                  seed: int) -> None:
    if not isinstance(scale, (int, np.integer)) or not 1 <= scale <= _MAX_SCALE:
        raise ValueError(f"scale must be an integer in [1, {_MAX_SCALE}], got {scale!r}")
    if not isinstance(edge_factor, (int, np.integer)) or edge_factor < 0:
        raise ValueError(f"edge_factor must be a non-negative integer, got {edge_factor!r}")
    if not isinstance(feat_dim, (int, np.integer)) or feat_dim < 1:
        raise ValueError(f"feat_dim must be a positive integer, got {feat_dim!r}")
    if not isinstance(num_classes, (int, np.integer)) or num_classes < 1:
        raise ValueError(f"num_classes must be a positive integer, got {num_classes!r}")
    if num_classes > MAX_CLASSES:
        raise ValueError(f"num_classes must be at most {MAX_CLASSES} (2^24), got {num_classes!r}")
    if not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    for name, frac in (("train_frac", train_frac), ("val_frac", val_frac),
                       ("test_frac", test_frac)):
        if not 0.0 <= float(frac) <= 1.0:
            raise ValueError(f"{name} must lie in [0, 1], got {frac!r}")
    if float(train_frac) + float(val_frac) + float(test_frac) > 1.0:
        raise ValueError(f"train_frac + val_frac + test_frac must be <= 1, got "
                         f"{train_frac} + {val_frac} + {test_frac}")
    if feat_dtype not in _FEAT_DTYPES:
        raise ValueError(f"feat_dtype must be one of {sorted(_FEAT_DTYPES)}, got {feat_dtype!r}")


def _check_abc(a: float, b: float, c: float) -> None:
    for name, p in (("a", a), ("b", b), ("c", c)):
        if not 0.0 <= float(p) <= 1.0:
            raise ValueError(f"R-MAT probability {name} must lie in [0, 1], got {p!r}")
    if float(a) + float(b) + float(c) > 1.0:
        raise ValueError(f"R-MAT probabilities need a + b + c <= 1 (d = 1 - a - b - c), got "
                         f"a={a}, b={b}, c={c}")


# ---------------------------------------------------------------------------- edge generators
def _rmat_chunk(rng: np.random.Generator, m: int, scale: int, a: float, b: float,
                c: float) -> tuple[np.ndarray, np.ndarray]:
    """Draw ``m`` R-MAT edges: one quadrant draw per bit for all edges at once.

    Ids are accumulated in uint32 (``scale <= 31``), half the memory traffic of int64.
    """
    src = np.zeros(m, dtype=np.uint32)
    dst = np.zeros(m, dtype=np.uint32)
    ab, abc = np.float32(a + b), np.float32(a + b + c)
    a32 = np.float32(a)
    r = np.empty(m, dtype=np.float32)
    bit_s = np.empty(m, dtype=bool)
    bit_d = np.empty(m, dtype=bool)
    for _ in range(scale):
        rng.random(out=r, dtype=np.float32)
        # Quadrants: a = (0, 0), b = (0, 1), c = (1, 0), d = (1, 1) as (src bit, dst bit).
        np.greater_equal(r, ab, out=bit_s)                       # src bit: c or d
        np.greater_equal(r, a32, out=bit_d)                      # b, c or d
        bit_d ^= bit_s                                           # b only
        bit_d |= r >= abc                                        # dst bit: b or d
        src <<= 1                                                # bit order is immaterial
        src += bit_s
        dst <<= 1
        dst += bit_d
    return src, dst


def _rmat_keys(scale: int, edge_factor: int, a: float, b: float, c: float, seed: int,
               permute: bool = True) -> np.ndarray:
    """R-MAT edges packed as int64 keys ``dst * N + src``, generated chunk by chunk."""
    n, e = 1 << scale, edge_factor << scale
    key = np.empty(e, dtype=np.int64)
    # uint32 permutation: half the cache footprint of int64 for the random gathers below.
    perm = _rng(seed, _S_PERM).permutation(n).astype(np.uint32) if permute else None
    for k, lo in enumerate(range(0, e, EDGE_CHUNK)):
        hi = min(lo + EDGE_CHUNK, e)
        s, d = _rmat_chunk(_rng(seed, _S_EDGES, k), hi - lo, scale, a, b, c)
        if perm is not None:
            s, d = perm[s], perm[d]
        part = key[lo:hi]
        np.multiply(d, np.int64(n), out=part, dtype=np.int64)
        part += s
    return key


def _uniform_keys(scale: int, edge_factor: int, seed: int) -> np.ndarray:
    """Uniform random edges packed as int64 keys ``dst * N + src``."""
    n, e = 1 << scale, edge_factor << scale
    key = np.empty(e, dtype=np.int64)
    for k, lo in enumerate(range(0, e, EDGE_CHUNK)):
        hi = min(lo + EDGE_CHUNK, e)
        rng = _rng(seed, _S_EDGES, k)
        s = rng.integers(0, n, hi - lo)
        d = rng.integers(0, n, hi - lo)
        d *= n
        d += s
        key[lo:hi] = d
    return key


def rmat_edges(scale: int, edge_factor: int = 16, a: float = 0.57, b: float = 0.19,
               c: float = 0.19, seed: int = 0, permute: bool = True
               ) -> tuple[np.ndarray, np.ndarray]:
    """R-MAT edge list as ``(src, dst)`` int64 arrays of length ``edge_factor * 2**scale``.

    The same edges (in the same order) that :func:`rmat_dataset` builds its graph from.

    Args:
        scale: ``log2`` of the number of nodes.
        edge_factor: edges per node.
        a, b, c: quadrant probabilities (``d = 1 - a - b - c``), Graph500 defaults.
        seed: seed of every random stream.
        permute: relabel node ids with a seeded random permutation.

    Raises:
        ValueError: on out-of-range parameters.
    """
    _check_common(scale, edge_factor, 1, 1, 0, 0, 0, "float32", seed)
    _check_abc(a, b, c)
    dst, src = np.divmod(_rmat_keys(scale, edge_factor, a, b, c, seed, permute), 1 << scale)
    return src, dst


def uniform_edges(scale: int, edge_factor: int = 16, seed: int = 0
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Uniform random edge list: both endpoints uniform over ``[0, 2**scale)``."""
    _check_common(scale, edge_factor, 1, 1, 0, 0, 0, "float32", seed)
    dst, src = np.divmod(_uniform_keys(scale, edge_factor, seed), 1 << scale)
    return src, dst


# ---------------------------------------------------------------------------- assembly
def _csr_from_keys(key: np.ndarray, n: int, *, dedup: bool, self_loops: bool,
                   weighted: bool, seed: int) -> CSRGraph:
    """Sorted CSR (row = dst) from ``dst * N + src`` keys; sorts ``key`` in place."""
    if not self_loops:
        keep = np.empty(key.size, dtype=bool)
        for lo in range(0, key.size, _WORK_CHUNK):              # bounded temporaries
            part = key[lo:lo + _WORK_CHUNK]
            np.not_equal(part // n, part % n, out=keep[lo:lo + _WORK_CHUNK])
        key = key[keep]
        del keep
    key.sort()
    if dedup and key.size > 1:
        keep = np.empty(key.size, dtype=bool)
        keep[0] = True
        np.not_equal(key[1:], key[:-1], out=keep[1:])
        key = key[keep]
        del keep
    e = key.size
    idx_dtype = np.int32 if n < 2 ** 31 else np.int64
    indices = np.empty(e, dtype=idx_dtype)
    for lo in range(0, e, _WORK_CHUNK):                          # bounded temporaries
        indices[lo:lo + _WORK_CHUNK] = key[lo:lo + _WORK_CHUNK] % n
    # Row v starts at the first key >= v * N (keys are sorted).
    bounds = np.arange(n + 1, dtype=np.int64)
    bounds *= n
    indptr = np.searchsorted(key, bounds).astype(np.int64, copy=False)
    del key, bounds
    weights = None
    if weighted:
        # Uniform in (0.1, 1.0]; drawn after sorting (i.i.d., so no need to follow the sort).
        weights = np.empty(e, dtype=np.float32)
        for k, lo in enumerate(range(0, e, EDGE_CHUNK)):
            part = weights[lo:lo + EDGE_CHUNK]
            _rng(seed, _S_WEIGHTS, k).random(out=part, dtype=np.float32)
            np.subtract(np.float32(1.0), part * np.float32(0.9), out=part)
        weights = torch.from_numpy(weights)
    return CSRGraph(torch.from_numpy(indptr), torch.from_numpy(indices), weights)


def _features(n: int, feat_dim: int, feat_dtype: str, seed: int) -> torch.Tensor:
    out = torch.empty((n, feat_dim), dtype=_FEAT_DTYPES[feat_dtype])
    rows = max(1, _FEAT_CHUNK_ELEMS // feat_dim)
    for k, lo in enumerate(range(0, n, rows)):
        hi = min(lo + rows, n)
        g = torch.Generator().manual_seed(int(seed) * 1_000_003 + _S_FEATS * 10_007 + k)
        if out.dtype == torch.float32:
            torch.rand((hi - lo, feat_dim), generator=g, out=out[lo:hi])
        else:
            out[lo:hi] = torch.rand((hi - lo, feat_dim), generator=g)
    return out


def _planted_labels(features: torch.Tensor, num_classes: int, seed: int) -> torch.Tensor:
    """Labels from a seeded linear rule of each vertex's own features:
    ``argmax_c ((x - 0.5) @ P)[c]`` with ``P`` an ``(F, C)`` Gaussian matrix, computed chunk-wise.

    A model can learn them (so a demo's accuracy rises above chance), while the graph, features
    and splits stay exactly as random as before.
    """
    n, f = features.shape
    proj = torch.from_numpy(_rng(seed, _S_LABELS).standard_normal((f, num_classes))).float()
    labels = torch.empty(n, dtype=torch.int64)
    rows = max(1, _FEAT_CHUNK_ELEMS // max(f, num_classes))
    for lo in range(0, n, rows):
        x = features[lo:lo + rows].float() - 0.5
        labels[lo:lo + rows] = (x @ proj).argmax(dim=1)
    return labels


def _assemble(name: str, kind: str, graph: CSRGraph, *, feat_dim: int, feat_dtype: str,
              num_classes: int, train_frac: float, val_frac: float, test_frac: float,
              seed: int, meta: dict) -> Dataset:
    n = graph.num_nodes
    features = _features(n, feat_dim, feat_dtype, seed)
    labels = _planted_labels(features, num_classes, seed)
    order = _rng(seed, _S_SPLIT).permutation(n)
    n_tr, n_va, n_te = (int(round(f * n)) for f in (train_frac, val_frac, test_frac))
    n_te = min(n_te, n - n_tr - n_va)
    train_idx, val_idx, test_idx = (
        torch.from_numpy(np.sort(part)) for part in
        (order[:n_tr], order[n_tr:n_tr + n_va], order[n_tr + n_va:n_tr + n_va + n_te]))
    meta = dict(meta, generator=kind, seed=int(seed), feat_dim=int(feat_dim),
                feat_dtype=feat_dtype, train_frac=float(train_frac), val_frac=float(val_frac),
                test_frac=float(test_frac))
    return Dataset(name, graph, features, labels, train_idx, val_idx, test_idx,
                   int(num_classes), meta)


def rmat_dataset(scale: int = 20, edge_factor: int = 16, *, a: float = 0.57, b: float = 0.19,
                 c: float = 0.19, feat_dim: int = 128, feat_dtype: str = "float32",
                 num_classes: int = 16, train_frac: float = 0.01, val_frac: float = 0.05,
                 test_frac: float = 0.05, seed: int = 0, dedup: bool = False,
                 self_loops: bool = True, weighted: bool = True,
                 name: Optional[str] = None) -> Dataset:
    """A seeded R-MAT dataset with ``2**scale`` nodes and ``edge_factor * 2**scale`` edges.

    Row ``v`` lists the R-MAT sources of the edges into ``v``; both the row lengths and the
    in-degrees follow R-MAT's skewed distribution (max degree is hundreds of times the mean).

    Args:
        scale: ``log2`` of the number of nodes N.
        edge_factor: directed edges per node before ``dedup``/``self_loops`` filtering.
        a, b, c: R-MAT quadrant probabilities (``d = 1 - a - b - c``).
        feat_dim: feature dimension F; features are uniform in ``[0, 1)``.
        feat_dtype: ``"float32"`` or ``"float16"``.
        num_classes: number of label classes (planted by a linear rule of the features).
        train_frac, val_frac, test_frac: disjoint split fractions of N.
        seed: seed; the same arguments always give the same dataset.
        dedup: drop repeated ``(row, neighbour)`` pairs.
        self_loops: keep edges ``v -> v``.
        weighted: attach uniform ``(0.1, 1.0]`` float32 edge weights.
        name: dataset name, default ``"rmat-<scale>"``.

    Returns:
        A :class:`~fgnn.data.Dataset`. Shapes: features ``(N, F)``, labels ``(N,)``.

    Raises:
        ValueError: on an out-of-range parameter (named with its value).
    """
    _check_common(scale, edge_factor, feat_dim, num_classes, train_frac, val_frac, test_frac,
                  feat_dtype, seed)
    _check_abc(a, b, c)
    graph = _csr_from_keys(_rmat_keys(scale, edge_factor, a, b, c, seed), 1 << scale,
                           dedup=dedup, self_loops=self_loops, weighted=weighted, seed=seed)
    meta = dict(scale=int(scale), edge_factor=int(edge_factor), a=float(a), b=float(b),
                c=float(c), dedup=bool(dedup), self_loops=bool(self_loops))
    return _assemble(name or f"rmat-{scale}", "rmat", graph, feat_dim=feat_dim,
                     feat_dtype=feat_dtype, num_classes=num_classes, train_frac=train_frac,
                     val_frac=val_frac, test_frac=test_frac, seed=seed, meta=meta)


def uniform_dataset(scale: int = 20, edge_factor: int = 16, *, feat_dim: int = 128,
                    feat_dtype: str = "float32", num_classes: int = 16,
                    train_frac: float = 0.01, val_frac: float = 0.05, test_frac: float = 0.05,
                    seed: int = 0, dedup: bool = False, self_loops: bool = True,
                    weighted: bool = True, name: Optional[str] = None) -> Dataset:
    """A seeded uniform random dataset (no degree skew); same arguments as
    :func:`rmat_dataset` minus ``a, b, c``. Default name ``"uniform-<scale>"``."""
    _check_common(scale, edge_factor, feat_dim, num_classes, train_frac, val_frac, test_frac,
                  feat_dtype, seed)
    graph = _csr_from_keys(_uniform_keys(scale, edge_factor, seed), 1 << scale,
                           dedup=dedup, self_loops=self_loops, weighted=weighted, seed=seed)
    meta = dict(scale=int(scale), edge_factor=int(edge_factor), dedup=bool(dedup),
                self_loops=bool(self_loops))
    return _assemble(name or f"uniform-{scale}", "uniform", graph, feat_dim=feat_dim,
                     feat_dtype=feat_dtype, num_classes=num_classes, train_frac=train_frac,
                     val_frac=val_frac, test_frac=test_frac, seed=seed, meta=meta)


def estimate_bytes(scale: int = 20, edge_factor: int = 16, *, feat_dim: int = 128,
                   feat_dtype: str = "float32", num_classes: int = 16, train_frac: float = 0.01,
                   val_frac: float = 0.05, test_frac: float = 0.05, seed: int = 0,
                   dedup: bool = False, self_loops: bool = True, weighted: bool = True,
                   a: float = 0.57, b: float = 0.19, c: float = 0.19) -> int:
    """Peak host bytes :func:`rmat_dataset` / :func:`uniform_dataset` allocate, computed from the
    parameters alone (nothing is generated); the arguments and defaults are theirs.

    With ``N = 2**scale`` and ``E = edge_factor * N`` the peak is the largest of three phases:

    * drawing: the ``(E,)`` int64 keys plus the permutation, ``8E + 12N``;
    * CSR assembly: the keys, one filtered copy (plus mask) each for ``self_loops=False`` and
      ``dedup=True``, the indices, edge weights and row pointers,
      ``8E + 9E [+ 9E] + iE + 4E + 16N`` (``i`` = 4 for int32 indices, 8 past ``2**31`` nodes);
    * features: the finished graph ``8N + iE + 4E``, features ``N F s`` (``s`` bytes per value),
      the NaN scan's ``N F`` mask, labels, split permutation and chunk temporaries.

    Raises:
        ValueError: on an out-of-range parameter, as the generators do.
    """
    _check_common(scale, edge_factor, feat_dim, num_classes, train_frac, val_frac, test_frac,
                  feat_dtype, seed)
    n, e = 1 << scale, edge_factor << scale
    idx = 4 if n < 2 ** 31 else 8
    w = 4 * e if weighted else 0
    drawing = 8 * e + 12 * n
    filtered = (0 if self_loops else 9 * e) + (9 * e if dedup else 0)
    assembly = 8 * e + filtered + idx * e + w + 16 * n
    itemsize = 2 if feat_dtype == "float16" else 4
    graph = 8 * (n + 1) + idx * e + w
    features = (graph + n * feat_dim * (itemsize + 1) + 24 * n
                + 12 * min(n * feat_dim, _FEAT_CHUNK_ELEMS))
    return int(max(drawing, assembly, features))

