"""The named actor that keeps each executor's constructor arguments (internal).

It imports nothing beyond the standard library, so its actor process starts without torch.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ARGS_ACTOR", "ArgStore"]

#: Name of the actor that keeps the executors' constructor arguments (:class:`ArgStore`).
ARGS_ACTOR = "fgnn-args"


class ArgStore:
    """Keeps each executor's constructor arguments, by actor name, for the job's lifetime.

    An executor is created with its name as its only argument and fetches the rest from here,
    in its constructor, so every restart Ray makes (``max_restarts``) finds them again, and no
    constructor argument lives in the object store where it could go out of scope (the case
    ray-project/ray#53727 warns about for actors created with ObjectRef arguments).
    """

    def __init__(self) -> None:
        self._args: dict[str, list[Any]] = {}

    def put(self, name: str, boxed: list[Any]) -> None:
        """Store ``[ref]``, ``ref`` an ObjectRef of ``(args, kwargs)`` (boxed: Ray passes a
        nested ref through instead of resolving it)."""
        self._args[name] = boxed

    def get(self, name: str) -> list[Any]:
        """The boxed ref stored under ``name``."""
        return self._args[name]
