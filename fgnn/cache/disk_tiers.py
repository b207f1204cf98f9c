"""The GIDS tiers behind one extract call: device software cache, CPU buffer, storage (§3.2-3.4).

:class:`DiskTiers` gives the rows of one mini-batch on the training device, read fastest first:

1. the device software cache (:class:`~fgnn.cache.disk_window_cache.DeviceSoftwareCache`, §3.4),
2. the constant CPU buffer (:class:`~fgnn.cache.disk_cpu_buffer.CPUBufferedSource`, §3.3),
3. storage (:class:`~fgnn.cache.disk_source.DiskFeatureSource`).

As in GIDS, where the software cache sits in front of storage to conserve storage bandwidth
(§3.4) and CPU-buffer accesses are redirected around it (§3.3), the cache admits only rows read
from storage; the two memory tiers hold disjoint rows.

The caller owns the look-ahead: mini-batches enter the *window* (:meth:`DiskTiers.enter_window`)
when they are sampled (the loader, :mod:`fgnn.cache.disk_loader`) or leased from the global queue
(a Trainer, :mod:`fgnn.executors.trainer`), which registers them with the cache's future-reuse
counters; :meth:`DiskTiers.extract` is given the current mini-batch followed by those the caller
already holds. With an :class:`~fgnn.cache.disk_accumulator.AccessAccumulator`, the storage rows
of the current mini-batch and of the following ones are read in one batched, page-coalesced
request until the gathered node accesses reach the accumulator's threshold (§3.2); without it,
each mini-batch is read on its own.
"""

from __future__ import annotations

import time
from typing import Optional, Sequence

import torch

from fgnn import gpu
from fgnn.cache.disk_accumulator import AccessAccumulator
from fgnn.cache.disk_cpu_buffer import CPUBufferedSource
from fgnn.cache.disk_source import DiskFeatureSource
from fgnn.cache.disk_window_cache import DeviceSoftwareCache
from fgnn.cache.source import FeatureSource

__all__ = ["DiskTiers"]

#: Counters of :meth:`DiskTiers.take_stats` that are summed over mini-batches.
COUNTS = ("batches", "groups", "node_accesses", "device_rows", "cpu_rows", "storage_rows",
          "fallback_rows", "bytes_read", "read_calls", "pages", "evictions", "bypassed")


