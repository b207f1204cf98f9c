"""The compiled CPU twin: uniform k-hop selection and the remap as numba loops (issue 28).

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
* :func:`remap_compiled` numbers the vertices of a hop in order of first appearance in one pass
  over the candidates (one scratch read per edge, one write per new vertex), exactly the
  numbering of the vectorised remap.

The random numbers are splitmix64 (Steele et al., OOPSLA 2014) seeded from one draw of the
caller's torch generator per hop, so a seed reproduces the sample; a draw in ``[0, j]`` is
Lemire's multiply-shift on 32 random bits (bias below ``j / 2**32``).

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

__all__ = ["MIN_EDGES", "available", "remap_compiled", "uniform_compiled"]

#: Hops with fewer candidate edges (rows x fanout) stay on the vectorised twin unless forced.
MIN_EDGES = 1 << 16

#: Rows per thread below which a hop runs on one thread.
_ROWS_PER_THREAD = 4096

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

    return {"bounds": loops.bounds, "fill": loops.fill, "remap": loops.remap}


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
    n_threads = _threads(r.shape[0])
    cuts = [r.shape[0] * t // n_threads for t in range(n_threads + 1)]
    parts = list(zip(cuts[:-1], cuts[1:]))
    seeds = [(seed + 0x632BE59BD9B4E019 * t) & ((1 << 63) - 1) for t in range(n_threads)]
    if n_threads == 1:
        kern["fill"](indices.numpy(), start, deg, cnt, int(fanout), seeds[0], 0, r.shape[0],
                     nbr, dst)
    else:
        _pool_map(kern["fill"], indices.numpy(), start, deg, cnt, int(fanout), seeds, parts,
                  nbr, dst)
    return torch.from_numpy(nbr), torch.from_numpy(dst)


def _pool_map(fill: Any, indices: np.ndarray, start: np.ndarray, deg: np.ndarray,
              cnt: np.ndarray, k: int, seeds: list[int], parts: list[tuple[int, int]],
              nbr: np.ndarray, dst: np.ndarray) -> None:
    """Run ``fill`` over the row ranges ``parts`` on the shared thread pool (GIL released)."""
    pool = shared_pool("sample", len(parts))
    futures = [pool.submit(fill, indices, start, deg, cnt, k, s, lo, hi, nbr, dst)
               for s, (lo, hi) in zip(seeds, parts)]
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
