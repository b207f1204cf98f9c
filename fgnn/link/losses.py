"""Old import path of :mod:`fgnn.models.losses`, kept only for the modules the task refactor rewrites
(fgnn/executors/, the task modules); everything else imports :mod:`fgnn.models.losses`."""

from fgnn.models.losses import LOSSES, bce_loss, max_margin_loss

__all__ = ["LOSSES", "bce_loss", "max_margin_loss"]
