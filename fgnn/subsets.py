"""Fixed seeded subsets of a split: what each epoch's validation scores (``train.val_subset``).

A subset is ``k`` positions of the split's ``n`` ids drawn from the job seed and the split name
alone (:func:`subset_positions`), kept in split order: the same every epoch and in every
process, so the executors and :func:`fgnn.training.fit` score the same vertices each time.
"""

from __future__ import annotations

import functools
from typing import Optional

import torch

__all__ = ["SPLITS", "VAL_SUBSET_FLOOR", "subset_positions", "subset_ids", "val_subset_size"]

#: Split name -> the id mixed into a split's generators (stable across releases).
SPLITS: dict[str, int] = {"train": 1, "val": 2, "test": 3}


@functools.lru_cache(maxsize=8)
def subset_positions(n: int, k: int, seed: int, split: str) -> torch.Tensor:
    """Positions (sorted, int64) of a fixed random subset of ``min(n, k)`` of a split's ``n``
    ids: drawn from ``seed`` and ``split`` alone, so every epoch and every process gets the same
    subset. ``k >= n`` gives every position.

    Raises:
        ValueError: for a negative ``n``, a ``k`` below 1 or a split not in :data:`SPLITS`.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got n={n!r}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got k={k!r}")
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, got split={split!r}")
    if k >= n:
        return torch.arange(n, dtype=torch.int64)
    g = torch.Generator()
    g.manual_seed((int(seed) * 6_151 + SPLITS[split] * 49_157 + 31) % (2 ** 63))
    return torch.randperm(n, generator=g)[:k].sort().values


#: The smallest automatic per-epoch validation subset (``train.val_subset`` auto).
VAL_SUBSET_FLOOR = 4096


def val_subset_size(setting: Optional[int], n_val: int, n_train: int) -> Optional[int]:
    """Ids each epoch's validation scores, from ``train.val_subset`` (``None``: auto,
    ``max(VAL_SUBSET_FLOOR, n_train)``; ``0``: all); None when that is the whole split."""
    k = max(VAL_SUBSET_FLOOR, int(n_train)) if setting is None else int(setting)
    return None if k == 0 or k >= n_val else k


def subset_ids(idx: torch.Tensor, k: Optional[int], seed: int, split: str) -> torch.Tensor:
    """The ids of ``idx`` at :func:`subset_positions` (``idx`` itself when ``k`` is None or
    covers it)."""
    if k is None or k >= idx.numel():
        return idx
    return idx[subset_positions(int(idx.numel()), int(k), int(seed), split).to(idx.device)]
