"""A GIDS-style loader: sampling ahead, window buffering and accumulated disk reads (§3.2-3.4).

For every seed batch it yields ``(sample, features)``; ``features[i]`` is the row of
``sample.input_nodes[i]`` on the training device, read through :class:`~fgnn.cache.disk_tiers.
DiskTiers` (device software cache, constant CPU buffer, storage).

Sampling runs ahead of aggregation (training never changes what is sampled, §3.2): the next
``window`` mini-batches are kept in the window buffer and registered with the cache's future-reuse
counters. With an :class:`~fgnn.cache.disk_accumulator.AccessAccumulator` the loader samples further
ahead until the gathered node accesses reach the accumulator's threshold, and the tiers read the
storage rows of that whole group with one batched, page-coalesced request (many reads in flight);
without it, each mini-batch is read on its own. The runtime's Trainers use the same tiers with the
global queue as their look-ahead (:mod:`fgnn.executors.trainer`).
"""

from __future__ import annotations

import time
from collections import deque
from typing import Iterable, Iterator, Optional

import torch

from fgnn.cache.disk_accumulator import AccessAccumulator
from fgnn.cache.disk_tiers import DiskTiers
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
        self.tiers = DiskTiers(source, cache, window=window, accumulator=accumulator,
                               max_merge=max_merge, device=device)
        self.source, self.cache = source, cache
        self.window, self.accumulator, self.max_merge = int(window), accumulator, int(max_merge)
        self.generator = generator
        self.device = self.tiers.device
        self.disk, self.cpu_buffer = self.tiers.disk, self.tiers.cpu_buffer
        self.row_bytes = self.tiers.row_bytes
        self.reset_stats()

    def reset_stats(self) -> None:
        """Zero the loader's own counters (tier counters live on the tiers)."""
        self.timing = {"sample_s": 0.0, "extract_s": 0.0}
        self.tiers.extract_s = 0.0
        self.counts = {"batches": 0, "groups": 0, "node_accesses": 0, "cpu_rows": 0,
                       "storage_rows": 0, "fallback_rows": 0}

    def __len__(self) -> int:
        return len(self.batches)

    # ------------------------------------------------------------------ iteration
    def __iter__(self) -> Iterator[tuple[Sample, torch.Tensor]]:
        ahead: deque[Sample] = deque()
        next_batch = 0  # index of the next seed batch to sample
        tiers = self.tiers
        tiers.drop_staged()

        def sample_one() -> bool:
            nonlocal next_batch
            if next_batch >= len(self.batches):
                return False
            t0 = time.perf_counter()
            s = self.sampler.sample(self.graph, self.batches[next_batch], self.generator)
            s.task_id = next_batch
            self.timing["sample_s"] += time.perf_counter() - t0
            ahead.append(s)
            tiers.enter_window(s.input_nodes)  # the window buffer (§3.4)
            next_batch += 1
            return True

        while ahead or next_batch < len(self.batches):
            while len(ahead) < 1 + self.window and sample_one():
                pass
            # the accumulator may want more mini-batches than the window holds (§3.2)
            while tiers.group_size([s.input_nodes.numel() for s in ahead]) is None \
                    and sample_one():
                pass
            sample = ahead.popleft()
            feats = tiers.extract([sample.input_nodes] + [s.input_nodes for s in ahead])
            st = tiers.take_stats()
            for key in self.counts:
                self.counts[key] += st[key]
            yield sample, feats

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
        timing = {**self.timing, "extract_s": self.tiers.extract_s}
        out: dict = {**c, **timing, "row_bytes": self.row_bytes}
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
