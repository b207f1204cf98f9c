"""How executors become actors (internal): the one place, and the in-process sampler a
time-sharing Trainer carries.

Executors are plain classes (testable in-process); :func:`make_actor` turns one into a
restartable Ray actor on a device of the job's placement group, or, for a job that runs without
Ray (:func:`fgnn.executors.host.uses_ray`), an in-process
:class:`~fgnn.executors.inline.InlineActor` of the driver. Either way an executor's constructor
arguments wait in a store (the queue actor, :class:`QueueService`, a Ray actor or an in-process
one) and the executor fetches them from there, with the same calls: a restarted Ray actor reads
them again, and no constructor argument lives in the object store where it could go out of
scope (ray-project/ray#53727).
"""

from __future__ import annotations

import functools
from typing import Any, Optional

from fgnn.evaluation import EvalPlan
from fgnn.executors import host
from fgnn.executors._argstore import ARGS_ACTOR, QueueService
from fgnn.executors.inline import InlineActor
from fgnn.executors.sampler import SamplerExecutor
from fgnn.sampling.base import Sampler

__all__ = ["ARGS_ACTOR", "QueueService", "stash_args", "wait_stashed",
           "make_actor", "LocalSampling",
           "remote_options", "tensor_transport_supported", "MAX_RESTARTS"]

#: Times Ray restarts a dead executor before the job continues without it.
MAX_RESTARTS = 1


@functools.lru_cache(maxsize=None)
def _fetched(cls: type) -> type:
    """``cls`` with a constructor that takes the actor's name and the store's handle
    (:class:`QueueService`) and fetches the arguments of ``cls.__init__`` from the store (top-level
    refs resolved, as Ray would). Made once per class."""

    def __init__(self: Any, name: str, store: Any = None) -> None:
        if store is None:  # a Ray actor: created with its name alone, it looks the store up
            import ray

            store = ray.get_actor(ARGS_ACTOR)
        [ref] = host.get(store.get_args.remote(name))
        args, kwargs = host.get(ref)
        args = [host.resolve(a) for a in args]
        kwargs = {k: host.resolve(v) for k, v in kwargs.items()}
        cls.__init__(self, *args, **kwargs)

    return type(cls.__name__, (cls,), {"__init__": __init__, "__module__": cls.__module__,
                                       "__qualname__": cls.__qualname__, "__doc__": cls.__doc__})


@functools.lru_cache(maxsize=None)
def _actor_class(cls: type, gpu: float, transport: Optional[str]) -> Any:
    """The Ray actor class of ``cls`` with ``gpu`` of a device, made once per job process (Ray
    exports a class once, not once per executor)."""
    import ray

    return ray.remote(**remote_options(gpu, {"transport": transport}))(_fetched(cls))


def stash_args(store: Any, name: str, *args: Any, **kwargs: Any) -> Any:
    """Send an executor's constructor arguments to the store (:class:`QueueService`), boxed in
    a ref of the store's kind (``ray.put``, or an in-process ref: :func:`host.put
    <fgnn.executors.host.put>`); returns the call's ref, to wait on (together with the others,
    :func:`wait_stashed`). The actor may be created before they arrive (:func:`make_actor`):
    it waits for them in the store."""
    boxed = [host.put((args, kwargs), host.is_inline(store))]
    return store.put_args.remote(name, boxed)


def wait_stashed(stashed: list[Any]) -> None:
    """Wait until the store holds every stashed argument list (one wait for all)."""
    host.get(stashed)


def make_actor(cls: type, name: str, pg: Any, bundle: int, gpu: float, store: Any,
               transport: Optional[str] = None) -> Any:
    """The one place executors become actors: ``ray.remote(num_gpus=gpu)`` on device ``bundle``
    of the job's placement group ``pg``, named by role and device, restartable; with ``pg``
    None (a job without Ray), an in-process actor of the driver.

    ``cls(*args, **kwargs)`` runs inside the actor, with the arguments :func:`stash_args` left
    in ``store`` (where the actor waits for them should it start before they arrive); the
    actor is created with its name and the store's handle alone, so a restart re-reads them
    from there. Creation returns at once: the processes of several executors start
    concurrently, while their arguments travel. ``transport`` is a Sampler's sample transport
    (:func:`remote_options`).
    """
    if pg is None:
        return InlineActor(_fetched(cls), name, name, store)
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    strategy = PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=bundle)
    actor_cls = _actor_class(cls, float(gpu), transport)
    # the name alone: a handle among an actor's creation arguments makes Ray warn that a
    # restart may fail (ray-project/ray#53727); the actor looks the store up by name
    return actor_cls.options(name=name, scheduling_strategy=strategy).remote(name)


def tensor_transport_supported() -> bool:
    """Whether the installed Ray takes ``enable_tensor_transport`` in ``ray.remote``."""
    try:
        from ray._common.ray_option_utils import actor_options
    except ImportError:
        return False
    return "enable_tensor_transport" in actor_options


def remote_options(gpu: float, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``ray.remote`` options of an executor whose constructor takes ``kwargs``.

    A Sampler that sends its samples over CUDA IPC (``transport="cuda_ipc"``) is created with
    ``enable_tensor_transport=True`` where Ray supports it: Ray then gives it the ``_ray_system``
    concurrency group, in which it frees the GPU objects the Trainers are done with (without
    it the frees wait behind the Sampler's own calls, and its GPU memory is released late).
    """
    opts: dict[str, Any] = {"num_gpus": gpu, "num_cpus": 0, "max_restarts": MAX_RESTARTS}
    if kwargs.get("transport") == "cuda_ipc" and tensor_transport_supported():
        opts["enable_tensor_transport"] = True
    return opts



class LocalSampling(SamplerExecutor):
    """The in-process sampler a time-sharing Trainer carries (topology resident on its device).

    Built lazily inside the Trainer actor so the graph is mapped from the object store there.
    """

    def __init__(self, graph: Any, sampler: Sampler, train_idx: Any, batch_size: int,
                 seed: int, device: str, eval_idx: Any = None,
                 parts: int = 1, task: Any = None) -> None:  # noqa: D107
        self._args = (graph, sampler, train_idx, batch_size, seed, device, eval_idx, parts, task)
        self._built = False

    def _build(self) -> None:
        from fgnn.executors.host import resolve

        graph, sampler, train_idx, batch_size, seed, device, eval_idx, parts, task = self._args
        graph, train_idx, eval_idx, task = (resolve(a) for a in (graph, train_idx, eval_idx,
                                                                  task))
        self._built = True  # from here the overrides below act on the built sampler
        SamplerExecutor.__init__(self, graph, sampler, train_idx, batch_size, seed, None, None,
                                 "local", device, eval_idx=eval_idx, parts=parts, task=task)

    def sample(self, epoch: int, task_id: int, plan: Optional[EvalPlan] = None
               ):  # noqa: D102
        if not self._built:
            self._build()
        return SamplerExecutor.sample(self, epoch, task_id, plan)

    def set_scale(self, scale: float) -> None:  # noqa: D102
        if not self._built:
            self._build()
        SamplerExecutor.set_scale(self, scale)

    def set_cache_map(self, cache_map: Any) -> None:  # noqa: D102
        if not self._built:
            if cache_map is None:
                return  # built without a map anyway
            self._build()
        SamplerExecutor.set_cache_map(self, cache_map)
