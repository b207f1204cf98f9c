"""The numba loops of :mod:`fgnn.sampling.khop_compiled` (internal; imports numba).

Module-level functions so that numba can cache their machine code beside this file.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, uint64

_GOLDEN = uint64(0x9E3779B97F4A7C15)  # splitmix64's increment
_M1 = uint64(0xBF58476D1CE4E5B9)
_M2 = uint64(0x94D049BB133111EB)
_LOW32 = uint64(0xFFFFFFFF)
_TWO_M32 = 1.0 / 4294967296.0  # 2**-32
_TWO_M53 = 1.0 / 9007199254740992.0  # 2**-53


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
def _next(st):  # pragma: no cover - compiled
    """splitmix64: ``(next state, 64 random bits)``."""
    st += _GOLDEN
    x = st
    x = (x ^ (x >> uint64(30))) * _M1
    x = (x ^ (x >> uint64(27))) * _M2
    return st, x ^ (x >> uint64(31))


@njit(nogil=True, cache=True)
def weighted_fill(indices, weights, rows, row_max, start, deg, cnt, k, keys_deg, budget, seed,
                  lo, hi, nbr, dst, got):  # pragma: no cover - compiled
    """Rows ``lo..hi-1`` of a weighted hop: row ``i``'s picks into ``nbr[cnt[i]:cnt[i] +
    got[i]]`` (neighbour ids) and ``dst`` (``i``), in the order successive sampling drew them;
    splitmix64 from ``seed``.

    A row with ``deg <= k`` keeps its positive-weight edges (CSR order). A row with ``k < deg
    <= keys_deg`` draws by Efraimidis-Spirakis keys ``E_j / w_j`` (``E_j`` exponential): the
    ``k`` smallest over its positive-weight edges. A larger row first makes up to ``budget``
    rejection proposals (a uniform offset ``j``, accepted with probability ``w_j /
    row_max[row]`` unless picked already: each accepted one is the next draw of successive
    sampling), then, if still short, finishes with keys over its unpicked edges.
    """
    st = uint64(seed)
    keys = np.empty(max(k, 1), np.float64)  # the smallest keys so far, ascending
    offs = np.empty(max(k, 1), np.int64)  # their offsets
    taken = np.empty(max(k, 1), np.int64)  # the rejection picks' offsets, sorted
    for i in range(lo, hi):
        s, d, o = start[i], deg[i], cnt[i]
        if d <= k:
            got[i] = _keep_positive(weights, s, d, o, nbr)
            continue
        m = 0
        if d > keys_deg:
            st, m = _reject(weights, np.float64(row_max[rows[i]]), s, d, o, k, budget, st, nbr)
        if m < k:  # keys over the unpicked positive-weight edges, the m picks skipped
            st, m = _keys_rest(weights, s, d, o, m, k, st, nbr, keys, offs, taken)
        got[i] = m
    for i in range(lo, hi):  # the random reads, once every position is known
        o = cnt[i]
        for e in range(o, o + got[i]):
            nbr[e] = indices[nbr[e]]
            dst[e] = i


@njit(nogil=True, cache=True)
def _keep_positive(weights, s, d, o, nbr):  # pragma: no cover - compiled
    """A row of at most ``k`` neighbours: its positive-weight edges' positions into
    ``nbr[o:]``, in CSR order; returns their count."""
    m = 0
    for t in range(d):
        if weights[s + t] > 0:
            nbr[o + m] = s + t
            m += 1
    return m


@njit(nogil=True, cache=True)
def _reject(weights, wmax, s, d, o, k, budget, st, nbr):  # pragma: no cover - compiled
    """Up to ``budget`` rejection proposals on the row at ``s`` (``d`` edges, largest weight
    ``wmax``): offset ``j`` uniform, accepted with probability ``w_j / wmax`` unless picked
    already; the picks into ``nbr[o:]`` in draw order. Returns ``(state, picks)``."""
    m = 0
    p = 0
    while m < k and p < budget and wmax > 0:
        p += 1
        st, x = _next(st)
        c = s + np.int64(((x >> uint64(32)) * uint64(d)) >> uint64(32))
        if np.float64(x & _LOW32) * _TWO_M32 * wmax < weights[c]:
            fresh = True
            for q in range(o, o + m):
                if nbr[q] == c:
                    fresh = False
                    break
            if fresh:
                nbr[o + m] = c
                m += 1
    return st, m


@njit(nogil=True, cache=True)
def _keys_rest(weights, s, d, o, m, k, st, nbr, keys, offs, taken):  # pragma: no cover
    """The row's remaining ``k - m`` draws by Efraimidis-Spirakis keys ``E_j / w_j`` over its
    positive-weight edges not among its ``m`` picks in ``nbr[o:o + m]``: the smallest keys,
    appended in ascending order. Returns ``(state, picks)``."""
    for q in range(m):  # insertion sort of the picks' offsets (m < k, small)
        v = nbr[o + q] - s
        r = q
        while r > 0 and taken[r - 1] > v:
            taken[r] = taken[r - 1]
            r -= 1
        taken[r] = v
    need = k - m
    n = 0
    ptr = 0
    for t in range(d):
        if ptr < m and taken[ptr] == t:
            ptr += 1
            continue
        w = weights[s + t]
        if not w > 0:
            continue
        st, x = _next(st)
        key = -math.log(np.float64((x >> uint64(11)) + uint64(1)) * _TWO_M53) / w
        if n == need:
            if key >= keys[n - 1]:
                continue
            r = n - 1
        else:
            r = n
            n += 1
        while r > 0 and keys[r - 1] > key:
            keys[r] = keys[r - 1]
            offs[r] = offs[r - 1]
            r -= 1
        keys[r] = key
        offs[r] = t
    for q in range(n):
        nbr[o + m + q] = s + offs[q]
    return st, m + n


@njit(nogil=True, cache=True)
def compact(nbr, dst, cnt, got):  # pragma: no cover - compiled
    """Move row ``i``'s ``got[i]`` edges from ``cnt[i]`` to follow row ``i - 1``'s, in place;
    returns the number of edges."""
    n = 0
    for i in range(cnt.shape[0] - 1):
        for e in range(cnt[i], cnt[i] + got[i]):
            nbr[n] = nbr[e]
            dst[n] = dst[e]
            n += 1
    return n


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
