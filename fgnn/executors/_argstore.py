"""Where each executor's constructor arguments wait (internal): the job's queue actor keeps them.

:class:`QueueService` is the global queue with an argument store, the one service actor that
holds both (one process fewer to start than a store of its own). It imports nothing that loads
torch, so that actor process starts without it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fgnn.executors.queue import GlobalQueue

__all__ = ["ARGS_ACTOR", "ARGS_WAIT_S", "QueueService"]

#: Name of the actor that keeps the executors' constructor arguments: the global queue.
ARGS_ACTOR = "fgnn-queue"
#: Seconds an executor waits in the store for its arguments (sent before its actor is created).
ARGS_WAIT_S = 300.0


class QueueService(GlobalQueue):
    """The global queue actor, which also keeps each executor's constructor arguments, by actor
    name, for the job's lifetime.

    An executor is created with its name and this store's handle as its only arguments and
    fetches the rest from here, in its constructor, so every restart Ray makes
    (``max_restarts``) finds them again, and no constructor argument lives in the object store
    where it could go out of scope (the case ray-project/ray#53727 warns about for actors
    created with ObjectRef arguments). A job without Ray keeps its executors' arguments in an
    in-process store, with the same calls.
    """

    def __init__(self, maxsize: int = 64) -> None:
        super().__init__(maxsize)
        self._stored_args: dict[str, list[Any]] = {}

    async def put_args(self, name: str, boxed: list[Any]) -> None:
        """Store ``[ref]``, ``ref`` a ref of ``(args, kwargs)``: an ObjectRef, or an in-process
        ref in a job without Ray (boxed: Ray passes a nested ref through instead of resolving
        it, so this process never loads the arguments)."""
        self._stored_args[name] = boxed
        await self._notify()

    async def get_args(self, name: str, timeout_s: float = ARGS_WAIT_S) -> list[Any]:
        """The boxed ref stored under ``name``, waiting up to ``timeout_s`` for it: the driver
        creates an executor's actor without waiting for its :meth:`put_args` to arrive, so the
        executor's process starts while the arguments travel.

        Raises:
            KeyError: nothing was stored under ``name`` within ``timeout_s``.
        """
        if name not in self._stored_args:
            cond = self._condition()
            async with cond:
                try:
                    await asyncio.wait_for(cond.wait_for(lambda: name in self._stored_args),
                                           timeout_s)
                except asyncio.TimeoutError:
                    raise KeyError(f"no constructor arguments for {name!r} reached the store "
                                   f"within {timeout_s:g}s") from None
        return self._stored_args[name]
