"""The cache planner of a recommender job (``task="recsys"``, :mod:`fgnn.tasks.recsys`):
the homogeneous planner over the item rows; degree hotness counts an item's users, and user
rows (never read) rank below every item."""

from __future__ import annotations

from typing import Any

from fgnn.runtime.cache_plan import CachePlanner
from fgnn.tasks.recsys import REC

__all__ = ["RecsysCachePlanner"]


class RecsysCachePlanner(CachePlanner):
    """The homogeneous cache planner with user rows (never read) below every item, and the
    evaluation term of the cache sizing counted in items (a chunk it never shrinks: its
    chunks are counted in items, not in the seeds the bound counts)."""

    bounds_eval_chunk = False

    def _size_caches(self, memory_reports: dict[str, Any]) -> None:
        """The base's sizing with a training task counted in the items its sample holds
        (``query_items + 1`` per user, plus the task's shared negatives), not in users: an
        evaluation chunk of items is then weighed against the training sample it resembles.
        Counted in users, a chunk looked 15x a training step at the full size, and the
        evaluation term alone exceeded the 1 GiB of a logical device."""
        import dataclasses

        from fgnn.evaluation import eval_chunk

        cfg = self.config
        chunk = eval_chunk(cfg.train, self.dataset.feature_row_bytes)
        items = (cfg.train.batch_size * (REC.query_items + 1)
                 + REC.negatives_for(self.dataset.num_items) * self.step_tasks)
        self.config = dataclasses.replace(cfg, train=dataclasses.replace(
            cfg.train, batch_size=items, eval_batch_size=chunk))
        try:
            super()._size_caches(memory_reports)
        finally:
            self.config = cfg

    def policy_hotness(self, presample: bool = False) -> None:
        """The policy's hotness (degree: an item's users, plus one, so that an item nobody
        chose, still a uniform negative, ranks above every user), users at 0."""
        super().policy_hotness(presample)
        if self.hotness is not None:
            n_i = self.dataset.num_items
            self.hotness[n_i:] = 0
            self.hotness[:n_i] = self.hotness[:n_i].clamp_min(0) + 1
