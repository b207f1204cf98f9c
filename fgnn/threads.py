"""Thread pools shared within a process: one per (purpose, size), made on first use.

Host gathers (:mod:`fgnn.cache.feature_store`) and the compiled sampler
(:mod:`fgnn.sampling.khop_compiled`) split their work over threads that release the GIL; each
asks for its pool here by purpose, so the two never queue behind each other and neither makes
a pool per call.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

__all__ = ["shared_pool"]

_POOLS: dict[tuple[str, int], ThreadPoolExecutor] = {}
_LOCK = threading.Lock()


def shared_pool(purpose: str, threads: int) -> ThreadPoolExecutor:
    """The process's pool of ``threads`` workers for ``purpose`` (its threads are named
    ``fgnn-<purpose>``), made once and kept for the life of the process.

    Raises:
        ValueError: ``threads`` below 1.
    """
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a positive int, got {threads!r}")
    with _LOCK:
        pool = _POOLS.get((purpose, threads))
        if pool is None:
            pool = _POOLS[purpose, threads] = ThreadPoolExecutor(
                threads, thread_name_prefix=f"fgnn-{purpose}")
        return pool
