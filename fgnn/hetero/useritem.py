"""Old import path of :mod:`fgnn.data.useritem`, kept only for the modules the task refactor rewrites
(fgnn/executors/, the task modules); everything else imports :mod:`fgnn.data.useritem`."""

from fgnn.data.useritem import RecsysDataset, is_recsys

__all__ = ["RecsysDataset", "is_recsys"]
