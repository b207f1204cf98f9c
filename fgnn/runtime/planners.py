"""Which cache planner a job runs (internal): the typed planner on a typed graph, the
recommender's on a user-item job, else the homogeneous one -- the one place the runtime picks
a planner by task or graph kind."""

from __future__ import annotations

from typing import Any

from fgnn.runtime.cache_plan import CachePlanner
from fgnn.executors.graph_kind import GraphKind
from fgnn.runtime.cache_plan_typed import HeteroCachePlanner
from fgnn.runtime.cache_plan_recsys import RecsysCachePlanner

__all__ = ["planner_for"]

#: Planners of tasks whose cache differs on a homogeneous graph.
_TASK_PLANNERS: dict[str, type] = {"recsys": RecsysCachePlanner}


def planner_for(task: Any, kind: GraphKind) -> type:
    """The planner class of ``task`` on a graph of ``kind``."""
    if kind.typed:
        return HeteroCachePlanner
    return _TASK_PLANNERS.get(task.name, CachePlanner)
