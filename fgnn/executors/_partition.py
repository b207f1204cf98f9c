"""The node-level feature partition of a job on a cluster (internal): ``cache.feature_partition``.

After the warm-up epochs (when PreSC's hotness is known), :class:`FeaturePartitioning` plans
which feature rows live on which node (:func:`~fgnn.cache.node_partition.partition_rows`),
starts one :class:`~fgnn.executors.feature_server.FeatureServer` per node (node ``m`` is the
Ray node that offers the custom resource ``fgnn_node{m}``), assigns every Trainer to the node it
runs on, and has each Trainer swap its host tier for a
:class:`~fgnn.cache.partitioned_source.PartitionedSource` of its node. Per epoch it collects each
node's traffic by tier (device cache, local host, remote node: rows and bytes) and the seconds
its Trainers waited on remote rows.

Access counts: the Trainers take their tasks from one global queue, so which node reads a row
is not fixed before training; the planner gets the job's global PreSC counts, split evenly
over the nodes. The ``hotness`` partition then replicates the globally hottest rows on every
node (Song & Jiang Rule 1, the per-node budget ``cache.feature_replicate_ratio`` N) and, every
node reading every other row alike, owns them ``row % M`` (its tie rule); per-node counts would
need per-node seeds (bench/partition.py's ``partitioned`` mode).
"""

from __future__ import annotations

import re
from typing import Any, Optional

import torch

__all__ = ["FeaturePartitioning", "cluster_nodes"]

#: Custom resource prefix that names a node of a partitioned cluster.
NODE_RESOURCE = "fgnn_node"


def cluster_nodes(resources: dict[str, float]) -> int:
    """M: how many nodes ``fgnn_node0 .. fgnn_node{M-1}`` the cluster's ``resources`` name.

    Raises:
        ValueError: when none is offered, or the names skip a number.
    """
    found = sorted(int(m.group(1)) for k in resources
                   if (m := re.fullmatch(rf"{NODE_RESOURCE}(\d+)", k)))
    if not found or found != list(range(len(found))):
        raise ValueError(f"cache.feature_partition needs the nodes named by custom resources "
                         f"{NODE_RESOURCE}0 .. {NODE_RESOURCE}<M-1> (ray start --resources "
                         f"'{{\"{NODE_RESOURCE}0\": 1}}' on each node, see docs/cluster.md); "
                         f"the cluster offers {[f'{NODE_RESOURCE}{m}' for m in found] or 'none'}")
    return len(found)


class FeaturePartitioning:
    """The partition, its servers and each Trainer's node; the traffic of every epoch.

    Args:
        strategy: ``hotness`` or ``hash``.
        replicate_ratio: rows replicated on every node, as a share of N (``hotness``).

    Attributes:
        partition: the :class:`~fgnn.cache.node_partition.NodePartition` (after :meth:`start`).
        servers: the feature-server actors, by node.
        node_of: executor name -> node of each Trainer.
        epochs: per measured epoch, per node: ``rows``/``bytes`` by tier and ``remote_wait_s``.
    """

    def __init__(self, strategy: str, replicate_ratio: float) -> None:
        self.strategy, self.replicate_ratio = strategy, float(replicate_ratio)
        self.partition: Any = None
        self.servers: list[Any] = []
        self.node_of: dict[str, int] = {}
        self.server_info: list[dict[str, Any]] = []
        self.epochs: list[list[dict[str, Any]]] = []
        self._ref: Any = None

    def start(self, hotness: Optional[torch.Tensor], num_rows: int, features: Any,
              bundle_nodes: dict[int, str], trainers: list[Any]) -> None:
        """Plan the partition, start the servers, assign ``trainers`` (``_Exec``) to nodes.

        Args:
            hotness: ``(N,)`` PreSC counts (``hotness`` needs them).
            num_rows: N.
            features: the features' object-store ref, or a ``MemmapFeatures`` descriptor.
            bundle_nodes: device (bundle index) -> Ray node id.
            trainers: the Trainer and standby executors.

        Raises:
            ValueError: no ``fgnn_node`` resources, a Trainer on a node without one, or
                ``hotness`` without counts.
        """
        import ray

        from fgnn.cache.node_partition import partition_rows
        from fgnn.executors.feature_server import start_feature_servers

        m = cluster_nodes(ray.cluster_resources())
        if self.strategy == "hotness" and hotness is None:
            raise ValueError("cache.feature_partition='hotness' needs a hotness map (a cache "
                             "policy other than none)")
        counts = None if hotness is None else (hotness.float() / m).repeat(m, 1)
        self.partition = partition_rows(self.strategy, num_rows, m, counts=counts,
                                        budget=int(self.replicate_ratio * num_rows))
        source = getattr(features, "path", features)  # a file: each server maps its rows
        self.servers = start_feature_servers(self.partition, source, NODE_RESOURCE)
        self.server_info = ray.get([s.info.remote() for s in self.servers])
        self._ref = ray.put(self.partition)
        self.node_of = self._assign(bundle_nodes, trainers)

    def _assign(self, bundle_nodes: dict[int, str], trainers: list[Any]) -> dict[str, int]:
        """Each Trainer's node: one whose server runs on the Trainer's Ray node (in turn, when
        one Ray node holds several, e.g. simulated nodes on one machine)."""
        on: dict[str, list[int]] = {}
        for info in self.server_info:
            on.setdefault(info["ray_node_id"], []).append(int(info["node"]))
        out, turn = {}, {}
        for e in sorted(trainers, key=lambda e: e.device):
            ray_node = bundle_nodes.get(e.device)
            nodes = on.get(ray_node)
            if not nodes:
                raise ValueError(f"cache.feature_partition: the Trainer {e.name} runs on Ray node "
                                 f"{ray_node}, which offers no {NODE_RESOURCE}<m> resource; "
                                 f"give every node of the cluster one (docs/cluster.md)")
            k = turn.get(ray_node, 0)
            out[e.name], turn[ray_node] = nodes[k % len(nodes)], k + 1
        return out

    def install(self, e: Any) -> Any:
        """The call that gives Trainer ``e`` its node's host tier (before its cache fill)."""
        return e.handle.use_partition.remote(self._ref, self.node_of[e.name], self.servers)

    def take_epoch(self, traffic: dict[str, Optional[dict[str, Any]]]) -> list[dict[str, Any]]:
        """Sum the Trainers' ``take_traffic`` results (name -> counts) per node; recorded in
        :attr:`epochs` and returned."""
        m = self.partition.num_nodes
        nodes = [{"node": i, "rows": {"device": 0, "local": 0, "remote": 0},
                  "bytes": {"device": 0, "local": 0, "remote": 0}, "remote_wait_s": 0.0}
                 for i in range(m)]
        for name, got in traffic.items():
            if got is None or name not in self.node_of:
                continue
            rec = nodes[self.node_of[name]]
            for unit in ("rows", "bytes"):
                for tier, v in got[unit].items():
                    rec[unit][tier] += int(v)
            rec["remote_wait_s"] += float(got["remote_wait_s"])
        self.epochs.append(nodes)
        return nodes

    def report(self) -> dict[str, Any]:
        """The report's ``allocation.feature_partition``."""
        p = self.partition
        return {"strategy": self.strategy, "nodes": p.num_nodes,
                "replicated_rows": int(p.replicated.sum()),
                "host_rows": p.host_rows(), "num_rows": p.num_rows,
                "trainers": dict(self.node_of), "traffic": self.epochs}
