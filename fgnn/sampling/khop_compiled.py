"""The compiled CPU twin: uniform and weighted k-hop selection and the remap as numba loops
(issue 28).

On a CPU the vectorised twin (:mod:`fgnn.sampling.khop_cpu`) pays for every edge in about a
dozen full-width torch passes (draws, Floyd's comparisons, expansions, concatenations, casts),
and the remap (:class:`~fgnn.sampling.remap.Remapper`) in five more. Here each is one loop over
the edges, compiled by numba (a wheel on PyPI: no build step at install), so an edge costs a few
memory accesses:

* :func:`uniform_compiled` runs Floyd's algorithm per row (``deg > fanout``) on a small register
  window, the rows with ``deg <= fanout`` copy their neighbours, and the CSR ``indices`` are read
  in a separate pass over the finished positions, so the random reads of a hop overlap instead
  of each waiting on its row's ``indptr`` read. Several torch threads split the rows; the
  compiled loops release the GIL.
* :func:`weighted_compiled` draws each row by successive sampling without replacement (see its
  docstring: keys for rows up to twice the fanout, rejection then keys above), rows split over
  threads the same way.
* :func:`remap_compiled` numbers the vertices of a hop in order of first appearance in one pass
  over the candidates (one scratch read per edge, one write per new vertex), exactly the
  numbering of the vectorised remap.

The random numbers are splitmix64 (Steele et al., OOPSLA 2014) seeded from one draw of the
caller's torch generator per hop, so a seed reproduces the sample; a draw in ``[0, j]`` is
Lemire's multiply-shift on 32 random bits (bias below ``j / 2**32``). Each thread's range of
rows has its own stream, so a seed reproduces a sample at one thread count.

numba is an optional dependency: without it (or with ``FGNN_COMPILED=0``) :func:`available` is
False and the vectorised twin serves. The first call compiles the loops (seconds; cached beside
this file, or in numba's user cache, for later processes); importing numba and loading the cache
costs about a second of CPU per process, so :func:`fgnn.sampling.kernels.kernel_for` takes this
twin only for hops of at least :data:`MIN_EDGES` candidate edges unless it is forced.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any, Optional

import numpy as np
import torch

from fgnn.threads import shared_pool

__all__ = ["MIN_EDGES", "available", "remap_compiled", "uniform_compiled", "weighted_compiled"]

#: Hops with fewer candidate edges (rows x fanout) stay on the vectorised twin unless forced.
MIN_EDGES = 1 << 16

#: Rows per thread below which a hop runs on one thread.
_ROWS_PER_THREAD = 4096

#: Weighted rows with at most this many times ``fanout`` neighbours draw by keys alone (O(deg),
#: one logarithm per edge); larger ones start with rejection proposals (O(fanout) each).
_KEYS_FACTOR = 2

_log = logging.getLogger("fgnn")
_lock = threading.Lock()
_kernels: Optional[dict[str, Any]] = None
_failed: Optional[str] = None
_found: Optional[bool] = None


def available() -> bool:
    """Whether the compiled twin can run here: numba importable and not disabled with
    ``FGNN_COMPILED=0``. Does not import numba (cheap to ask on every hop)."""
    if os.environ.get("FGNN_COMPILED", "1") == "0" or _failed is not None:
        return False
    global _found
    if _found is None:
        import importlib.util

        _found = importlib.util.find_spec("numba") is not None
    return _found


def _build() -> dict[str, Any]:
    """Import numba and compile (or load from its cache) the loops; once per process."""
    global _kernels, _failed
    with _lock:
        if _kernels is not None:
            return _kernels
        t0 = time.perf_counter()
        try:
            _kernels = _compile()
        except Exception as err:  # numba present but unusable: the vectorised twin serves
            _failed = f"{type(err).__name__}: {err}"
            raise RuntimeError(f"the compiled CPU sampling kernels failed to build ({_failed}); "
                               f"set FGNN_COMPILED=0 to use the vectorised ones") from err
        took = time.perf_counter() - t0
        if took > 2.0:
            _log.info("fgnn: compiled the CPU sampling kernels in %.1fs (cached for later runs)",
                      took)
        return _kernels


def _compile() -> dict[str, Any]:
    from fgnn.sampling import _numba_loops as loops

    return {"bounds": loops.bounds, "fill": loops.fill, "remap": loops.remap,
            "weighted_fill": loops.weighted_fill, "compact": loops.compact}


def _threads(rows: int) -> int:
    return max(1, min(torch.get_num_threads(), rows // _ROWS_PER_THREAD))


def uniform_compiled(indptr: torch.Tensor, indices: torch.Tensor, rows: torch.Tensor,
                     fanout: int, generator: Optional[torch.Generator]
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`fgnn.sampling.khop.sample_uniform` on CPU tensors, compiled: ``(neighbours,
    row_index)``, each row's edges contiguous and the rows in order; a row with ``deg <=
    fanout`` keeps all its neighbours in CSR order.

    Raises:
        RuntimeError: numba is installed but the loops do not compile (the message says how to
            turn the compiled twin off).
    """
    kern = _build()
    seed = int(torch.randint(0, 1 << 62, (1,), generator=generator))
    r = rows.contiguous().numpy()
    start, deg, cnt = kern["bounds"](indptr.numpy(), r, int(fanout))
    e = int(cnt[-1])
    nbr = np.empty(e, np.int64)
    dst = np.empty(e, np.int64)
    _run_parts(kern["fill"], (indices.numpy(), start, deg, cnt, int(fanout)), seed,
               r.shape[0], (nbr, dst))
    return torch.from_numpy(nbr), torch.from_numpy(dst)


