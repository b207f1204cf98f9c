"""How executors become actors (internal): the one place, and the in-process sampler a
time-sharing Trainer carries.

Executors are plain classes (testable in-process); :func:`make_actor` turns one into a
restartable Ray actor on a device of the job's placement group, or, for a job that runs without
Ray (:func:`fgnn.executors.host.uses_ray`), an in-process
:class:`~fgnn.executors.inline.InlineActor` of the driver. A Ray actor's constructor arguments
wait in a named store actor (:class:`ArgStore`) that a restarted executor reads again, so no
constructor argument lives in the object store where it could go out of scope
(ray-project/ray#53727).
"""

from __future__ import annotations

from typing import Any, Optional

from fgnn.evaluation import EvalPlan
from fgnn.executors._argstore import ARGS_ACTOR, ArgStore
from fgnn.executors._faults import _MAX_RESTARTS
from fgnn.executors.inline import InlineActor
from fgnn.executors.sampler import SamplerExecutor
from fgnn.sampling.base import Sampler

__all__ = ["ARGS_ACTOR", "ArgStore", "make_actor", "LocalSampling"]

def _fetched(cls: type) -> type:
    """``cls`` with a constructor that takes only the actor name and fetches the arguments of
    ``cls.__init__`` from :class:`ArgStore` (top-level ObjectRefs resolved, as Ray would)."""

    def __init__(self: Any, name: str) -> None:
        import ray

        store = ray.get_actor(ARGS_ACTOR)
        [ref] = ray.get(store.get.remote(name))
        args, kwargs = ray.get(ref)
        args = [ray.get(a) if isinstance(a, ray.ObjectRef) else a for a in args]
        kwargs = {k: ray.get(v) if isinstance(v, ray.ObjectRef) else v for k, v in kwargs.items()}
        cls.__init__(self, *args, **kwargs)

    return type(cls.__name__, (cls,), {"__init__": __init__, "__module__": cls.__module__,
                                       "__qualname__": cls.__qualname__, "__doc__": cls.__doc__})


def make_actor(cls: type, name: str, pg: Any, bundle: int, gpu: float, *args: Any,
                **kwargs: Any) -> Any:
    """The one place executors become actors: ``ray.remote(num_gpus=gpu)`` on device ``bundle``
    of the job's placement group ``pg``, named by role and device, restartable; with ``pg``
    None (a job without Ray), an in-process actor of the driver.

    ``cls(*args, **kwargs)`` runs inside the actor. A Ray actor's arguments go to the
    :class:`ArgStore` actor (which the runtime starts first) and the actor is created with its
    name alone, so a restart re-reads them from there.
    """
    if pg is None:
        return InlineActor(cls, name, *args, **kwargs)
    import ray
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    store = ray.get_actor(ARGS_ACTOR)
    ray.get(store.put.remote(name, [ray.put((args, kwargs))]))
    strategy = PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=bundle)
    actor_cls = ray.remote(num_gpus=gpu, num_cpus=0, max_restarts=_MAX_RESTARTS)(_fetched(cls))
    return actor_cls.options(name=name, scheduling_strategy=strategy).remote(name)



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
