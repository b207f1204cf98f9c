"""The dataset container every loader returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence, Union

import numpy as np
import torch

from fgnn.graph import CSRGraph

__all__ = ["Dataset", "Features", "SplitLike", "split_ids"]

#: Node features: an in-memory tensor, or a (memory-mapped) numpy array that is never fully loaded.
Features = Union[torch.Tensor, np.ndarray]
#: One split: integer node ids, or a boolean mask of length N (PyG's ``train_mask``).
SplitLike = Union[torch.Tensor, np.ndarray, Sequence[int]]

_SPLITS = ("train_idx", "val_idx", "test_idx")


def split_ids(split: SplitLike, num_nodes: int, *, what: str = "split") -> torch.Tensor:
    """Node ids of one split, given as ids or as a boolean mask.

    Args:
        split: ``(K,)`` integer node ids (any integer dtype), or a ``(N,)`` boolean mask whose
            true entries are the split's nodes (PyG's ``train_mask``); a tensor, array or list.
        num_nodes: N, the length a mask must have.
        what: the split's name for error messages (``"dataset 'x': train_idx"``).

    Returns:
        ``(K,)`` int64 node ids (a mask gives its true positions in increasing order).

    Raises:
        ValueError: naming ``what`` on a mask whose length is not N, a floating-point or other
            non-integer dtype, or more than one dimension.
    """
    try:
        t = split if isinstance(split, torch.Tensor) else torch.as_tensor(np.asarray(split))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what} must hold integer node ids or be a boolean mask: {exc}") \
            from None
    if t.dim() != 1:
        raise ValueError(f"{what} must be 1-D node ids or a boolean mask of length {num_nodes}, "
                         f"got shape {tuple(t.shape)}")
    if t.dtype == torch.bool:
        if t.numel() != num_nodes:
            raise ValueError(f"{what} is a boolean mask of length {t.numel()}, but the graph has "
                             f"{num_nodes} nodes")
        return t.nonzero().flatten()
    if t.numel() == 0:                                          # [] arrives as float64
        return torch.zeros(0, dtype=torch.int64)
    if t.is_floating_point() or t.is_complex():
        raise ValueError(f"{what} must hold integer node ids or be a boolean mask, got dtype "
                         f"{t.dtype}")
    return t.to(torch.int64)


@dataclass
class Dataset:
    """A graph with node features, labels and a train/validation/test split.

    Attributes:
        name: human-readable name (``"cora"``, ``"rmat-20"``, ...).
        graph: topology; row ``v`` lists the neighbours ``v`` aggregates from.
        features: ``(N, F)`` node features, a tensor or a memory-mapped array.
        labels: ``(N,)`` int64 class ids in ``[0, num_classes)``.
        train_idx, val_idx, test_idx: ``(K,)`` int64 node ids of each split. The constructor
            also takes any integer ids or a ``(N,)`` boolean mask (PyG's ``train_mask``) and
            stores the ids (see :func:`split_ids`).
        num_classes: number of classes C.
        meta: free-form provenance (generator parameters, source paths).
    """

    name: str
    graph: CSRGraph
    features: Features
    labels: torch.Tensor
    train_idx: torch.Tensor
    val_idx: torch.Tensor
    test_idx: torch.Tensor
    num_classes: int
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for split in _SPLITS:
            setattr(self, split, split_ids(getattr(self, split), self.graph.num_nodes,
                                           what=f"dataset {self.name!r}: {split}"))
        self.validate()

    @property
    def num_nodes(self) -> int:
        """Number of vertices N."""
        return self.graph.num_nodes

    @property
    def feat_dim(self) -> int:
        """Feature dimension F."""
        return int(self.features.shape[1])

    @property
    def feature_row_bytes(self) -> int:
        """Bytes of one feature row."""
        itemsize = (self.features.element_size() if isinstance(self.features, torch.Tensor)
                    else self.features.dtype.itemsize)
        return int(self.feat_dim * itemsize)

    def validate(self) -> None:
        """Check shapes, ranges and splits; raise ``ValueError`` naming the field and value."""
        n = self.graph.num_nodes
        if self.features.ndim != 2:
            raise ValueError(f"dataset {self.name!r}: features must be 2-D (N, F), got shape "
                             f"{tuple(self.features.shape)}")
        if self.features.shape[0] != n:
            raise ValueError(f"dataset {self.name!r}: features has {self.features.shape[0]} rows "
                             f"but the graph has {n} nodes")
        if self.labels.shape != (n,):
            raise ValueError(f"dataset {self.name!r}: labels has shape {tuple(self.labels.shape)},"
                             f" expected ({n},)")
        if self.num_classes < 1:
            raise ValueError(f"dataset {self.name!r}: num_classes must be >= 1, got "
                             f"{self.num_classes}")
        if self.labels.numel() > 0:
            lo, hi = int(self.labels.min()), int(self.labels.max())
            if lo < 0 or hi >= self.num_classes:
                raise ValueError(f"dataset {self.name!r}: labels hold class {lo if lo < 0 else hi}"
                                 f", outside [0, {self.num_classes})")
        for split in _SPLITS:
            idx = getattr(self, split)
            if idx.dtype != torch.int64 or idx.dim() != 1:
                raise ValueError(f"dataset {self.name!r}: {split} must be a 1-D int64 tensor, got "
                                 f"{idx.dtype} of shape {tuple(idx.shape)}")
            if idx.numel() > 0 and (int(idx.min()) < 0 or int(idx.max()) >= n):
                bad = int(idx.min()) if int(idx.min()) < 0 else int(idx.max())
                raise ValueError(f"dataset {self.name!r}: {split} holds node id {bad}, outside "
                                 f"[0, {n})")
        if isinstance(self.features, torch.Tensor) and self.features.is_floating_point():
            if bool(torch.isnan(self.features).any()):
                row = int(torch.isnan(self.features).any(dim=1).nonzero()[0])
                raise ValueError(f"dataset {self.name!r}: features contain NaN (row {row})")

    def check_trainable(self) -> None:
        """Raise ``ValueError`` when there is nothing to train on (an empty training split)."""
        if self.train_idx.numel() == 0:
            raise ValueError(f"dataset {self.name!r} has an empty training split (train_idx holds "
                             f"no node); give it training nodes (e.g. train_frac > 0 or a "
                             f"train mask with a true entry)")

    def __repr__(self) -> str:
        return (f"Dataset({self.name!r}, nodes={self.num_nodes}, edges={self.graph.num_edges}, "
                f"feat_dim={self.feat_dim}, classes={self.num_classes}, train/val/test="
                f"{self.train_idx.numel()}/{self.val_idx.numel()}/{self.test_idx.numel()})")
