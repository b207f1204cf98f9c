"""Excluded seed edges as a per-sample lookup, for :class:`fgnn.link.sampler.ExcludingKHop`
(internal).

An excluded message edge ``u -> v`` sits in the row of ``v``, and when ``v`` is a seed that row
is one of the first ``B`` rows of every hop's frontier (seeds take local ids ``0..B-1``). Each
hop's draw is filtered by one look-up over all its edges (:meth:`SeedRowPlan.drop`: the look-up,
one ``nonzero``, a gather of the kept edges), a fixed handful of tensor operations whatever the
hop's size: the Sample stage, on a CPU or a GPU, is bound by the number of operations and host
syncs here rather than by their size. Two look-ups:

* :class:`TablePlan` -- every excluded neighbour is a seed too (the link sampler's case: the
  edges join two scored endpoints) and ``B`` is at most :data:`TABLE_ROWS`: a persistent
  ``(B + 1) x (B + 1)`` table of allowed (row, neighbour) pairs of local ids, looked up after
  the remap, when the neighbours are local ids as well (seeds ``0..B-1``; row and column ``B``
  stand for every vertex off the seeds). A look-up is a clamp or two, an add and one gather
  (the remap's own gather gives the neighbours' local ids, so the vertex -> seed map and its
  gather of the previous version are gone). Only the entries a sample set are reset when it
  ends.
* :class:`HashPlan` -- any other set of excluded edges in seed rows: the keys
  ``row * N + neighbour`` in an open-addressing hash table with linear probing; a look-up is one
  gather per probe (one or two probes in practice). A sorted-key ``torch.searchsorted`` costs a
  binary search per query instead, about ten times more on CPU.
"""

from __future__ import annotations

from typing import Optional

import torch

__all__ = ["TABLE_ROWS", "SeedRowPlan", "HashPlan", "TablePlan", "SeedTable"]

#: Most seeds a :class:`TablePlan` serves; its table holds ``(B + 1) ** 2`` bools (at most
#: 16 MiB).
TABLE_ROWS = 4095
_GOLDEN = -7046029254386353131  # 0x9E3779B97F4A7C15 as int64: Fibonacci hashing

Edges = tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]


def _hash(keys: torch.Tensor, bits: int) -> torch.Tensor:
    """Multiplicative hash of int64 ``keys`` into ``[0, 2**bits)`` (wrapping product, top bits)."""
    return ((keys * _GOLDEN) >> (64 - bits)) & ((1 << bits) - 1)


class SeedRowPlan:
    """Excluded edges whose rows are the first ``num_rows`` vertices of every frontier."""

    num_rows: int

    def keep(self, nbr: torch.Tensor, dst: torch.Tensor, seed_rows_only: bool = False
             ) -> torch.Tensor:
        """``(Q,)`` bool: the edges ``nbr[i] -> row dst[i]`` to keep (rows ``>= num_rows``
        keep all; ``seed_rows_only``: the caller knows there are none)."""
        raise NotImplementedError

    def close(self) -> None:
        """Release what the plan holds (called once the sample is done)."""

    def drop(self, nbr: torch.Tensor, dst: torch.Tensor, w: Optional[torch.Tensor],
             num_frontier: int) -> Edges:
        """``(nbr, dst, w)`` without the excluded edges; ``dst`` are positions in a frontier
        of ``num_frontier`` vertices whose first ``num_rows`` are the seeds (the other rows
        keep every edge)."""
        kept = torch.nonzero(self.keep(nbr, dst, num_frontier <= self.num_rows)).squeeze(1)
        if kept.numel() == nbr.numel():
            return nbr, dst, w
        return tuple(None if t is None else t.index_select(0, kept)  # type: ignore
                     for t in (nbr, dst, w))


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

    def keep(self, nbr: torch.Tensor, dst: torch.Tensor, seed_rows_only: bool = False
             ) -> torch.Tensor:  # noqa: D102
        keys = torch.add(nbr, dst, alpha=self.num_nodes)
        at = _hash(keys, self.bits)
        miss = self.table.index_select(0, at) != keys
        for p in range(1, self.probes):
            miss &= self.table[p:].index_select(0, at) != keys
        return miss


class SeedTable:
    """The persistent scratch of :class:`TablePlan` on one device: ``allowed``, a flat bool
    table, True off a sample. Not pickled (a sampler shipped elsewhere builds its own)."""

    def __init__(self) -> None:
        self.allowed: Optional[torch.Tensor] = None

    def __getstate__(self) -> dict:
        return {"allowed": None}

    def ready(self, num_rows: int, device: torch.device) -> None:
        """Allocate (or grow) the scratch for ``num_rows`` seeds."""
        need = (num_rows + 1) ** 2
        if self.allowed is None or self.allowed.numel() < need or self.allowed.device != device:
            self.allowed = torch.ones(need, dtype=torch.bool, device=device)


class TablePlan(SeedRowPlan):
    """Excluded pairs of seeds (row, neighbour), both as local ids ``< num_rows``, in the
    dense table of a :class:`SeedTable` (which must be :meth:`~SeedTable.ready`), at
    ``row * (num_rows + 1) + neighbour``; row and column ``num_rows`` (every vertex off the
    seeds) are always True.

    The look-up runs *after* the remap (:func:`fgnn.sampling.remap.sample_layers`'s
    ``edge_filter``): the neighbours are then local ids too, and the seeds are ``0..B-1``, so no
    vertex map of its own is needed. An excluded edge joins two seeds, already in the sample, so
    dropping it after the remap numbers the new vertices as dropping it before would. Per hop:
    a clamp of the neighbours (and of the rows, past the seeds' own hop), an add, one gather.

    Args:
        scratch: the table.
        num_rows: B, the number of seeds.
        rows, nbrs: ``(X,)`` local ids of the excluded message edges ``nbrs[i] -> rows[i]``.
        both: exclude ``rows[i] -> nbrs[i]`` too.
    """

    def __init__(self, scratch: SeedTable, num_rows: int, rows: torch.Tensor,
                 nbrs: torch.Tensor, both: bool = False) -> None:
        self.scratch, self.num_rows = scratch, num_rows
        self.keys = torch.add(nbrs, rows, alpha=num_rows + 1)
        if both:
            self.keys = torch.cat([self.keys, torch.add(rows, nbrs, alpha=num_rows + 1)])
        scratch.allowed.index_fill_(0, self.keys, False)

    def keep(self, nbr: torch.Tensor, dst: torch.Tensor, seed_rows_only: bool = False
             ) -> torch.Tensor:  # noqa: D102 (``nbr``: local ids)
        b = self.num_rows
        row = dst if seed_rows_only else dst.clamp(max=b)  # off the seeds: True
        return self.scratch.allowed.index_select(0, torch.add(nbr.clamp(max=b), row,
                                                              alpha=b + 1))

    def close(self) -> None:  # noqa: D102
        self.scratch.allowed.index_fill_(0, self.keys, True)
