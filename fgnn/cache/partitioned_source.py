"""A feature source over a node partition: local rows from this node, remote rows from owners.

On a partitioned cluster (:class:`~fgnn.cache.node_partition.NodePartition`) a Trainer's host
tier is split: rows its node holds (owned or replicated) are read from the node's own matrix,
every other row from its owner node. :class:`PartitionedSource` is that host tier as a
:class:`~fgnn.cache.source.FeatureSource`, so a :class:`~fgnn.cache.FeatureStore` puts its device
cache in front of it unchanged. How remote rows travel is the caller's: ``fetch`` gets one
request per owner node at once (the Ray runtime issues every request before waiting on any) and
returns their rows. The source counts rows and bytes per tier and the seconds spent waiting on
remote rows.
"""

from __future__ import annotations

import time
from typing import Callable, Union

import numpy as np
import torch

from fgnn.cache.node_partition import NodePartition

__all__ = ["PartitionedSource", "RemoteFetch"]

#: ``fetch({owner: ids}) -> {owner: rows}``: the ``(len(ids), F)`` rows of each owner node.
RemoteFetch = Callable[[dict[int, torch.Tensor]], dict[int, torch.Tensor]]


class PartitionedSource:
    """The host tier of one node of a partitioned cluster.

    Args:
        partition: where every row lives.
        node: this node, in ``[0, M)``.
        local: ``(K, F)`` the rows this node holds, in ascending id order
            (``partition.rows_of(node)``); a tensor or numpy array (e.g. read-only shared memory
            from Ray's object store).
        fetch: reads remote rows from their owners (:data:`RemoteFetch`).

    Attributes:
        rows, bytes: ``{"local": int, "remote": int}`` read since the last :meth:`take_stats`.
        remote_wait_s: seconds spent in ``fetch`` since the last :meth:`take_stats`.
    """

    def __init__(self, partition: NodePartition, node: int,
                 local: Union[torch.Tensor, np.ndarray], fetch: RemoteFetch) -> None:
        held = partition.rows_of(node)  # validates node
        local_t = torch.as_tensor(local) if isinstance(local, np.ndarray) else local
        if not isinstance(local_t, torch.Tensor) or local_t.dim() != 2 \
                or local_t.shape[0] != held.numel():
            raise ValueError(f"local must be the ({held.numel()}, F) rows node {node} holds, got "
                             f"{type(local).__name__} {tuple(getattr(local, 'shape', ()))}")
        if not callable(fetch):
            raise TypeError(f"fetch must be callable, got {type(fetch).__name__}")
        self.partition, self.node, self._local, self._fetch = partition, node, local_t, fetch
        self._pos = torch.full((partition.num_rows,), -1, dtype=torch.int64)
        self._pos[held] = torch.arange(held.numel())
        self.rows = {"local": 0, "remote": 0}
        self.bytes = {"local": 0, "remote": 0}
        self.remote_wait_s = 0.0

    @property
    def num_rows(self) -> int:
        """N."""
        return self.partition.num_rows

    @property
    def dim(self) -> int:
        """F."""
        return int(self._local.shape[1])

    @property
    def dtype(self) -> torch.dtype:
        """Element type of the rows."""
        return self._local.dtype

    @property
    def row_bytes(self) -> int:
        """Bytes of one row."""
        return self.dim * self._local.element_size()

    def read(self, ids: torch.Tensor) -> torch.Tensor:
        """The ``(len(ids), F)`` rows of ``ids``: local ones from this node, the rest fetched
        from their owners (one request per owner).

        Raises:
            ValueError: on an id outside ``[0, N)``.
        """
        ids = torch.as_tensor(ids).long().flatten().cpu()
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.num_rows):
            raise ValueError(f"ids hold a row outside [0, {self.num_rows})")
        out = torch.empty(ids.numel(), self.dim, dtype=self.dtype)
        pos = self._pos[ids]
        here = pos >= 0
        out[here] = self._local[pos[here]]
        far = torch.nonzero(~here).flatten()
        owners = self.partition.owner[ids[far]]
        requests = {int(o): ids[far[owners == o]] for o in torch.unique(owners)}
        if requests:
            t0 = time.perf_counter()
            got = self._fetch(requests)
            self.remote_wait_s += time.perf_counter() - t0
            for o, want in requests.items():
                rows = torch.as_tensor(got[o])
                if rows.shape != (want.numel(), self.dim):
                    raise ValueError(f"node {o} returned rows of shape {tuple(rows.shape)} for "
                                     f"{want.numel()} ids")
                out[far[owners == o]] = rows.to(self.dtype)
        n_local, n_remote = int(here.sum()), int(far.numel())
        self.rows["local"] += n_local
        self.rows["remote"] += n_remote
        self.bytes["local"] += n_local * self.row_bytes
        self.bytes["remote"] += n_remote * self.row_bytes
        return out

    def take_stats(self) -> dict:
        """Rows, bytes and remote wait since the last call, then zero them."""
        out = {"rows": dict(self.rows), "bytes": dict(self.bytes),
               "remote_wait_s": self.remote_wait_s}
        self.rows = {"local": 0, "remote": 0}
        self.bytes = {"local": 0, "remote": 0}
        self.remote_wait_s = 0.0
        return out
