"""The constant CPU buffer of GIDS (§3.3): the hottest feature rows pinned in host memory.

GIDS lets the user reserve a share of CPU memory as a *constant* buffer that holds a fixed subset of
the feature rows; accesses to those rows are redirected from storage to the buffer, which raises
the effective aggregation bandwidth beyond the storage bandwidth (§3.3, §4.4 Fig. 10). The rows
kept are those with the highest weighted reverse PageRank (§3.3, after Ginex/[25]); the user may
supply any other hotness metric instead. The buffer is filled once and never changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from fgnn import gpu
from fgnn.cache.hit_stats import HitStats
from fgnn.cache.source import FeatureSource

__all__ = ["CPUBufferStats", "CPUBufferedSource"]


@dataclass
class CPUBufferStats(HitStats):
    """Counters of a :class:`CPUBufferedSource`.

    Attributes:
        hits: rows served from the constant CPU buffer (redirected accesses, §3.3).
        misses: rows passed on to the backing source (storage).
        hit_bytes: bytes served from the buffer.
        load_bytes: bytes read from the backing source to fill the buffer (once).
    """

    hit_bytes: int = 0
    load_bytes: int = 0


class CPUBufferedSource:
    """A :class:`FeatureSource` that serves the hottest rows from host memory (GIDS §3.3).

    The ``capacity`` rows with the largest ``hotness`` (ties broken by the lower id) are read from
    ``backing`` once, in chunks, into a host tensor (pinned when CUDA is present). ``read(ids)``
    serves buffered rows from it and reads only the rest from ``backing``.

    Args:
        backing: the storage tier, e.g. a :class:`~fgnn.cache.disk_source.DiskFeatureSource`.
        hotness: ``(N,)`` hotness per row; weighted reverse PageRank by default in GIDS (compute it
            with ``fgnn.cache.hotness.compute_hotness(..., "wrpr")``); ``None`` only with
            ``capacity == 0``.
        capacity: rows to hold; give exactly one of ``capacity``, ``ratio``, ``budget_bytes``.
        ratio: share of the rows to hold, in ``[0, 1]``.
        budget_bytes: host bytes to reserve (``capacity = budget_bytes // row_bytes``).
        chunk_rows: rows read per fill step (bounds the fill's transient memory).
        pin_memory: pin the buffer; ``None`` pins when CUDA is available.

    Raises:
        ValueError: on a bad hotness shape or capacity argument.
    """

    def __init__(self, backing: FeatureSource, hotness: Optional[torch.Tensor] = None, *,
                 capacity: Optional[int] = None, ratio: Optional[float] = None,
                 budget_bytes: Optional[int] = None, chunk_rows: int = 4096,
                 pin_memory: Optional[bool] = None) -> None:
        n, f = backing.num_rows, backing.dim
        row_bytes = f * torch.empty((), dtype=backing.dtype).element_size()
        given = [x is not None for x in (capacity, ratio, budget_bytes)]
        if sum(given) != 1:
            raise ValueError("CPUBufferedSource: give exactly one of capacity, ratio, "
                             f"budget_bytes; got capacity={capacity}, ratio={ratio}, "
                             f"budget_bytes={budget_bytes}")
        if ratio is not None:
            if not 0.0 <= ratio <= 1.0:
                raise ValueError(f"CPUBufferedSource: ratio must lie in [0, 1], got {ratio}")
            capacity = int(ratio * n)
        elif budget_bytes is not None:
            if budget_bytes < 0:
                raise ValueError(f"CPUBufferedSource: budget_bytes must be >= 0, got "
                                 f"{budget_bytes}")
            capacity = int(budget_bytes) // row_bytes
        if capacity < 0:
            raise ValueError(f"CPUBufferedSource: capacity must be >= 0, got {capacity}")
        capacity = min(int(capacity), n)
        if chunk_rows < 1:
            raise ValueError(f"CPUBufferedSource: chunk_rows must be >= 1, got {chunk_rows}")
        if capacity > 0:
            if hotness is None:
                raise ValueError("CPUBufferedSource: hotness is required when capacity > 0")
            hotness = torch.as_tensor(hotness).detach().cpu()
            if hotness.shape != (n,):
                raise ValueError(f"CPUBufferedSource: hotness has shape {tuple(hotness.shape)}, "
                                 f"expected ({n},) (one value per row)")
            if hotness.is_floating_point() and bool(torch.isnan(hotness).any()):
                raise ValueError("CPUBufferedSource: hotness contains NaN")
        self.backing = backing
        self.capacity = capacity
        self.row_bytes = row_bytes
        self.stats = CPUBufferStats()
        pin = gpu.is_available() if pin_memory is None else bool(pin_memory)
        self.pin = pin
        # slot[v] = position of row v in the buffer, -1 when not buffered.
        self.slot = torch.full((n,), -1, dtype=torch.int32 if n < 2**31 else torch.int64)
        if capacity > 0:
            # Stable descending sort: equal hotness keeps the lower id first.
            order = torch.sort(hotness.double(), descending=True, stable=True).indices
            self.ids = torch.sort(order[:capacity]).values  # ascending: sequential disk reads
        else:
            self.ids = torch.empty(0, dtype=torch.int64)
        self.slot[self.ids] = torch.arange(capacity, dtype=self.slot.dtype)
        self.buffer = gpu.empty_host((capacity, f), backing.dtype, pin)
        for s in range(0, capacity, chunk_rows):
            e = min(s + chunk_rows, capacity)
            self.buffer[s:e] = backing.read(self.ids[s:e])
        self.stats.load_bytes = capacity * row_bytes

    # ------------------------------------------------------------------ FeatureSource protocol
    @property
    def num_rows(self) -> int:
        """N."""
        return self.backing.num_rows

    @property
    def dim(self) -> int:
        """F."""
        return self.backing.dim

    @property
    def dtype(self) -> torch.dtype:
        """Element type of the rows."""
        return self.backing.dtype

    @property
    def nbytes(self) -> int:
        """Host bytes the buffer occupies."""
        return self.capacity * self.row_bytes

    def contains(self, ids: torch.Tensor) -> torch.Tensor:
        """``(M,)`` bool mask, True where the row is in the buffer."""
        return self.slot[ids.cpu().long()] >= 0

    def read(self, ids: torch.Tensor) -> torch.Tensor:
        """Return rows ``ids``: buffered ones from host memory, the rest from ``backing``.

        Args:
            ids: ``(M,)`` int64 global row ids.

        Returns:
            ``(M, F)`` CPU tensor.
        """
        ids = torch.as_tensor(ids).cpu().long()
        if ids.dim() != 1:
            raise ValueError(f"CPUBufferedSource.read: ids must be 1-D, got shape "
                             f"{tuple(ids.shape)}")
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.num_rows):
            bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
            raise ValueError(f"CPUBufferedSource.read: row id {bad} outside [0, {self.num_rows})")
        slots = self.slot[ids].long()
        hit = slots >= 0
        n_hit = int(hit.sum())
        if n_hit == ids.numel():
            out = self.buffer[slots]
        else:
            out = gpu.empty_host((ids.numel(), self.dim), self.dtype, self.pin)
            out[hit] = self.buffer[slots[hit]]
            miss = ~hit
            out[miss] = self.backing.read(ids[miss])
        self.stats.hits += n_hit
        self.stats.misses += ids.numel() - n_hit
        self.stats.hit_bytes += n_hit * self.row_bytes
        return out

    def reset_stats(self) -> None:
        """Zero the access counters (``load_bytes`` is kept)."""
        self.stats = CPUBufferStats(load_bytes=self.stats.load_bytes)

    def __repr__(self) -> str:
        return (f"CPUBufferedSource(rows={self.capacity}/{self.num_rows}, "
                f"MiB={self.nbytes / 2**20:.1f}, backing={self.backing!r})")
