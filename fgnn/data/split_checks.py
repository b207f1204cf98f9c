"""Checks of a dataset's train/validation/test splits: duplicated ids are refused, overlapping
splits and scores that cannot be computed (an empty split, a single training class) warned
about, one line each."""

from __future__ import annotations

import warnings
from typing import Mapping

import torch

__all__ = ["check_split_ids", "warn_unscorable"]

_PAIRS = (("train_idx", "val_idx"), ("train_idx", "test_idx"), ("val_idx", "test_idx"))


def check_split_ids(name: str, splits: Mapping[str, torch.Tensor]) -> None:
    """Refuse a split that lists a node twice; warn (``UserWarning``) when two splits share ids.

    Args:
        name: the dataset's name, for messages.
        splits: ``{"train_idx": ids, "val_idx": ids, "test_idx": ids}``, 1-D int64 node ids.

    Raises:
        ValueError: one line naming the split and one duplicated id, e.g. ``dataset 'x':
            val_idx lists node 7 twice``.
    """
    uniq = {}
    for split, idx in splits.items():
        u, counts = torch.unique(idx, return_counts=True)
        if u.numel() != idx.numel():
            dup = int(u[counts > 1][0])
            raise ValueError(f"dataset {name!r}: {split} lists node {dup} more than once; each "
                             f"node may appear in a split at most once")
        uniq[split] = u
    for a, b in _PAIRS:
        if a in uniq and b in uniq:
            shared = int(torch.isin(uniq[a], uniq[b]).sum())
            if shared:
                ids = "node id" if shared == 1 else "node ids"
                warnings.warn(f"dataset {name!r}: {a} and {b} share {shared} {ids}, so "
                              f"{b[:-4]} scores are not held-out scores", UserWarning,
                              stacklevel=5)


def warn_unscorable(name: str, labels: torch.Tensor, splits: Mapping[str, torch.Tensor],
                    num_classes: int) -> None:
    """Warn (``UserWarning``, one line each) about node-classification scores that cannot be
    computed or mean nothing: an empty validation or test split (its final accuracy is
    recorded as not computable, ``null`` in the report), or training labels of a single class
    while ``num_classes > 1``.

    Args:
        name: the dataset's name, for messages.
        labels: ``(N,)`` class ids.
        splits: ``{"train_idx": ids, "val_idx": ids, "test_idx": ids}``.
        num_classes: the dataset's class count C.
    """
    for split in ("val_idx", "test_idx"):
        if splits[split].numel() == 0:
            warnings.warn(f"dataset {name!r}: {split} is empty, so its accuracy cannot be "
                          f"computed (recorded as null in the report)", UserWarning,
                          stacklevel=3)
    train = splits["train_idx"]
    if num_classes > 1 and train.numel() > 0:
        seen = torch.unique(labels[train])
        if seen.numel() == 1:
            warnings.warn(f"dataset {name!r}: every labelled training node has class "
                          f"{int(seen[0])} (num_classes={num_classes}), so the classifier "
                          f"learns one class and its scores mean nothing", UserWarning,
                          stacklevel=3)
