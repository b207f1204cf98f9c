"""The dataset container every loader returns."""

from __future__ import annotations

from dataclasses import InitVar, dataclass, field
from typing import Any, Optional, Sequence, Union

import numpy as np
import torch

from fgnn.data.split_checks import check_split_ids, warn_unscorable
from fgnn.graph import CSRGraph

__all__ = ["Dataset", "Features", "SplitLike", "split_ids", "first_non_finite",
           "check_finite_features", "check_num_classes", "MAX_CLASSES"]

#: Node features: an in-memory tensor, or a (memory-mapped) numpy array that is never fully loaded.
Features = Union[torch.Tensor, np.ndarray]
#: One split: integer node ids, or a boolean mask of length N (PyG's ``train_mask``).
SplitLike = Union[torch.Tensor, np.ndarray, Sequence[int]]

_SPLITS = ("train_idx", "val_idx", "test_idx")
#: Bytes of feature rows scanned at a time for non-finite values (a memory-mapped file larger
#: than memory is read chunk by chunk, never whole).
FINITE_CHUNK_BYTES = 64 << 20
#: Most label classes a dataset may declare (2^24): a classifier's output layer holds one row of
#: weights per class, so a count far beyond any real task only exhausts memory.
MAX_CLASSES = 1 << 24


def check_num_classes(name: str, num_classes: int) -> None:
    """Refuse a class count above :data:`MAX_CLASSES` (``num_classes=2^40`` would otherwise
    fail deep in torch's allocator, with no word of which field was wrong).

    Raises:
        ValueError: naming the dataset, the field and the value.
    """
    if int(num_classes) > MAX_CLASSES:
        raise ValueError(f"dataset {name!r}: num_classes={int(num_classes)} is more than "
                         f"{MAX_CLASSES} (2^24) classes; a classifier of that many classes "
                         f"does not fit in memory; give the number of distinct labels")


def first_non_finite(features: Features, chunk_bytes: int = FINITE_CHUNK_BYTES) \
        -> Optional[tuple[int, int, float]]:
    """The first NaN or ±inf of a ``(N, F)`` feature matrix, scanned in row chunks.

    Args:
        features: a tensor, array or memory-mapped array (read ``chunk_bytes`` at a time).
        chunk_bytes: bytes of rows per chunk.

    Returns:
        ``(row, column, value)`` of the first non-finite entry in row-major order, or ``None``
        (also for integer features, which cannot hold one).
    """
    is_tensor = isinstance(features, torch.Tensor)
    floating = (features.is_floating_point() if is_tensor
                else np.issubdtype(np.asarray(features[:0]).dtype, np.floating))
    if not floating or features.ndim != 2:
        return None
    n, f = int(features.shape[0]), int(features.shape[1])
    itemsize = features.element_size() if is_tensor else features.dtype.itemsize
    rows = max(1, chunk_bytes // max(1, f * itemsize))
    for lo in range(0, n, rows):
        block = features[lo:lo + rows]
        bad = (~torch.isfinite(block)) if is_tensor else ~np.isfinite(np.asarray(block))
        if bool(bad.any()):
            r, c = (int(x) for x in (bad.nonzero(as_tuple=False)[0] if is_tensor
                                     else np.argwhere(bad)[0]))
            return lo + r, c, float(block[r, c])
    return None


def check_finite_features(features: Features, where: str,
                          chunk_bytes: int = FINITE_CHUNK_BYTES) -> None:
    """Raise one ``ValueError`` line naming ``where`` and the first NaN/±inf (row, column).

    Example message: ``dataset 'x' features: non-finite value inf at row 7, column 2; fgnn
    trains only on finite features (replace or drop NaN/inf)``.
    """
    hit = first_non_finite(features, chunk_bytes)
    if hit is not None:
        row, col, value = hit
        shown = "NaN" if value != value else f"{value:g}"
        raise ValueError(f"{where}: non-finite value {shown} at row {row}, column {col}; fgnn "
                         f"trains only on finite features (replace or drop NaN/inf)")


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
        check_features: (constructor only) scan the features for NaN/±inf, chunk by chunk; a
            loader that already scanned them (naming its file) passes ``False``.
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
    check_features: InitVar[bool] = True

    def __post_init__(self, check_features: bool = True) -> None:
        for split in _SPLITS:
            setattr(self, split, split_ids(getattr(self, split), self.graph.num_nodes,
                                           what=f"dataset {self.name!r}: {split}"))
        self.validate(check_features=check_features)

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

    def validate(self, check_features: bool = True) -> None:
        """Check shapes, ranges, splits and (with ``check_features``) that every feature is
        finite; raise ``ValueError`` naming the field and value."""
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
        check_num_classes(self.name, self.num_classes)
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
        check_split_ids(self.name, self._splits())
        if check_features:
            check_finite_features(self.features, f"dataset {self.name!r} features")

    def check_trainable(self) -> None:
        """Raise ``ValueError`` when there is nothing to train on: an empty training split, or a
        single class (every label the same: a classifier learns nothing)."""
        if self.num_classes < 2:
            raise ValueError(f"dataset {self.name!r} has num_classes={self.num_classes}: every "
                             f"label is the same class, so a classifier learns nothing (and "
                             f"scores 1.0); give it at least 2 classes")
        if self.train_idx.numel() == 0:
            raise ValueError(f"dataset {self.name!r} has an empty training split (train_idx holds "
                             f"no node); give it training nodes (e.g. train_frac > 0 or a "
                             f"train mask with a true entry)")

    def warn_unscorable(self) -> None:
        """Warn (one line each) about node-classification scores that cannot be computed: an
        empty validation or test split, or a single class among the training labels
        (:func:`fgnn.data.split_checks.warn_unscorable`)."""
        warn_unscorable(self.name, self.labels, self._splits(), self.num_classes)

    def _splits(self) -> dict[str, torch.Tensor]:
        return {split: getattr(self, split) for split in _SPLITS}

    def __repr__(self) -> str:
        return (f"Dataset({self.name!r}, nodes={self.num_nodes}, edges={self.graph.num_edges}, "
                f"feat_dim={self.feat_dim}, classes={self.num_classes}, train/val/test="
                f"{self.train_idx.numel()}/{self.val_idx.numel()}/{self.test_idx.numel()})")
