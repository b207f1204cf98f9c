"""Where one device of a cache group reads each vertex's feature row.

Song & Jiang §3.2 give every device two ``(N,)`` arrays: ``dev_num[v]``, the device to read
``v`` from (``-1`` = host), and ``buf_pos[v]``, its row in that device's buffer. Held densely
that is 9 to 16 bytes a vertex in every Trainer, more than the cache itself on a graph of
10^8 vertices. A :class:`CacheLookup` answers the same two questions from

* the group's holder bits (:meth:`Placement.holder_bits
  <fgnn.cache.placement.Placement.holder_bits>`, one byte a vertex up to 8 devices): one
  read-only map, the same for every device of the group, so the processes of a host share one
  copy (the Samplers mark against the same map);
* per device, its buffer's ids sorted with their rows: ``O(C)``, a binary search per cached
  row of a batch; devices with the same ids (Rule 1's replicas) share one table.

``dev_num[v]`` is the device itself when it holds ``v``, else the lowest-numbered holder, else
``-1``; ``buf_pos[v]`` is the row of ``v`` in that device's buffer (for the host: ``v``).
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

__all__ = ["CacheLookup", "read_from"]


#: Read-from tables of groups of at most 8 devices, by ``(local, num_devices, device)``.
_TABLES: dict[tuple[int, int, str], torch.Tensor] = {}


def read_from(bits: torch.Tensor, local: int, num_devices: int) -> torch.Tensor:
    """``(M,)`` int64 device each row is read from, given its holder bits: ``local`` when its
    bit is set, else the lowest-numbered device holding it, else ``-1`` (host). On ``bits``'
    device, with no host sync: one gather from a 256-entry table up to 8 devices."""
    if num_devices <= 8 and bits.dtype == torch.uint8:
        key = (local, num_devices, str(bits.device))
        table = _TABLES.get(key)
        if table is None:
            table = _TABLES[key] = _read_from(torch.arange(256), local, num_devices).to(
                bits.device)
        return table.index_select(0, bits.long())
    return _read_from(bits, local, num_devices)


def _read_from(bits: torch.Tensor, local: int, num_devices: int) -> torch.Tensor:
    """:func:`read_from` bit by bit, for any number of devices."""
    bits = bits.long()
    dev = torch.full_like(bits, -1)
    others = bits & ~(1 << local)
    for d in range(num_devices - 1, -1, -1):  # the lowest-numbered peer wins
        dev.masked_fill_(((others >> d) & 1).bool(), d)
    dev.masked_fill_(((bits >> local) & 1).bool(), local)
    return dev


class CacheLookup:
    """``dev_num`` and ``buf_pos`` of device ``local`` in a group, from the group's holder bits
    and each device's cached ids.

    Args:
        holders: ``(N,)`` integer holder bits (bit ``d`` set: device ``d`` caches the vertex),
            read only: it may be a view of memory other processes share. ``None``: nothing is
            cached anywhere.
        buffers: each device's cached ids in buffer-row order (``Placement.buffers``).
        local: this device's index in the group.
        num_nodes: N (needed when ``holders`` is None).

    Raises:
        ValueError: for a ``local`` outside the group, or holders of another length.
    """

    def __init__(self, holders: Optional[torch.Tensor], buffers: Sequence[torch.Tensor],
                 local: int = 0, num_nodes: Optional[int] = None) -> None:
        if holders is not None and (holders.dim() != 1 or holders.is_floating_point()):
            raise ValueError(f"holders must be a 1-D integer tensor, got dtype {holders.dtype} "
                             f"and shape {tuple(holders.shape)}")
        self.num_nodes = int(holders.numel()) if holders is not None else int(num_nodes or 0)
        if num_nodes is not None and int(num_nodes) != self.num_nodes:
            raise ValueError(f"holders cover {self.num_nodes} vertices, expected {num_nodes}")
        if buffers and not 0 <= int(local) < len(buffers):
            raise ValueError(f"local must be in [0, {len(buffers)}), got {local!r}")
        self.holders = holders
        self.local = int(local)
        self.num_devices = len(buffers)
        self._sorted: list[torch.Tensor] = []
        self._rows: list[torch.Tensor] = []
        seen: list[torch.Tensor] = []
        for b in buffers:
            b = torch.as_tensor(b)
            # replicated rows (Rule 1) share one sorted table
            same = next((j for j, s in enumerate(seen) if s is b or (
                s.numel() == b.numel() and torch.equal(s, b))), None)
            seen.append(b)
            if same is not None:
                self._sorted.append(self._sorted[same])
                self._rows.append(self._rows[same])
                continue
            ids, rows = torch.sort(b.long())
            self._sorted.append(ids)
            self._rows.append(rows)

    @classmethod
    def from_placement(cls, placement, local: int,
                       holders: Optional[torch.Tensor] = None) -> "CacheLookup":
        """The lookup of device ``local`` of ``placement``; ``holders``: its holder bits when
        already at hand (a shared copy), else computed."""
        if not isinstance(local, int) or not 0 <= local < placement.num_devices:
            raise ValueError(f"device must be in [0, {placement.num_devices}), got {local!r}")
        bits = placement.holder_bits() if holders is None else torch.as_tensor(holders)
        if bits.shape != (placement.num_nodes,):
            raise ValueError(f"holder bits have shape {tuple(bits.shape)}, expected "
                             f"({placement.num_nodes},)")
        return cls(bits, placement.buffers, local)

    @classmethod
    def of_cache(cls, ids: torch.Tensor, num_nodes: int) -> "CacheLookup":
        """One device caching ``ids`` (row ``i`` holds ``ids[i]``) of ``num_nodes``."""
        bits = torch.zeros(num_nodes, dtype=torch.uint8)
        bits[torch.as_tensor(ids).long()] = 1
        return cls(bits, [ids], 0)

    @classmethod
    def host_only(cls, num_nodes: int) -> "CacheLookup":
        """Nothing cached: every row is read from the host."""
        return cls(None, [], 0, num_nodes)

    def devices(self, idx: torch.Tensor) -> torch.Tensor:
        """``dev_num[idx]``: ``(M,)`` int64 on ``idx``'s device."""
        if self.holders is None or not self.num_devices:
            return torch.full((idx.numel(),), -1, dtype=torch.int64, device=idx.device)
        return read_from(self.holders.index_select(0, idx), self.local, self.num_devices)

    def positions(self, device: int, ids: torch.Tensor) -> torch.Tensor:
        """``(K,)`` int64 rows of ``ids`` in device ``device``'s buffer (each must be cached
        there, as :meth:`devices` says)."""
        return self._rows[device].index_select(
            0, torch.searchsorted(self._sorted[device], ids.long()))

    def to(self, device: torch.device | str) -> "CacheLookup":
        """A copy whose arrays are on ``device`` (where a batch already there is split)."""
        out = CacheLookup.__new__(CacheLookup)
        out.num_nodes, out.local, out.num_devices = self.num_nodes, self.local, self.num_devices
        out.holders = None if self.holders is None else self.holders.to(device)
        out._sorted = [s.to(device) for s in self._sorted]
        out._rows = [r.to(device) for r in self._rows]
        return out

    @property
    def holders_device(self) -> torch.device:
        """Where the holder bits are (the host for a fresh lookup)."""
        return torch.device("cpu") if self.holders is None else self.holders.device

    @property
    def own_bytes(self) -> int:
        """Bytes this lookup holds beside the shared holder bits (a shared table once)."""
        tables = {id(t): t for t in (*self._sorted, *self._rows)}.values()
        return sum(t.numel() * t.element_size() for t in tables)
