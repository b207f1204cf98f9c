"""Where a job's executors run: Ray actors, or in-process actors in the driver (one runtime).

Ray is started only for a layout of more than one device, or when asked (``runtime.ray``,
``--ray``; ``runtime.address``); a one-device job (``--mode single``, ``--devices 1``) runs its
Sampler, Trainer, queue and parameter server as :class:`~fgnn.executors.inline.InlineActor`
threads of the driver (:func:`uses_ray`). The runtime, the executors and the epoch loop are the
same code either way: they call :func:`get`, :func:`wait`, :func:`put` and :func:`kill` here,
which act on in-process refs and handles themselves and hand anything else to Ray.
"""

from __future__ import annotations

from typing import Any, Optional

from fgnn.executors import inline
from fgnn.executors.inline import InlineActor, InlineRef

__all__ = ["uses_ray", "get", "wait", "put", "kill", "resolve", "is_inline"]


def uses_ray(runtime: Any, faults: Any = None) -> bool:
    """Whether a job with the runtime settings ``runtime`` (a
    :class:`~fgnn.config.RuntimeConfig`) runs on Ray: when asked (``ray``, an ``address``), for
    a layout of more than one device, for the collective exchange (its members meet over
    Ray), or with fault injection that ends a Trainer's process (``faults.ends_a_process``).
    """
    return bool(runtime.ray or runtime.address is not None or runtime.devices_used > 1
                or runtime.exchange != "server"
                or (faults is not None and faults.ends_a_process))


def is_inline(obj: Any) -> bool:
    """Whether ``obj`` is an in-process handle or ref, or a list of in-process refs."""
    if isinstance(obj, (list, tuple)):
        return bool(obj) and isinstance(obj[0], InlineRef)
    return isinstance(obj, (InlineRef, InlineActor))


def get(refs: Any, timeout: Optional[float] = None) -> Any:
    """``ray.get`` of Ray refs, :func:`fgnn.executors.inline.get` of in-process ones."""
    if isinstance(refs, (list, tuple)) and not refs:
        return []
    if is_inline(refs):
        return inline.get(refs, timeout)
    import ray

    return ray.get(refs, timeout=timeout)


def wait(refs: list, num_returns: int = 1, timeout: Optional[float] = None
         ) -> tuple[list, list]:
    """``ray.wait`` of Ray refs, :func:`fgnn.executors.inline.wait` of in-process ones."""
    if not refs:
        return [], []
    if is_inline(refs):
        return inline.wait(refs, num_returns, timeout)
    import ray

    return ray.wait(refs, num_returns=num_returns, timeout=timeout)


def put(value: Any, in_process: bool, **ray_options: Any) -> Any:
    """Share ``value`` with the executors: an in-process ref (``in_process``; no copy), else
    ``ray.put(value, **ray_options)``."""
    if in_process:
        return inline.put(value)
    import ray

    return ray.put(value, **ray_options)


def resolve(arg: Any) -> Any:
    """The value of a ref (Ray's or in-process), anything else as it is."""
    if isinstance(arg, InlineRef):
        return inline.get(arg)
    import ray

    return ray.get(arg) if isinstance(arg, ray.ObjectRef) else arg


def kill(handle: Any) -> None:
    """Stop an actor for good (``ray.kill(no_restart=True)``, or the in-process thread)."""
    if isinstance(handle, InlineActor):
        handle.kill()
        return
    import ray

    ray.kill(handle, no_restart=True)
