"""Old import path of :mod:`fgnn.data.dataset_hetero`, kept only for the modules the task refactor rewrites
(fgnn/executors/, the task modules); everything else imports :mod:`fgnn.data.dataset_hetero`."""

from fgnn.data.dataset_hetero import HeteroDataset

__all__ = ["HeteroDataset"]