class DiskTiers:
    """Extract mini-batch rows through device cache, CPU buffer and storage.

    Args:
        source: the host tier: a :class:`CPUBufferedSource` over a :class:`DiskFeatureSource`, or
            the disk source itself.
        cache: optional device software cache (its ``device`` is the training device).
        window: W, mini-batches of look-ahead whose nodes hold future-reuse counts (§3.4); 0 turns
            the window off (the cache then evicts by its policy alone).
        accumulator: optional access accumulator (§3.2); None reads each mini-batch alone.
        max_merge: most mini-batches one accumulated read may span.
        device: training device when ``cache`` is None.

    Raises:
        ValueError: on a negative window or max_merge < 1.
    """

    def __init__(self, source: FeatureSource, cache: Optional[DeviceSoftwareCache] = None, *,
                 window: int = 0, accumulator: Optional[AccessAccumulator] = None,
                 max_merge: int = 64, device: torch.device | str = "cpu") -> None:
        if window < 0:
            raise ValueError(f"DiskTiers: window must be >= 0, got {window}")
        if max_merge < 1:
            raise ValueError(f"DiskTiers: max_merge must be >= 1, got {max_merge}")
        self.source, self.cache = source, cache
        self.window, self.accumulator, self.max_merge = int(window), accumulator, int(max_merge)
        self.device = cache.device if cache is not None else torch.device(device)
        self.disk = _find_disk(source)
        self.cpu_buffer = source if isinstance(source, CPUBufferedSource) else None
        self.row_bytes = source.dim * torch.empty((), dtype=source.dtype).element_size()
        self._staged_ids = torch.empty(0, dtype=torch.int64)
        self._staged_rows: Optional[torch.Tensor] = None
        self._group_left = 0
        self.extract_s = 0.0
        self._counts = dict.fromkeys(COUNTS, 0)
        self._base = self._tier_counts()

    # ------------------------------------------------------------------ window (§3.4)
    @property
    def windowed(self) -> bool:
        """Whether future-reuse counters are kept (a cache and W > 0)."""
        return self.cache is not None and self.window > 0

    def enter_window(self, input_nodes: torch.Tensor) -> None:
        """A mini-batch joined the look-ahead window: its (unique) nodes' counters rise."""
        if self.windowed:
            self.cache.add_future(input_nodes, assume_unique=True)

    def group_size(self, sizes: Sequence[int]) -> Optional[int]:
        """Mini-batches to read together, from the node-access counts of the current mini-batch
        and those after it: 1 without an accumulator, else the shortest prefix reaching the
        threshold; ``None`` when ``sizes`` is too short to reach it (and ``max_merge`` allows
        more)."""
        if self.accumulator is None:
            return 1
        threshold, total = self.accumulator.threshold(), 0
        for i, n in enumerate(sizes[:self.max_merge]):
            total += int(n)
            if total >= threshold:
                return i + 1
        return min(len(sizes), self.max_merge) if len(sizes) >= self.max_merge else None

    # ------------------------------------------------------------------ extract
    def extract(self, batches: Sequence[torch.Tensor]) -> torch.Tensor:
        """Rows of the current mini-batch on the training device.

        Args:
            batches: ``batches[0]`` holds the current mini-batch's unique input node ids, the rest
                those of the mini-batches the caller will extract next, in order (the accumulator
                may stage their storage rows in the same read).

        Returns:
            ``(M, F)`` rows, row ``i`` the features of ``batches[0][i]``.
        """
        if not batches:
            raise ValueError("DiskTiers.extract: no mini-batch given")
        t0 = time.perf_counter()
        nodes = batches[0]
        if self._group_left == 0:
            k = self.group_size([b.numel() for b in batches]) or len(batches)
            self._stage(batches[:max(1, min(k, len(batches)))])
            self._group_left = max(1, min(k, len(batches)))
            self._counts["groups"] += 1
        feats = self._extract(nodes)
        if self.windowed:
            self.cache.consume(nodes, assume_unique=True)
        self._group_left -= 1
        self._counts["batches"] += 1
        self._counts["node_accesses"] += int(nodes.numel())
        self.extract_s += time.perf_counter() - t0
        return feats

    def drop_staged(self) -> None:
        """Forget rows staged for mini-batches that will not come (e.g. at an epoch's end)."""
        self._staged_ids = torch.empty(0, dtype=torch.int64)
        self._staged_rows, self._group_left = None, 0

    def _stage(self, group: Sequence[torch.Tensor]) -> None:
        """Read once, from CPU buffer / disk, the rows of ``group`` not in the device cache."""
        self.drop_staged()  # the last group's rows are not needed any more: free them first
        ids = torch.unique(torch.cat([b.cpu().long() for b in group]))
        node_accesses = int(sum(b.numel() for b in group))
        if self.cache is not None and self.cache.capacity > 0:
            resident = self.cache.slot_of[ids.to(self.cache.device)].cpu() >= 0
            ids = ids[~resident]
        pages0 = self.disk.stats.pages if self.disk is not None else 0
        cpu0 = self.cpu_buffer.stats.hits if self.cpu_buffer is not None else 0
        rows = self.source.read(ids)
        if self.accumulator is not None:
            storage = (self.disk.stats.pages - pages0) if self.disk is not None else 0
            cpu_hits = (self.cpu_buffer.stats.hits - cpu0) if self.cpu_buffer is not None else 0
            disk_rows = ids.numel() - cpu_hits
            self.accumulator.update(node_accesses, node_accesses - disk_rows, storage)
        self._staged_ids, self._staged_rows = ids, rows

    def _extract(self, input_nodes: torch.Tensor) -> torch.Tensor:
        """Rows of ``input_nodes`` (unique ids) on the training device."""
        staged_ids, staged_rows = self._staged_ids, self._staged_rows

        def from_host(ids: torch.Tensor) -> torch.Tensor:
            ids = ids.cpu()
            cpu = int(self.cpu_buffer.contains(ids).sum()) if self.cpu_buffer is not None else 0
            self._counts["cpu_rows"] += cpu
            self._counts["storage_rows"] += ids.numel() - cpu
            pos = torch.searchsorted(staged_ids, ids).clamp_(max=max(staged_ids.numel() - 1, 0))
            found = (staged_ids[pos] == ids) if staged_ids.numel() else torch.zeros_like(
                ids, dtype=torch.bool)
            if bool(found.all()):
                return staged_rows[pos]
            out = torch.empty((ids.numel(), self.source.dim), dtype=self.source.dtype)
            out[found] = staged_rows[pos[found]]
            missing = ~found
            # Rows resident at staging time but evicted before their mini-batch ran.
            self._counts["fallback_rows"] += int(missing.sum())
            out[missing] = self.source.read(ids[missing])
            return out

        if self.cache is None:
            return gpu.to_device(from_host(input_nodes), self.device)
        admit = None
        if self.cpu_buffer is not None and self.cpu_buffer.capacity > 0:
            # The device cache conserves *storage* bandwidth (§3.4): rows the constant CPU
            # buffer holds are served from it and never take a cache line.
            admit = lambda ids: ~self.cpu_buffer.contains(ids)  # noqa: E731
        return self.cache.fetch(input_nodes, from_host, admit)

    # ------------------------------------------------------------------ counters
    def _tier_counts(self) -> dict[str, int]:
        d = self.disk.stats if self.disk is not None else None
        c = self.cache.stats if self.cache is not None else None
        return {"bytes_read": d.bytes_read if d else 0, "read_calls": d.read_calls if d else 0,
                "pages": d.pages if d else 0, "evictions": c.evictions if c else 0,
                "bypassed": c.bypassed if c else 0}

    def take_stats(self) -> dict[str, int]:
        """Counters since the last call (then restarted), JSON-serialisable.

        ``device_rows`` / ``cpu_rows`` / ``storage_rows`` split the node accesses by the tier that
        served them; ``bytes_read``, ``read_calls`` and ``pages`` are what storage actually read
        (whole 4 KiB pages, a group's rows once); ``evictions`` and ``bypassed`` are the device
        cache's; ``fallback_rows`` were staged but evicted before use and read again.
        """
        now = self._tier_counts()
        out = dict(self._counts)
        out.update({k: now[k] - self._base[k] for k in now})
        out["device_rows"] = out["node_accesses"] - out["cpu_rows"] - out["storage_rows"]
        self._counts, self._base = dict.fromkeys(COUNTS, 0), now
        return out

    def __repr__(self) -> str:
        return (f"DiskTiers(cache={self.cache!r}, window={self.window}, "
                f"accumulator={self.accumulator!r}, source={self.source!r})")


def _find_disk(source: FeatureSource) -> Optional[DiskFeatureSource]:
    """The DiskFeatureSource at the bottom of ``source`` (through CPU buffers), if any."""
    while source is not None:
        if isinstance(source, DiskFeatureSource):
            return source
        source = getattr(source, "backing", None)
    return None
