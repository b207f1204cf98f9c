"""The device software cache of GIDS with window buffering (§3.4), plus LRU / random baselines.

GIDS keeps recently read feature rows in a GPU software cache (BaM's application-defined cache,
random eviction by default). *Window buffering* samples the next ``W`` mini-batches ahead, keeps
their node ids in a window buffer, and gives every node a **future-reuse counter**: the number of
its occurrences in the upcoming mini-batches of the window (§3.4, Fig. 6 steps 1-4). A cached row
whose counter is positive is in the "USE" state and is never evicted; the counter falls each time
the row is used during aggregation, and at 0 the row is "Safe to Evict" again. With ``W = 0`` the
cache degenerates to random eviction, the paper's baseline (§4.5).

Counter bookkeeping here: when a mini-batch enters the window, ``reuse[v] += 1`` for each of its
(unique) nodes; when the mini-batch is aggregated, ``reuse[v] -= 1``. While a mini-batch is being
aggregated its own rows therefore count as "in use", and after it, ``reuse[v]`` is the number of
future window batches holding ``v`` -- the Fig. 6 counter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch

from fgnn import gpu
from fgnn.cache.hit_stats import HitStats

__all__ = ["CacheStats", "DeviceSoftwareCache", "EVICTION_POLICIES"]

#: ``window``: GIDS window buffering (victims among zero-counter rows, chosen at random like BaM);
#: ``lru``: least recently used; ``random``: BaM's default random eviction.
EVICTION_POLICIES = ("window", "lru", "random")


@dataclass
class CacheStats(HitStats):
    """Counters of a :class:`DeviceSoftwareCache`.

    Attributes:
        hits: rows found in the cache.
        misses: rows not found (read from the lower tiers).
        insertions: rows written into the cache.
        evictions: resident rows replaced.
        bypassed: missed rows not cached because every resident row was protected (window).
        hit_bytes: bytes served from the cache.
    """

    insertions: int = 0
    evictions: int = 0
    bypassed: int = 0
    hit_bytes: int = 0


class DeviceSoftwareCache:
    """A fixed-capacity row cache on the training device with a pluggable eviction policy.

    All bookkeeping is vectorised tensors on ``device``: ``slot_of`` ``(N,)`` (slot or -1),
    ``row_of`` ``(C,)`` (row or -1), ``last_use`` ``(C,)`` (clock of the last hit/insert) and the
    window's ``reuse`` ``(N,)`` future-reuse counters.

    Args:
        num_rows: N, rows of the feature matrix.
        capacity: C, rows the cache holds (0 disables caching).
        dim: F.
        dtype: element type of the rows.
        device: where rows and metadata live (``"cuda:0"`` on a GPU machine).
        policy: one of :data:`EVICTION_POLICIES`.
        seed: seed of the random victim choice.

    Raises:
        ValueError: on a negative size or unknown policy.
    """

    def __init__(self, num_rows: int, capacity: int, dim: int, dtype: torch.dtype = torch.float32,
                 device: torch.device | str = "cpu", policy: str = "window", seed: int = 0) -> None:
        if policy not in EVICTION_POLICIES:
            raise ValueError(f"DeviceSoftwareCache: policy must be one of {EVICTION_POLICIES}, "
                             f"got {policy!r}")
        if num_rows < 0 or capacity < 0 or dim < 1:
            raise ValueError(f"DeviceSoftwareCache: need num_rows >= 0, capacity >= 0, dim >= 1; "
                             f"got num_rows={num_rows}, capacity={capacity}, dim={dim}")
        self.num_rows, self.dim = int(num_rows), int(dim)
        self.capacity = min(int(capacity), self.num_rows)
        self.policy = policy
        self.device = torch.device(device)
        self.data = torch.empty((self.capacity, dim), dtype=dtype, device=self.device)
        self.row_bytes = dim * self.data.element_size()
        self.slot_of = torch.full((num_rows,), -1, dtype=torch.int64, device=self.device)
        self.row_of = torch.full((self.capacity,), -1, dtype=torch.int64, device=self.device)
        self.last_use = torch.zeros(self.capacity, dtype=torch.int64, device=self.device)
        self.reuse = torch.zeros(num_rows, dtype=torch.int32, device=self.device)
        self.clock = 0
        self.stats = CacheStats()
        self.last_evicted = torch.empty(0, dtype=torch.int64, device=self.device)
        self._gen = torch.Generator(device=self.device).manual_seed(seed)

    # ------------------------------------------------------------------ window buffer (§3.4)
    def add_future(self, ids: torch.Tensor, assume_unique: bool = False) -> None:
        """A mini-batch entered the window: ``reuse[v] += 1`` per unique node (Fig. 6 ②-④).

        Args:
            ids: the mini-batch's node ids.
            assume_unique: skip deduplication (``Sample.input_nodes`` has no repeats).
        """
        ids = ids.to(self.device, torch.int64)
        if not assume_unique:
            ids = torch.unique(ids)
        self.reuse[ids] += 1

    def consume(self, ids: torch.Tensor, assume_unique: bool = False) -> None:
        """A mini-batch was aggregated: its nodes' counters fall by one (floored at 0)."""
        ids = ids.to(self.device, torch.int64)
        if not assume_unique:
            ids = torch.unique(ids)
        self.reuse[ids] = (self.reuse[ids] - 1).clamp_(min=0)

    # ------------------------------------------------------------------ lookups
    def resident(self) -> torch.Tensor:
        """Sorted ids of the rows in the cache."""
        return torch.sort(self.row_of[self.row_of >= 0]).values

    def lookup(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Find rows in the cache (marks hits as used).

        Args:
            ids: ``(M,)`` int64 row ids on any device.

        Returns:
            ``(hit, slots)``: ``(M,)`` bool mask and ``(M,)`` slots (-1 on a miss), on ``device``.
        """
        ids = ids.to(self.device, torch.int64)
        slots = self.slot_of[ids]
        hit = slots >= 0
        self.clock += 1
        self.last_use[slots[hit]] = self.clock
        return hit, slots

    def fetch(self, ids: torch.Tensor,
              read_missing: Callable[[torch.Tensor], torch.Tensor],
              admit: Optional[Callable[[torch.Tensor], torch.Tensor]] = None) -> torch.Tensor:
        """Rows ``ids`` from the cache, the misses from ``read_missing``, then cache the misses.

        Args:
            ids: ``(M,)`` int64 **unique** row ids.
            read_missing: returns the ``(K, F)`` rows of the K missed ids (any device).
            admit: optional filter, ``(K,)`` bool mask of the missed ids that may be cached
                (the loader admits only rows that came from storage, §3.4).

        Returns:
            ``(M, F)`` rows on ``device``.
        """
        ids = ids.to(self.device, torch.int64)
        self.last_evicted = ids.new_empty(0)
        hit, slots = self.lookup(ids)
        out = torch.empty((ids.numel(), self.dim), dtype=self.data.dtype, device=self.device)
        out[hit] = self.data[slots[hit]]
        miss = ~hit
        miss_ids = ids[miss]
        n_hit = int(hit.sum())
        self.stats.hits += n_hit
        self.stats.misses += int(miss_ids.numel())
        self.stats.hit_bytes += n_hit * self.row_bytes
        if miss_ids.numel():
            rows = gpu.to_device(read_missing(miss_ids), self.device)
            out[miss] = rows
            if admit is not None:
                keep = admit(miss_ids).to(self.device)
                miss_ids, rows = miss_ids[keep], rows[keep]
            self.insert(miss_ids, rows)
        return out

    # ------------------------------------------------------------------ insertion / eviction
    def insert(self, ids: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """Cache rows ``ids`` (unique, not resident), evicting by the policy.

        Free slots are used first; then victims are chosen. Under ``window`` only rows with a zero
        future-reuse counter are eligible victims (§3.4): if there are fewer of those than rows to
        insert, the rows with the largest counters are inserted and the rest bypass the cache.

        Returns:
            Ids of the evicted rows (also kept in ``last_evicted``).
        """
        ids = ids.to(self.device, torch.int64)
        rows = rows.to(self.device)
        self.last_evicted = ids.new_empty(0)
        if self.capacity == 0 or ids.numel() == 0:
            self.stats.bypassed += int(ids.numel())
            return self.last_evicted
        free = torch.nonzero(self.row_of < 0).flatten()
        need = ids.numel() - free.numel()
        victims = free.new_empty(0)
        if need > 0:
            victims = self._victims(need)
        slots = torch.cat([free, victims])
        k = min(ids.numel(), slots.numel())
        if k < ids.numel():
            # Prefer the rows the window says will be reused soonest/most.
            order = torch.sort(self.reuse[ids], descending=True, stable=True).indices[:k]
            self.stats.bypassed += int(ids.numel() - k)
            ids, rows = ids[order], rows[order]
        slots = slots[:k]
        old = self.row_of[slots]
        evicted = old[old >= 0]
        self.slot_of[evicted] = -1
        self.row_of[slots] = ids
        self.slot_of[ids] = slots
        self.data[slots] = rows
        self.clock += 1
        self.last_use[slots] = self.clock
        self.stats.insertions += k
        self.stats.evictions += int(evicted.numel())
        self.last_evicted = evicted
        return evicted

    def _victims(self, need: int) -> torch.Tensor:
        """Up to ``need`` occupied slots to evict, by the policy."""
        occupied = torch.nonzero(self.row_of >= 0).flatten()
        if self.policy == "window":
            occupied = occupied[self.reuse[self.row_of[occupied]] == 0]
        if occupied.numel() <= need:
            return occupied
        if self.policy == "lru":
            return occupied[torch.topk(self.last_use[occupied], need, largest=False).indices]
        perm = torch.randperm(occupied.numel(), generator=self._gen, device=self.device)
        return occupied[perm[:need]]

    def reset_stats(self) -> None:
        """Zero the counters."""
        self.stats = CacheStats()

    @property
    def nbytes(self) -> int:
        """Device bytes of the cached rows."""
        return self.capacity * self.row_bytes

    def __repr__(self) -> str:
        return (f"DeviceSoftwareCache(capacity={self.capacity}/{self.num_rows}, "
                f"policy={self.policy!r}, device={self.device})")
