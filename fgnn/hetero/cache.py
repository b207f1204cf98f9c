"""Old import path of :mod:`fgnn.cache.hetero`, kept only for the modules the task refactor rewrites
(fgnn/executors/, the task modules); everything else imports :mod:`fgnn.cache.hetero`."""

from fgnn.cache.hetero import HeteroFeatureStore, choose_cached_rows, feature_bytes
from fgnn.graph.hetero import row_bytes_of

__all__ = ["HeteroFeatureStore", "choose_cached_rows", "feature_bytes", "row_bytes_of"]
