"""A line every few seconds while a start-up phase runs that prints nothing itself (issue 39:
nothing silent for more than 5 s in the first minute).

::

    with heartbeat(print, "starting Ray"):
        ray.init(...)            # "fgnn: still starting Ray (3.0s)" every 3 s until it returns
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Callable, Iterator

__all__ = ["HEARTBEAT_S", "heartbeat"]

#: Seconds between two lines of a :func:`heartbeat`.
HEARTBEAT_S = 3.0


@contextlib.contextmanager
def heartbeat(say: Callable[[str], None], what: str, every: float = HEARTBEAT_S
              ) -> Iterator[None]:
    """While the block runs, ``say("fgnn: still WHAT (S s)")`` every ``every`` seconds, from a
    daemon thread; nothing when the block ends first. The thread ends with the block."""
    done = threading.Event()
    t0 = time.perf_counter()

    def beat() -> None:
        while not done.wait(every):
            say(f"fgnn: still {what} ({time.perf_counter() - t0:.1f}s)")

    thread = threading.Thread(target=beat, name=f"fgnn-heartbeat-{what}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