def weighted_compiled(indptr: torch.Tensor, indices: torch.Tensor, weights: torch.Tensor,
                      rows: torch.Tensor, fanout: int, generator: Optional[torch.Generator],
                      row_max: torch.Tensor, max_rounds: int
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`fgnn.sampling.khop.sample_weighted` on CPU tensors, compiled: ``(neighbours,
    row_index)``, each row's edges contiguous and the rows in order.

    Every row follows successive sampling without replacement exactly (each draw picks an
    unpicked ``j`` with probability ``w_j / Σ_unpicked w``; weight-0 edges never):

    * ``deg <= fanout``: the row keeps its positive-weight edges, in CSR order;
    * ``fanout < deg <= 2 fanout``: Efraimidis-Spirakis keys, the ``fanout`` smallest
      ``E_j / w_j`` (``E_j`` exponential) over the positive-weight edges, in one pass over the
      row. The order of the keys is the order of successive sampling, and a row this short
      would make rejection slow at its last draws (most proposals hit picked edges);
    * ``deg > 2 fanout``: rejection against ``row_max`` as the vectorised twin does, O(fanout)
      work whatever the degree: a proposal (a uniform offset ``j``) is accepted with probability
      ``w_j / row_max[row]`` unless picked already, so an accepted one is exactly the next draw.
      A row still short after ``max_rounds * fanout`` proposals (skewed weights, few positive
      ones) finishes with keys over its unpicked edges, the exact continuation (stopping after
      a number of proposals is a stopping time of the sampling chain).

    The picks are listed in the order they were drawn (the first of a big row follows
    ``w_j / Σ w``). One 64-bit random number serves a proposal (32 bits for the offset, 32 for
    the acceptance: bias below ``deg / 2**32``) or a key (53 bits).

    Args:
        indptr, indices, weights: the CSR graph (``weights`` non-negative, one per edge).
        rows, fanout, generator, max_rounds: as :func:`~fgnn.sampling.khop.sample_weighted`.
        row_max: ``(N,)`` largest weight of each row (:func:`~fgnn.sampling.khop.
            row_max_weights`).

    Raises:
        RuntimeError: numba is installed but the loops do not compile.
    """
    kern = _build()
    seed = int(torch.randint(0, 1 << 62, (1,), generator=generator))
    r = rows.contiguous().numpy()
    k = int(fanout)
    start, deg, cnt = kern["bounds"](indptr.numpy(), r, k)
    e = int(cnt[-1])
    nbr = np.empty(e, np.int64)
    dst = np.empty(e, np.int64)
    got = np.empty(r.shape[0], np.int64)
    _run_parts(kern["weighted_fill"],
               (indices.numpy(), weights.contiguous().numpy(), r, row_max.contiguous().numpy(),
                start, deg, cnt, k, _KEYS_FACTOR * k, max(int(max_rounds), 0) * k),
               seed, r.shape[0], (nbr, dst, got))
    n = int(got.sum())
    if n < e:  # rows with weight-0 edges left gaps
        n = kern["compact"](nbr, dst, cnt, got)
        nbr, dst = nbr[:n].copy(), dst[:n].copy()
    return torch.from_numpy(nbr), torch.from_numpy(dst)


def _run_parts(fn: Any, head: tuple[Any, ...], seed: int, num_rows: int,
               tail: tuple[Any, ...]) -> None:
    """``fn(*head, seed_t, lo, hi, *tail)`` over ranges of the ``num_rows`` rows, one per thread
    (:func:`_threads`), on the shared thread pool (GIL released); range ``t`` gets its own
    random stream ``seed_t``."""
    n_threads = _threads(num_rows)
    cuts = [num_rows * t // n_threads for t in range(n_threads + 1)]
    seeds = [(seed + 0x632BE59BD9B4E019 * t) & ((1 << 63) - 1) for t in range(n_threads)]
    if n_threads == 1:
        fn(*head, seeds[0], 0, num_rows, *tail)
        return
    pool = shared_pool("sample", n_threads)
    futures = [pool.submit(fn, *head, s, lo, hi, *tail)
               for s, lo, hi in zip(seeds, cuts[:-1], cuts[1:])]
    for f in futures:
        f.result()


def remap_compiled(scratch: torch.Tensor, cand: torch.Tensor, size: int, empty: int
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """The remap of one hop on CPU tensors, compiled: ``(local ids (E,) int64, new vertices)``.

    ``scratch[v]`` holds the local id of every vertex in the sample and ``empty`` otherwise;
    vertices of ``cand`` not yet in the sample get ``size, size + 1, ...`` in order of their
    first position in ``cand`` (written into ``scratch``), as in
    :meth:`fgnn.sampling.remap.Remapper.add`.

    Raises:
        ValueError: an id of ``cand`` outside ``[0, len(scratch))`` (``scratch`` is left as
            it was).
    """
    kern = _build()
    c = cand.contiguous().numpy()
    out = np.empty(c.shape[0], np.int64)
    new = np.empty(c.shape[0], np.int64)
    s = scratch.numpy()
    n, bad = kern["remap"](s, c, int(size), int(empty), out, new)
    if bad >= 0:  # undo this hop's new entries, then name the id
        s[new[:n]] = empty
        raise ValueError(f"remap: vertex id {int(c[bad])} at position {bad} is outside "
                         f"[0, {s.shape[0]})")
    return torch.from_numpy(out), torch.from_numpy(new[:n].copy())
