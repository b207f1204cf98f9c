"""One feature server per cluster node: that node's partition of the feature rows, on Ray.

A :class:`FeatureServer` holds the rows one node owns or replicates
(:meth:`NodePartition.rows_of <fgnn.cache.node_partition.NodePartition.rows_of>`) in host memory.
:func:`start_feature_servers` makes one Ray actor of it per node, pinned there by a custom
resource (``{prefix}{node}``, e.g. ``ray start --resources '{"fgnn_node0": 1}'``, or
``ray.init(resources=...)`` for simulated nodes on one machine). A Trainer's host tier is then
:func:`node_source`: its node's rows through Ray's object store (the matrix is fetched once;
on the same node that is shared memory, no copy) and every other row from its owner's server
by ``ray.get`` of the ``read`` calls, all issued before waiting on any -- no hand-written RPC.

A job with ``--feature-partition hotness|hash`` starts them after its warm-up epochs
(:mod:`fgnn.runtime.partition`); tests also run them on simulated nodes.
"""

from __future__ import annotations

import warnings
from typing import Any, Union

import numpy as np
import torch

from fgnn.cache.node_partition import NodePartition
from fgnn.cache.partitioned_source import PartitionedSource, RemoteFetch

__all__ = ["FeatureServer", "node_source", "ray_fetch", "start_feature_servers"]

#: What a server reads its rows from: the matrix, or the path of an ``.npy`` file (memory-mapped,
#: so only the node's rows are read).
FeatureInput = Union[np.ndarray, torch.Tensor, str]


class FeatureServer:
    """The rows node ``node`` holds under ``partition``, copied out of ``features``.

    Args:
        partition: where every row lives.
        node: this server's node.
        features: the ``(N, F)`` matrix or the path of its ``.npy`` file.
    """

    def __init__(self, partition: NodePartition, node: int, features: FeatureInput) -> None:
        if isinstance(features, str):
            features = np.load(features, mmap_mode="r")
        if isinstance(features, torch.Tensor):
            features = features.numpy()
        if not isinstance(features, np.ndarray) or features.ndim != 2 \
                or features.shape[0] != partition.num_rows:
            raise ValueError(f"features must be the ({partition.num_rows}, F) matrix or its .npy "
                             f"path, got {type(features).__name__} "
                             f"{tuple(getattr(features, 'shape', ()))}")
        self.node = node
        self.ids = partition.rows_of(node)
        self.rows = np.ascontiguousarray(features[self.ids.numpy()])
        self._pos = np.full(partition.num_rows, -1, dtype=np.int64)
        self._pos[self.ids.numpy()] = np.arange(self.ids.numel())

    def matrix(self) -> np.ndarray:
        """The ``(K, F)`` rows this node holds, ascending by id."""
        return self.rows

    def read(self, ids: np.ndarray) -> np.ndarray:
        """The rows of ``ids``, all held here.

        Raises:
            ValueError: when a row is not held by this node.
        """
        pos = self._pos[np.asarray(ids, dtype=np.int64)]
        if (pos < 0).any():
            raise ValueError(f"node {self.node} does not hold row "
                             f"{int(np.asarray(ids)[pos < 0][0])}")
        return self.rows[pos]

    def info(self) -> dict[str, Any]:
        """Node, rows and bytes held, and the Ray node the server runs on."""
        import ray

        return {"node": self.node, "rows": int(self.ids.numel()), "bytes": int(self.rows.nbytes),
                "ray_node_id": ray.get_runtime_context().get_node_id()}


def start_feature_servers(partition: NodePartition, features: Any,
                          prefix: str = "fgnn_node") -> list[Any]:
    """One :class:`FeatureServer` actor per node, node ``m`` pinned by the custom resource
    ``f"{prefix}{m}"`` (a small fraction of it, so Trainers fit beside the server).

    Args:
        partition: where every row lives.
        features: the matrix, its ``.npy`` path, or an ObjectRef of either.
        prefix: custom resource name prefix; each node's raylet must offer ``{prefix}{m}``.

    Returns:
        The actor handles, indexed by node.
    """
    import ray

    cls = ray.remote(num_cpus=0)(FeatureServer)
    return [cls.options(resources={f"{prefix}{m}": 0.001}, name=f"{prefix}{m}-features")
            .remote(partition, m, features) for m in range(partition.num_nodes)]


def ray_fetch(servers: list[Any]) -> RemoteFetch:
    """A :data:`~fgnn.cache.partitioned_source.RemoteFetch` that sends every owner its ``read``
    call first and then waits on all of them with one ``ray.get``."""

    def fetch(requests: dict[int, torch.Tensor]) -> dict[int, torch.Tensor]:
        import ray

        refs = {o: servers[o].read.remote(ids.numpy()) for o, ids in requests.items()}
        got = ray.get(list(refs.values()))
        return {o: torch.from_numpy(np.array(rows)) for o, rows in zip(refs, got)}

    return fetch


def node_source(partition: NodePartition, node: int, servers: list[Any]) -> PartitionedSource:
    """The host tier of a Trainer on ``node``: its node's matrix from the object store (read
    only, shared memory on the same node) and remote rows through :func:`ray_fetch`."""
    import ray

    local = ray.get(servers[node].matrix.remote())
    with warnings.catch_warnings():  # the object store's arrays are read-only; we only read
        warnings.simplefilter("ignore", UserWarning)
        local_t = torch.from_numpy(local)
    return PartitionedSource(partition, node, local_t, ray_fetch(servers))
