"""The numba loops of :mod:`fgnn.sampling.khop_compiled` (internal; imports numba).

Module-level functions so that numba can cache their machine code beside this file.
"""

from __future__ import annotations

import numpy as np
from numba import njit, uint64

_GOLDEN = uint64(0x9E3779B97F4A7C15)  # splitmix64's increment
_M1 = uint64(0xBF58476D1CE4E5B9)
_M2 = uint64(0x94D049BB133111EB)


@njit(nogil=True, cache=True)
def bounds(indptr, rows, k):  # pragma: no cover - compiled
    """``(start, deg, cnt)``: each row's CSR start and degree, and the prefix sums of
    ``min(deg, k)`` (``cnt[i]`` = the first output edge of row ``i``)."""
    r_n = rows.shape[0]
    start = np.empty(r_n, np.int64)
    deg = np.empty(r_n, np.int64)
    for i in range(r_n):  # independent reads: they overlap
        r = rows[i]
        s = indptr[r]
        start[i] = s
        deg[i] = indptr[r + 1] - s
    cnt = np.empty(r_n + 1, np.int64)
    cnt[0] = 0
    for i in range(r_n):
        d = deg[i]
        cnt[i + 1] = cnt[i] + (d if d < k else k)
    return start, deg, cnt


@njit(nogil=True, cache=True)
def fill(indices, start, deg, cnt, k, seed, lo, hi, nbr, dst):  # pragma: no cover - compiled
    """Rows ``lo..hi-1``: their sampled neighbours into ``nbr[cnt[lo]:cnt[hi]]`` and their row
    into ``dst``; Floyd's algorithm for the rows with ``deg > k``, splitmix64 from ``seed``."""
    st = uint64(seed)
    for i in range(lo, hi):
        s, d, o = start[i], deg[i], cnt[i]
        if d <= k:
            for t in range(d):
                nbr[o + t] = s + t
                dst[o + t] = i
            continue
        for t in range(k):  # Floyd: step t draws c in [0, j]; keeps j if c was taken
            j = d - k + t
            st += _GOLDEN
            x = st
            x = (x ^ (x >> uint64(30))) * _M1
            x = (x ^ (x >> uint64(27))) * _M2
            x = (x ^ (x >> uint64(31))) >> uint64(32)
            c = s + np.int64((x * uint64(j + 1)) >> uint64(32))
            for q in range(o, o + t):
                if nbr[q] == c:
                    c = s + j
                    break
            nbr[o + t] = c
            dst[o + t] = i
    for e in range(cnt[lo], cnt[hi]):  # the random reads, once every position is known
        nbr[e] = indices[nbr[e]]


@njit(nogil=True, cache=True)
def remap(scratch, cand, size, empty, out, new):  # pragma: no cover - compiled
    """Local ids of ``cand`` into ``out``; unseen vertices get ``size, size + 1, ...`` in
    order of first appearance (into ``scratch`` and ``new``). Returns ``(new vertices, bad)``:
    ``bad`` is the first position of an id outside ``[0, len(scratch))`` (the loop stops
    there), else -1."""
    n = 0
    num = scratch.shape[0]
    for e in range(cand.shape[0]):
        v = cand[e]
        if v < 0 or v >= num:
            return n, e
        local = scratch[v]
        if local == empty:
            local = size + n
            scratch[v] = local
            new[n] = v
            n += 1
        out[e] = local
    return n, -1
