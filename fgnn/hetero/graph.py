"""Old import path of :mod:`fgnn.graph.hetero`, kept only for the modules the task refactor rewrites
(fgnn/executors/, the task modules); everything else imports :mod:`fgnn.graph.hetero`."""

from fgnn.graph.hetero import EdgeType, HeteroGraph

__all__ = ["EdgeType", "HeteroGraph"]
