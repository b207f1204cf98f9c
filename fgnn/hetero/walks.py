"""Old import path of :mod:`fgnn.sampling.walks_hetero`, kept only for the modules the task refactor rewrites
(fgnn/executors/, the task modules); everything else imports :mod:`fgnn.sampling.walks_hetero`."""

from fgnn.sampling.walks_hetero import ItemWalkSampler

__all__ = ["ItemWalkSampler"]
