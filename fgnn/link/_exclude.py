"""Excluded seed edges as a per-sample lookup, for :class:`fgnn.link.sampler.ExcludingKHop`
(internal).

An excluded message edge ``u -> v`` sits in the row of ``v``. When ``v`` is a seed its row is
one of the first ``B`` rows of every hop's frontier (seeds take local ids ``0..B-1``), and the
sampled edges come out in row order, so only a prefix of each hop's draw needs a look-up
(:meth:`SeedRowPlan.drop`). Two look-ups, both a fixed handful of tensor operations per hop
whatever its size (the Sample stage on a CPU or a GPU is bound by the number of operations and
syncs here, not by their size):

* :class:`TablePlan` -- every excluded neighbour is a seed too (the link sampler's case: the
  edges join two scored endpoints) and ``B`` is at most :data:`TABLE_ROWS`: a persistent
  ``(N,)`` map from vertex to local seed id (:data:`TABLE_ROWS` for the other vertices) and a
  table of allowed (neighbour, row) pairs, neighbour-major: ``B`` bools per seed neighbour, and
  the one block of ``B`` that every other neighbour reads (so the look-ups touch about ``B**2``
  bools, not the whole ``(TABLE_ROWS + 1) x B`` table); a look-up is two gathers. Only the
  entries a sample set are reset when it ends.
* :class:`HashPlan` -- any other set of excluded edges in seed rows: the keys
  ``row * N + neighbour`` in an open-addressing hash table with linear probing; a look-up is one
  gather per probe (one or two probes in practice). A sorted-key ``torch.searchsorted`` costs a
  binary search per query instead, about ten times more on CPU.
"""

from __future__ import annotations

from typing import Optional

import torch

__all__ = ["TABLE_ROWS", "SeedRowPlan", "HashPlan", "TablePlan", "SeedTable"]

#: Most seeds a :class:`TablePlan` serves; its table holds ``B * (TABLE_ROWS + 1)`` bools
#: (at most 16 MiB).
TABLE_ROWS = 4095
_GOLDEN = -7046029254386353131  # 0x9E3779B97F4A7C15 as int64: Fibonacci hashing

Edges = tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]


def _hash(keys: torch.Tensor, bits: int) -> torch.Tensor:
    """Multiplicative hash of int64 ``keys`` into ``[0, 2**bits)`` (wrapping product, top bits)."""
    return ((keys * _GOLDEN) >> (64 - bits)) & ((1 << bits) - 1)


