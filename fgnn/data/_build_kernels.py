"""Compiled loops of the out-of-core builder (:mod:`fgnn.data.outofcore`).

Every random number is a counter-based hash (SplitMix64 of a stream key plus an index), so an
edge, a feature value or a split draw depends only on the seed and its own index, never on how
the work is cut into chunks, threads or passes: a build under a tiny memory cap writes the same
bytes as one under a large one.

Edge endpoints are drawn in *rank* space from a continuous Zipf law of exponent ``skew`` over
``[0, N)`` with a head offset (inverse CDF in closed form, one hash per endpoint), then mapped to
vertex ids by an affine bijection ``id = (mult * rank + offset) mod N`` so the hubs spread over
the id space. A vertex's class is ``rank mod C``; with probability ``homophily`` an edge's source
is moved to the destination's class (the nearest rank of that class, so its degree law holds).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

__all__ = ["stream_key", "dst_ids", "rmat_dst_ids", "rmat_fill_rows", "count_rows", "fill_rows", "sort_rows", "write_features",
           "split_codes", "class_of_ids", "edge_weights", "rows_sorted"]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_TO_UNIT = 1.0 / 9007199254740992.0                              # 2**-53


@njit(cache=True, inline="always")
def _mix(x: np.uint64) -> np.uint64:
    z = x + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


@njit(cache=True, inline="always")
def _unit(key: np.uint64, i: np.int64) -> float:
    """Uniform in ``[0, 1)`` for index ``i`` of stream ``key``."""
    return float(_mix(key + np.uint64(i)) >> np.uint64(11)) * _TO_UNIT


def stream_key(seed: int, stream: int) -> np.uint64:
    """The key of one random stream of a build (seed and purpose), as numpy ``uint64`` (a
    Python int would reach the kernels as int64 for half the keys)."""
    mask = (1 << 64) - 1
    z = ((int(seed) * 0x1_0000 + int(stream)) + 0x9E3779B97F4A7C15) & mask
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
    return np.uint64(z ^ (z >> 31))


@njit(cache=True, inline="always")
def _rank(u: float, n: np.int64, one_minus: float, head: float, base: float,
          span: float) -> np.int64:
    """Inverse CDF of the Zipf law ``w(r) ~ (r + head)^-skew`` on ``[0, n)``."""
    if one_minus >= 1.0:                                          # skew 0: uniform
        r = np.int64(u * n)
    else:
        r = np.int64((u * span + base) ** (1.0 / one_minus) - head)
    if r < 0:
        r = 0
    if r >= n:
        r = n - 1
    return r


@njit(cache=True, inline="always")
def _to_id(rank: np.int64, n: np.int64, mult: np.int64, offset: np.int64) -> np.int64:
    return (mult * rank + offset) % n


@njit(cache=True, inline="always")
def _dst_rank(e: np.int64, n: np.int64, kd: np.uint64, om: float, head: float, base: float,
              span: float) -> np.int64:
    return _rank(_unit(kd, e), n, om, head, base, span)


@njit(cache=True, inline="always")
def _src_rank(e: np.int64, dst_rank: np.int64, n: np.int64, classes: np.int64, homophily: float,
              ks: np.uint64, kh: np.uint64, om: float, head: float, base: float,
              span: float) -> np.int64:
    r = _rank(_unit(ks, e), n, om, head, base, span)
    if homophily > 0.0 and _unit(kh, e) < homophily:
        r = r - r % classes + dst_rank % classes
        if r >= n:
            r -= classes
    return r


@njit(cache=True, parallel=True)
def dst_ids(lo: np.int64, n: np.int64, mult: np.int64, offset: np.int64, kd: np.uint64,
            om: float, head: float, base: float, span: float, out: np.ndarray) -> None:
    """``out[i]`` = destination id of edge ``lo + i``."""
    for i in prange(out.size):
        out[i] = _to_id(_dst_rank(lo + i, n, kd, om, head, base, span), n, mult, offset)


@njit(cache=True)
def count_rows(dst: np.ndarray, counts: np.ndarray) -> None:
    """``counts[d] += 1`` for every ``d`` of ``dst`` (row lengths of the CSR by destination)."""
    for i in range(dst.size):
        counts[dst[i]] += 1


@njit(cache=True)
def fill_rows(lo: np.int64, dst: np.ndarray, n: np.int64, classes: np.int64, homophily: float,
              mult: np.int64, offset: np.int64, ks: np.uint64, kh: np.uint64, om: float,
              head: float, base: float, span: float, inv_mult: np.int64, row_lo: np.int64,
              row_hi: np.int64, cursor: np.ndarray, out: np.ndarray) -> None:
    """Scatter the sources of edges ``lo .. lo + len(dst) - 1`` (destinations ``dst``) whose
    destination lies in ``[row_lo, row_hi)`` into ``out`` at ``cursor[dst - row_lo]``, which
    advances."""
    for i in range(dst.size):
        d = dst[i]
        if d < row_lo or d >= row_hi:
            continue
        dr = _rank_of(d, n, inv_mult, offset)
        s = _to_id(_src_rank(lo + i, dr, n, classes, homophily, ks, kh, om, head, base, span),
                   n, mult, offset)
        k = d - row_lo
        out[cursor[k]] = s
        cursor[k] += 1


@njit(cache=True, inline="always")
def _rmat_pair(e: np.int64, scale: np.int64, key: np.uint64, a: float, ab: float,
               abc: float) -> tuple:
    """R-MAT ranks ``(src, dst)`` of edge ``e`` (Chakrabarti et al., SDM 2004, §3): one
    quadrant draw per bit, each a 16-bit slice of a hash (four bits per hash)."""
    s = np.int64(0)
    d = np.int64(0)
    h = np.uint64(0)
    words = (scale + 3) // 4
    for level in range(scale):
        if level % 4 == 0:
            h = _mix(key + np.uint64(e * words + level // 4))
        u = float(h & np.uint64(0xFFFF)) * (1.0 / 65536.0)
        h = h >> np.uint64(16)
        s = s * 2 + (1 if u >= ab else 0)
        d = d * 2 + (1 if (a <= u < ab) or u >= abc else 0)
    return s, d


@njit(cache=True, parallel=True)
def rmat_dst_ids(lo: np.int64, n: np.int64, mult: np.int64, offset: np.int64, scale: np.int64,
                 key: np.uint64, a: float, ab: float, abc: float, out: np.ndarray) -> None:
    """``out[i]`` = destination id of R-MAT edge ``lo + i``."""
    for i in prange(out.size):
        out[i] = _to_id(_rmat_pair(lo + i, scale, key, a, ab, abc)[1], n, mult, offset)


@njit(cache=True)
def rmat_fill_rows(lo: np.int64, dst: np.ndarray, n: np.int64, mult: np.int64,
                   offset: np.int64, scale: np.int64, key: np.uint64, a: float, ab: float,
                   abc: float, row_lo: np.int64, row_hi: np.int64, cursor: np.ndarray,
                   out: np.ndarray) -> None:
    """:func:`fill_rows` for R-MAT edges: the source is drawn again from the edge's hashes."""
    for i in range(dst.size):
        d = dst[i]
        if d < row_lo or d >= row_hi:
            continue
        s = _to_id(_rmat_pair(lo + i, scale, key, a, ab, abc)[0], n, mult, offset)
        k = d - row_lo
        out[cursor[k]] = s
        cursor[k] += 1


