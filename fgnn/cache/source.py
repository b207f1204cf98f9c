"""The protocol of a host-side (or disk-side) source of feature rows.

The feature store reads cache misses from a ``FeatureSource``: host memory (a tensor), a
memory-mapped on-disk matrix, or the disk tier with its CPU buffer (GIDS). All share this shape.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch

__all__ = ["FeatureSource"]


@runtime_checkable
class FeatureSource(Protocol):
    """Rows of an ``(N, F)`` feature matrix that live off the device."""

    @property
    def num_rows(self) -> int:
        """N."""

    @property
    def dim(self) -> int:
        """F."""

    @property
    def dtype(self) -> torch.dtype:
        """Element type of the rows."""

    def read(self, ids: torch.Tensor) -> torch.Tensor:
        """Return the ``(len(ids), F)`` rows for int64 global ``ids`` as a CPU tensor."""
