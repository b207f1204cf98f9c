"""A GIDS-style loader: sampling ahead, window buffering and accumulated disk reads (§3.2-3.4).

For every seed batch it yields ``(sample, features)``; ``features[i]`` is the row of
``sample.input_nodes[i]`` on the training device. Rows come from three tiers, fastest first:

1. the device software cache (:class:`~fgnn.cache.disk_window_cache.DeviceSoftwareCache`, §3.4),
2. the constant CPU buffer (:class:`~fgnn.cache.disk_cpu_buffer.CPUBufferedSource`, §3.3),
3. storage (:class:`~fgnn.cache.disk_source.DiskFeatureSource`).

As in GIDS, where the software cache sits in front of storage to conserve storage bandwidth
(§3.4) and CPU-buffer accesses are redirected around it (§3.3), the cache admits only rows read
from storage; the two memory tiers hold disjoint rows.

Sampling runs ahead of aggregation (training never changes what is sampled, §3.2): the next
``window`` mini-batches are kept in the window buffer and registered with the cache's future-reuse
counters. With an :class:`~fgnn.cache.disk_accumulator.AccessAccumulator` the loader samples further
ahead until the gathered node accesses reach the accumulator's threshold and reads the storage rows
of that whole group with one batched, page-coalesced request (many reads in flight); without it,
each mini-batch is read on its own.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Iterable, Iterator, Optional

import torch

from fgnn.cache.disk_accumulator import AccessAccumulator
from fgnn.cache.disk_cpu_buffer import CPUBufferedSource
from fgnn.cache.disk_source import DiskFeatureSource
from fgnn.cache.disk_window_cache import DeviceSoftwareCache
from fgnn.cache.source import FeatureSource
from fgnn.graph import CSRGraph
from fgnn.sampling.base import Sample, Sampler

__all__ = ["DiskFeatureLoader"]


class DiskFeatureLoader:
    """Iterate ``(sample, features)`` over seed batches through the GIDS tiers.

    Args:
        sampler: any :class:`~fgnn.sampling.base.Sampler`.
        graph: topology the sampler reads.
        batches: seed batches, ``(B,)`` int64 each (one epoch).
        source: the host tier: a :class:`CPUBufferedSource` over a :class:`DiskFeatureSource`,
            or the disk source itself.
        cache: optional device software cache (its ``device`` is the training device).
        window: W, mini-batches of look-ahead registered with the cache (§3.4); 0 disables.
        accumulator: optional access accumulator (§3.2); None reads each mini-batch alone.
        max_merge: most mini-batches one accumulated read may span.
        generator: random source for the sampler.
        device: training device when ``cache`` is None.

    Yields:
        ``(sample, features)``: ``features`` is ``(M, F)`` on the training device, row ``i`` the
        features of ``sample.input_nodes[i]``. Counters: :meth:`report`.

    Raises:
        ValueError: on a negative window or max_merge < 1.
    """

    def __init__(self, sampler: Sampler, graph: CSRGraph, batches: Iterable[torch.Tensor], *,
                 source: FeatureSource, cache: Optional[DeviceSoftwareCache] = None,
                 window: int = 8, accumulator: Optional[AccessAccumulator] = None,
                 max_merge: int = 64, generator: Optional[torch.Generator] = None,
                 device: torch.device | str = "cpu") -> None:
        if window < 0:
            raise ValueError(f"DiskFeatureLoader: window must be >= 0, got {window}")
        if max_merge < 1:
            raise ValueError(f"DiskFeatureLoader: max_merge must be >= 1, got {max_merge}")
        self.sampler, self.graph = sampler, graph
        self.batches = list(batches)
        self.source, self.cache = source, cache
        self.window, self.accumulator, self.max_merge = int(window), accumulator, int(max_merge)
        self.generator = generator
        self.device = cache.device if cache is not None else torch.device(device)
        self.disk = _find_disk(source)
        self.cpu_buffer = source if isinstance(source, CPUBufferedSource) else None
        self.row_bytes = source.dim * torch.empty((), dtype=source.dtype).element_size()
        self.reset_stats()

    def reset_stats(self) -> None:
        """Zero the loader's own counters (tier counters live on the tiers)."""
        self.timing = {"sample_s": 0.0, "extract_s": 0.0}
        self.counts = {"batches": 0, "groups": 0, "node_accesses": 0, "cpu_rows": 0,
                       "storage_rows": 0, "fallback_rows": 0}

    def __len__(self) -> int:
        return len(self.batches)

    # ------------------------------------------------------------------ iteration
    def __iter__(self) -> Iterator[tuple[Sample, torch.Tensor]]:
        ahead: deque[Sample] = deque()
        next_batch = 0  # index of the next seed batch to sample
        registered = 0  # batches registered with the window counters so far
        consumed = 0
        staged_ids = torch.empty(0, dtype=torch.int64)
        staged_rows: Optional[torch.Tensor] = None
        group_left = 0

        def sample_until(k: int) -> None:
            nonlocal next_batch
            while len(ahead) < k and next_batch < len(self.batches):
                t0 = time.perf_counter()
                s = self.sampler.sample(self.graph, self.batches[next_batch], self.generator)
                s.task_id = next_batch
                self.timing["sample_s"] += time.perf_counter() - t0
                ahead.append(s)
                next_batch += 1

        while consumed < len(self.batches):
            sample_until(1 + self.window)
            if self.cache is not None and self.window > 0:
                # Window buffer: the current batch and the next W hold future-reuse counts.
                while registered < min(consumed + 1 + self.window, next_batch):
                    self.cache.add_future(ahead[registered - consumed].input_nodes,
                                          assume_unique=True)
                    registered += 1
            t0, sampled0 = time.perf_counter(), self.timing["sample_s"]
            if group_left == 0:
                group = self._group_size(ahead, sample_until)
                staged_ids, staged_rows = self._stage(list(ahead)[:group])
                group_left = group
                self.counts["groups"] += 1
            sample = ahead.popleft()
            feats = self._extract(sample.input_nodes, staged_ids, staged_rows)
            if self.cache is not None and self.window > 0:
                self.cache.consume(sample.input_nodes, assume_unique=True)
            # Extract time excludes the look-ahead sampling the accumulator triggers.
            self.timing["extract_s"] += (time.perf_counter() - t0
                                         - (self.timing["sample_s"] - sampled0))
            group_left -= 1
            consumed += 1
            self.counts["batches"] += 1
            self.counts["node_accesses"] += int(sample.input_nodes.numel())
            yield sample, feats

    def _group_size(self, ahead: deque, sample_until) -> int:
        """Mini-batches to merge: 1, or (accumulator) until the threshold of node accesses."""
        if self.accumulator is None:
            return 1
        threshold = self.accumulator.threshold()
        group, total = 0, 0
        while group < self.max_merge:
            sample_until(group + 1)
            if group >= len(ahead):
                break
            total += int(ahead[group].input_nodes.numel())
            group += 1
            if total >= threshold:
                break
        return max(group, 1)

    def _stage(self, group: list[Sample]) -> tuple[torch.Tensor, torch.Tensor]:
        """Read once, from CPU buffer / disk, the rows of ``group`` not in the device cache."""
        ids = torch.unique(torch.cat([s.input_nodes.cpu().long() for s in group]))
        node_accesses = int(sum(s.input_nodes.numel() for s in group))
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
        return ids, rows

    def _extract(self, input_nodes: torch.Tensor, staged_ids: torch.Tensor,
                 staged_rows: torch.Tensor) -> torch.Tensor:
        """Rows of ``input_nodes`` (unique ids) on the training device."""

        def from_host(ids: torch.Tensor) -> torch.Tensor:
            ids = ids.cpu()
            cpu = int(self.cpu_buffer.contains(ids).sum()) if self.cpu_buffer is not None else 0
            self.counts["cpu_rows"] += cpu
            self.counts["storage_rows"] += ids.numel() - cpu
            pos = torch.searchsorted(staged_ids, ids).clamp_(max=max(staged_ids.numel() - 1, 0))
            found = (staged_ids[pos] == ids) if staged_ids.numel() else torch.zeros_like(
                ids, dtype=torch.bool)
            if bool(found.all()):
                return staged_rows[pos]
            out = torch.empty((ids.numel(), self.source.dim), dtype=self.source.dtype)
            out[found] = staged_rows[pos[found]]
            missing = ~found
            # Rows resident at staging time but evicted before their batch ran.
            self.counts["fallback_rows"] += int(missing.sum())
            out[missing] = self.source.read(ids[missing])
            return out

        if self.cache is None:
            return from_host(input_nodes).to(self.device, non_blocking=True)
        admit = None
        if self.cpu_buffer is not None and self.cpu_buffer.capacity > 0:
            # The device cache conserves *storage* bandwidth (§3.4): rows the constant CPU
            # buffer holds are served from it and never take a cache line.
            admit = lambda ids: ~self.cpu_buffer.contains(ids)  # noqa: E731
        return self.cache.fetch(input_nodes, from_host, admit)

    # ------------------------------------------------------------------ report
    def report(self) -> dict:
        """Rows, hit rates and bytes per tier, times and counts (JSON-serialisable).

        ``tiers`` splits every node access of every mini-batch by the tier that served it:
        ``device`` (cache hit), ``cpu`` (constant CPU buffer) or ``storage`` (read from disk, in
        this mini-batch's group); ``storage.bytes_read`` is what ``pread`` actually returned
        (whole pages, shared pages and rows read once per group).
        """
        c = self.counts
        n = c["node_accesses"]
        device = n - c["cpu_rows"] - c["storage_rows"]
        out: dict = {**c, **self.timing, "row_bytes": self.row_bytes}
        rate = (lambda k: k / n) if n else (lambda k: 0.0)
        out["tiers"] = {
            "device": {"rows": device, "bytes": device * self.row_bytes, "hit_rate": rate(device)},
            "cpu": {"rows": c["cpu_rows"], "bytes": c["cpu_rows"] * self.row_bytes,
                    "hit_rate": rate(c["cpu_rows"])},
            "storage": {"rows": c["storage_rows"], "share": rate(c["storage_rows"]),
                        "bytes_read": self.disk.stats.bytes_read if self.disk else None},
        }
        out["device_hit_rate"], out["cpu_hit_rate"] = rate(device), rate(c["cpu_rows"])
        if self.cache is not None:
            out["device_cache"] = self.cache.stats.as_dict()
        if self.cpu_buffer is not None:
            out["cpu_buffer"] = self.cpu_buffer.stats.as_dict()
        if self.disk is not None:
            out["disk"] = self.disk.stats.as_dict()
            out["disk_bytes"] = self.disk.stats.bytes_read
        return out


def _find_disk(source: FeatureSource) -> Optional[DiskFeatureSource]:
    """The DiskFeatureSource at the bottom of ``source`` (through CPU buffers), if any."""
    while source is not None:
        if isinstance(source, DiskFeatureSource):
            return source
        source = getattr(source, "backing", None)
    return None