class SeedRowPlan:
    """Excluded edges whose rows are the first ``num_rows`` vertices of every frontier."""

    num_rows: int

    def keep(self, nbr: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
        """``(Q,)`` bool: the edges ``nbr[i] -> row dst[i]`` (``dst < num_rows``) to keep."""
        raise NotImplementedError

    def close(self) -> None:
        """Release what the plan holds (called once the sample is done)."""

    def drop(self, nbr: torch.Tensor, dst: torch.Tensor, w: Optional[torch.Tensor],
             num_frontier: int, rows_sorted: bool) -> Edges:
        """``(nbr, dst, w)`` without the excluded edges; ``dst`` are positions in a frontier
        of ``num_frontier`` vertices whose first ``num_rows`` are the seeds; ``rows_sorted``:
        ``dst`` is non-decreasing (the uniform samplers), so the seed rows' edges are a
        prefix of the draw and the rest is left as it is."""
        e = nbr.numel()
        if not rows_sorted:
            idx = torch.nonzero(dst < self.num_rows).squeeze(1)
            if idx.numel() == 0:
                return nbr, dst, w
            gone = idx.index_select(0, torch.nonzero(
                ~self.keep(nbr.index_select(0, idx), dst.index_select(0, idx))).squeeze(1))
            if gone.numel() == 0:
                return nbr, dst, w
            keep = torch.ones(e, dtype=torch.bool, device=nbr.device)
            keep[gone] = False
            kept = torch.nonzero(keep).squeeze(1)
            return tuple(None if t is None else t.index_select(0, kept)  # type: ignore
                         for t in (nbr, dst, w))
        m = e if num_frontier <= self.num_rows else int(torch.searchsorted(dst, self.num_rows))
        if m == 0:
            return nbr, dst, w
        kept = torch.nonzero(self.keep(nbr, dst) if m == e else
                             self.keep(nbr[:m], dst[:m])).squeeze(1)
        if kept.numel() == m:
            return nbr, dst, w
        if m == e:
            return tuple(None if t is None else t.index_select(0, kept)  # type: ignore
                         for t in (nbr, dst, w))
        return tuple(None if t is None else torch.cat([t[:m].index_select(0, kept), t[m:]])
                     for t in (nbr, dst, w))  # type: ignore


class HashPlan(SeedRowPlan):
    """Keys ``row * N + neighbour`` (``neighbour`` a global id, repeats fine) in a hash table.

    ``table`` has ``2**bits + probes - 1`` slots (``-1``: empty), at least 16 per key, so a
    key sits at most ``probes - 1`` slots after its hash. The table is built without a loop:
    keys sorted by hash take the slots ``i + cummax(hash - i)``, the first free slot at or
    after their hash.
    """

    def __init__(self, keys: torch.Tensor, num_rows: int, num_nodes: int) -> None:
        self.num_rows, self.num_nodes = num_rows, num_nodes
        self.bits = max(4, (16 * keys.numel() - 1).bit_length())
        hashed, order = _hash(keys, self.bits).sort()
        rank = torch.arange(keys.numel(), device=keys.device)
        slot = rank + torch.cummax(hashed - rank, 0).values
        self.probes = int((slot - hashed).max()) + 1 if keys.numel() else 1
        self.table = torch.full(((1 << self.bits) + self.probes - 1,), -1, dtype=keys.dtype,
                                device=keys.device)
        self.table.index_put_((slot,), keys.index_select(0, order))

    def keep(self, nbr: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:  # noqa: D102
        keys = torch.add(nbr, dst, alpha=self.num_nodes)
        at = _hash(keys, self.bits)
        miss = self.table.index_select(0, at) != keys
        for p in range(1, self.probes):
            miss &= self.table[p:].index_select(0, at) != keys
        return miss


class SeedTable:
    """The persistent scratch of :class:`TablePlan` on one device: ``local`` ``(N,)`` int32
    (:data:`TABLE_ROWS` off the seeds) and ``allowed``, a flat bool table, True off a sample.
    Not pickled (a sampler shipped elsewhere builds its own)."""

    def __init__(self) -> None:
        self.local: Optional[torch.Tensor] = None
        self.ids: Optional[torch.Tensor] = None  # 0, 1, ..., TABLE_ROWS - 1
        self.allowed: Optional[torch.Tensor] = None

    def __getstate__(self) -> dict:
        return {"local": None, "ids": None, "allowed": None}

    def ready(self, num_nodes: int, num_rows: int, device: torch.device) -> None:
        """Allocate (or grow) the scratch for ``num_rows`` seeds of a graph of ``num_nodes``."""
        if self.local is None or self.local.numel() != num_nodes or self.local.device != device:
            self.local = torch.full((num_nodes,), TABLE_ROWS, dtype=torch.int32, device=device)
            self.ids = torch.arange(TABLE_ROWS, dtype=torch.int32, device=device)
            self.allowed = None
        need = num_rows * (TABLE_ROWS + 1)
        if self.allowed is None or self.allowed.numel() < need:
            self.allowed = torch.ones(need, dtype=torch.bool, device=device)


class TablePlan(SeedRowPlan):
    """Excluded pairs of seeds (row, neighbour), both as local ids ``< num_rows``, in the
    dense table of a :class:`SeedTable` (which must be :meth:`~SeedTable.ready`), at
    ``neighbour * num_rows + row``."""

    def __init__(self, scratch: SeedTable, seeds: torch.Tensor, rows: torch.Tensor,
                 nbrs: torch.Tensor) -> None:
        self.scratch, self.seeds, self.num_rows = scratch, seeds, int(seeds.numel())
        scratch.local.index_copy_(0, seeds, scratch.ids[:self.num_rows])
        self.keys = torch.add(rows, nbrs, alpha=self.num_rows)
        scratch.allowed.index_fill_(0, self.keys, False)

    def keep(self, nbr: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:  # noqa: D102
        local = self.scratch.local.index_select(0, nbr)
        return self.scratch.allowed.index_select(0, torch.add(dst, local, alpha=self.num_rows))

    def close(self) -> None:  # noqa: D102
        self.scratch.allowed.index_fill_(0, self.keys, True)
        self.scratch.local.index_fill_(0, self.seeds, TABLE_ROWS)
