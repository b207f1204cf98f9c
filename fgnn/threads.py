"""Thread pools shared within a process: one per (purpose, size), made on first use.

Host gathers (:mod:`fgnn.cache.feature_store`) and the compiled sampler
(:mod:`fgnn.sampling.khop_compiled`) split their work over threads that release the GIL, and
the parameter server builds its optimizer on one while the job starts; each asks for its pool
here by purpose, so they never queue behind each other and none makes a pool per call.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

__all__ = ["THREAD_PREFIX", "shared_pool"]

#: The start of every shared pool thread's name.
THREAD_PREFIX = "fgnn-pool-"

_POOLS: dict[tuple[str, int], ThreadPoolExecutor] = {}
_LOCK = threading.Lock()


def shared_pool(purpose: str, threads: int) -> ThreadPoolExecutor:
    """The process's pool of ``threads`` workers for ``purpose`` (its threads are named
    ``fgnn-pool-<purpose>``), made once and kept for the life of the process.

    Raises:
        ValueError: ``threads`` below 1.
    """
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a positive int, got {threads!r}")
    with _LOCK:
        pool = _POOLS.get((purpose, threads))
        if pool is None:
            pool = _POOLS[purpose, threads] = ThreadPoolExecutor(
                threads, thread_name_prefix=f"{THREAD_PREFIX}{purpose}")
        return pool
