"""Feature traffic by tier on a partitioned cluster: device cache, local host, remote node.

Each input row a Trainer extracts comes from one of three tiers: its device cache (FGNN §6), the
host memory of its own node (a row the node owns or replicates, :class:`NodePartition`), or the
host memory of the row's owner node over the network. :class:`TrafficMeter` counts the rows and
bytes of each tier per node, and the rows each node reads from each other node (the load every
feature server serves), over whatever span the caller measures (an epoch: read it with
:meth:`TrafficMeter.take`).
"""

from __future__ import annotations

from typing import Optional

import torch

from fgnn.cache.node_partition import NodePartition

__all__ = ["TIERS", "TrafficMeter"]

#: The tiers of a feature row, nearest first.
TIERS = ("device", "local", "remote")


class TrafficMeter:
    """Counts the feature rows each node's Trainers read, by tier.

    Args:
        partition: where the rows live.
        row_bytes: bytes of one feature row (``F * itemsize``).
        device_cached: ``(N,)`` bool, the rows in a Trainer's device cache (None: no cache).
            Every Trainer caches the same rows (Song & Jiang Rule 1, ``replicate`` placement).

    Example::

        meter = TrafficMeter(partition, row_bytes=512)
        meter.record(node=0, ids=sample.input_nodes)
        per_node = meter.take()   # [{"rows": {...}, "bytes": {...}, "remote_from": [...]}, ...]
    """

    def __init__(self, partition: NodePartition, row_bytes: int,
                 device_cached: Optional[torch.Tensor] = None) -> None:
        if isinstance(row_bytes, bool) or not isinstance(row_bytes, int) or row_bytes < 1:
            raise ValueError(f"row_bytes must be a positive int, got {row_bytes!r}")
        n = partition.num_rows
        if device_cached is not None:
            device_cached = torch.as_tensor(device_cached)
            if device_cached.dtype != torch.bool or device_cached.shape != (n,):
                raise ValueError(f"device_cached must be an ({n},) bool tensor, got "
                                 f"{device_cached.dtype} {tuple(device_cached.shape)}")
        self.partition, self.row_bytes = partition, row_bytes
        self.device_cached = device_cached
        m = partition.num_nodes
        self._holds = [partition.holds(i) for i in range(m)]
        self._rows = torch.zeros(m, len(TIERS), dtype=torch.int64)
        self._from = torch.zeros(m, m, dtype=torch.int64)

    def record(self, node: int, ids: torch.Tensor) -> dict[str, int]:
        """Count the rows ``ids`` that a Trainer on ``node`` extracts; returns their tier counts.

        Raises:
            ValueError: on a node outside ``[0, M)`` or an id outside ``[0, N)``.
        """
        m = self.partition.num_nodes
        if isinstance(node, bool) or not isinstance(node, int) or not 0 <= node < m:
            raise ValueError(f"node must be an int in [0, {m}), got {node!r}")
        ids = torch.as_tensor(ids).long().flatten()
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.partition.num_rows):
            raise ValueError(f"ids hold a row outside [0, {self.partition.num_rows})")
        dev = (self.device_cached[ids] if self.device_cached is not None
               else torch.zeros(ids.numel(), dtype=torch.bool))
        rest = ids[~dev]
        local = self._holds[node][rest]
        remote = rest[~local]
        counts = [int(dev.sum()), int(local.sum()), int(remote.numel())]
        self._rows[node] += torch.tensor(counts)
        self._from[node] += torch.bincount(self.partition.owner[remote], minlength=m)
        return dict(zip(TIERS, counts))

    def totals(self) -> list[dict]:
        """Per node: ``rows`` and ``bytes`` by tier and ``remote_from`` (rows per owner node)
        since the last :meth:`take`."""
        out = []
        for i in range(self.partition.num_nodes):
            rows = {t: int(self._rows[i, k]) for k, t in enumerate(TIERS)}
            out.append({"rows": rows, "bytes": {t: r * self.row_bytes for t, r in rows.items()},
                        "remote_from": self._from[i].tolist()})
        return out

    def take(self) -> list[dict]:
        """:meth:`totals`, then zero the counters (call once per epoch)."""
        out = self.totals()
        self._rows.zero_()
        self._from.zero_()
        return out