@njit(cache=True, parallel=True)
def sort_rows(starts: np.ndarray, values: np.ndarray) -> None:
    """Sort ``values[starts[i]:starts[i + 1]]`` for every row ``i`` in place."""
    for i in prange(starts.size - 1):
        a, b = starts[i], starts[i + 1]
        if b - a > 1:
            values[a:b] = np.sort(values[a:b])


@njit(cache=True)
def rows_sorted(indptr: np.ndarray, indices: np.ndarray, lo: np.int64, hi: np.int64) -> np.int64:
    """The first position in rows ``lo .. hi - 1`` where ``indices`` decreases within a row,
    or -1."""
    for r in range(lo, hi):
        for p in range(indptr[r] + 1, indptr[r + 1]):
            if indices[p] < indices[p - 1]:
                return p
    return -1


@njit(cache=True, inline="always")
def _rank_of(v: np.int64, n: np.int64, inv_mult: np.int64, offset: np.int64) -> np.int64:
    return (inv_mult * ((v - offset) % n)) % n


@njit(cache=True, parallel=True)
def class_of_ids(lo: np.int64, hi: np.int64, n: np.int64, classes: np.int64, inv_mult: np.int64,
                 offset: np.int64, out: np.ndarray) -> None:
    """``out[i] = class of vertex lo + i`` (its rank mod C)."""
    for i in prange(hi - lo):
        out[i] = _rank_of(lo + i, n, inv_mult, offset) % classes


@njit(cache=True, parallel=True)
def write_features(lo: np.int64, n: np.int64, classes: np.int64, inv_mult: np.int64,
                   offset: np.int64, centroids: np.ndarray, signal: float, kf: np.uint64,
                   out: np.ndarray) -> None:
    """Rows ``lo .. lo + len(out) - 1``: ``signal * centroid[class] + noise``, noise uniform in
    ``[-1, 1)`` (hash of the element's flat index), cast to ``out``'s dtype."""
    f = out.shape[1]
    for i in prange(out.shape[0]):
        v = lo + i
        c = _rank_of(v, n, inv_mult, offset) % classes
        flat = v * f
        for j in range(f):
            out[i, j] = signal * centroids[c, j] + 2.0 * _unit(kf, flat + j) - 1.0


@njit(cache=True, parallel=True)
def split_codes(lo: np.int64, hi: np.int64, ksplit: np.uint64, train: float, val: float,
                test: float, out: np.ndarray) -> None:
    """``out[i]`` = 0 train, 1 val, 2 test, 3 none for vertex ``lo + i`` (one draw each)."""
    for i in prange(hi - lo):
        u = _unit(ksplit, lo + i)
        out[i] = 0 if u < train else (1 if u < train + val else (2 if u < train + val + test
                                                                 else 3))


@njit(cache=True, parallel=True)
def edge_weights(lo: np.int64, kw: np.uint64, out: np.ndarray) -> None:
    """Uniform ``(0.1, 1.0]`` weights of edge positions ``lo .. lo + len(out) - 1``."""
    for i in prange(out.size):
        out[i] = 1.0 - 0.9 * _unit(kw, lo + i)

