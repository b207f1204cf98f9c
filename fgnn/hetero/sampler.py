"""Old import path of :mod:`fgnn.sampling.hetero`, kept only for the modules the task refactor rewrites
(fgnn/executors/, the task modules); everything else imports :mod:`fgnn.sampling.hetero`."""

from fgnn.sampling.hetero import EdgeFilter, HeteroBlock, HeteroKHop, HeteroSample

__all__ = ["EdgeFilter", "HeteroBlock", "HeteroKHop", "HeteroSample"]
