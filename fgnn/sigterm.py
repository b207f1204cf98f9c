"""``SIGTERM`` stops a job as Ctrl-C does.

Ray installs handlers for ``SIGTERM`` in the driver when ``ray.init`` starts or joins a node
(a Python one that calls ``sys.exit``, then its core worker's native failure handler, which
prints ``*** SIGTERM received ... PC: @ 0x...`` and a stack dump). A job instead raises
:class:`Terminated`, a ``KeyboardInterrupt``, in the main thread: the runtime unwinds as it does
for Ctrl-C (executors stopped, Ray shut down, the last epoch's checkpoint kept) and the CLI
prints one line. :func:`interrupt_on_sigterm` installs that handler; call it after
``ray.init``, since Ray's replaces any installed before.
"""

from __future__ import annotations

import signal
import threading
from typing import Any, Callable

__all__ = ["Terminated", "interrupt_on_sigterm"]


class Terminated(KeyboardInterrupt):
    """The process received ``SIGTERM`` (raised in the main thread, as Ctrl-C raises
    ``KeyboardInterrupt``)."""


def _raise_terminated(signum: int, frame: Any) -> None:
    raise Terminated(f"received {signal.Signals(signum).name}")


def interrupt_on_sigterm() -> Callable[[], None]:
    """Make ``SIGTERM`` raise :class:`Terminated` in the main thread.

    Returns:
        A function that puts the previous handler back (a no-op when nothing was installed:
        called outside the main thread, where Python cannot set handlers).
    """
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = signal.signal(signal.SIGTERM, _raise_terminated)

    def restore() -> None:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)

    return restore
