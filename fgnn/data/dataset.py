"""The dataset container every loader returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Union

import numpy as np
import torch

from fgnn.graph import CSRGraph

__all__ = ["Dataset", "Features"]

#: Node features: an in-memory tensor, or a (memory-mapped) numpy array that is never fully loaded.
Features = Union[torch.Tensor, np.ndarray]


@dataclass
class Dataset:
    """A graph with node features, labels and a train/validation/test split.

    Attributes:
        name: human-readable name (``"cora"``, ``"rmat-20"``, ...).
        graph: topology; row ``v`` lists the neighbours ``v`` aggregates from.
        features: ``(N, F)`` node features, a tensor or a memory-mapped array.
        labels: ``(N,)`` int64 class ids in ``[0, num_classes)``.
        train_idx, val_idx, test_idx: int64 node ids of each split.
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
        for split in ("train_idx", "val_idx", "test_idx"):
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

    def __repr__(self) -> str:
        return (f"Dataset({self.name!r}, nodes={self.num_nodes}, edges={self.graph.num_edges}, "
                f"feat_dim={self.feat_dim}, classes={self.num_classes}, train/val/test="
                f"{self.train_idx.numel()}/{self.val_idx.numel()}/{self.test_idx.numel()})")
