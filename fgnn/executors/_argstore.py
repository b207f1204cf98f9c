"""Where each executor's constructor arguments wait (internal): the job's queue actor keeps them.

:class:`QueueService` is the global queue with an argument store, the one service actor that
holds both (one process fewer to start than a store of its own). It imports nothing that loads
torch, so that actor process starts without it.
"""

from __future__ import annotations

from typing import Any

from fgnn.executors.queue import GlobalQueue

__all__ = ["ARGS_ACTOR", "QueueService"]

#: Name of the actor that keeps the executors' constructor arguments: the global queue.
ARGS_ACTOR = "fgnn-queue"


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

    def put_args(self, name: str, boxed: list[Any]) -> None:
        """Store ``[ref]``, ``ref`` a ref of ``(args, kwargs)``: an ObjectRef, or an in-process
        ref in a job without Ray (boxed: Ray passes a nested ref through instead of resolving
        it, so this process never loads the arguments)."""
        self._stored_args[name] = boxed

    def get_args(self, name: str) -> list[Any]:
        """The boxed ref stored under ``name``."""
        return self._stored_args[name]
