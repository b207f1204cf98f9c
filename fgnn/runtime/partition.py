"""The node-level feature partition of a job on a cluster (internal): ``cache.feature_partition``.

After the warm-up epochs (when PreSC's hotness is known), :class:`FeaturePartitioning` plans
which feature rows live on which node (:func:`~fgnn.cache.node_partition.partition_rows`),
starts one :class:`~fgnn.executors.feature_server.FeatureServer` per node (node ``m`` is the
Ray node that offers the custom resource ``fgnn_node{m}``), assigns every Trainer to the node it
runs on, and has each Trainer swap its host tier for a
:class:`~fgnn.cache.partitioned_source.PartitionedSource` of its node. Per epoch it collects each
node's traffic by tier (device cache, local host, remote node: rows and bytes) and the seconds
its Trainers waited on remote rows.

Access counts (the ``hotness`` partition): while the partition is pending (the warm-up epochs)
every Trainer counts the feature rows its training mini-batches read
(:class:`~fgnn.cache.node_counts.ReadCounter`); the driver takes the counts after each warm-up
epoch (before a re-layout may stop a Trainer), keeps them by device, and when it plans sums
them per node by the Trainer -> node assignment (:func:`~fgnn.cache.node_counts.
node_access_counts`): the ``(M, N)`` input of :func:`~fgnn.cache.node_partition.partition_rows`.
This follows GraphLearn-for-PyTorch's ``FrequencyPartitioner`` (one access vector per partition,
each from the reads of that partition's trainers) and Song & Jiang (ICS 2022, §3.2): Rule 1
picks the replicated rows -- with a network between the nodes, each stores the rows of highest
sampling probability, here the cache policy's hotness (PreSC's visit counts, FGNN §6.3) -- and
each other row is held by the node that reads it most, which raises each node's
``E[|S_i ∩ B_i|]`` of Eq. 5 beyond the replicated set under the per-node cap (Rule 2's
Algorithm 1 is for a fast link between the holders, which nodes do not have). The Trainers take
their tasks from one global queue, so a node's counts are its share of the warm-up's tasks: they
predict its later reads as far as the same rows recur. When no Trainer counted a read (a
standby alone, a Trainer lost), the planner gets the global hotness split evenly over the nodes
(owners then fall to ``row % M``) and the job says so in one line. ``hash`` counts nothing.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Optional

import torch

__all__ = ["FeaturePartitioning", "cluster_nodes", "node_hosts"]

#: Custom resource prefix that names a node of a partitioned cluster.
NODE_RESOURCE = "fgnn_node"


def node_hosts(nodes: list[dict[str, Any]]) -> dict[str, list[int]]:
    """Ray node id -> the nodes ``m`` (ascending) whose ``fgnn_node{m}`` it offers, from
    ``ray.nodes()`` (alive nodes only): where each node's feature server runs."""
    out: dict[str, list[int]] = {}
    for n in nodes:
        if not n.get("Alive", True):
            continue
        ms = sorted(int(g.group(1)) for k in n.get("Resources", {})
                    if (g := re.fullmatch(rf"{NODE_RESOURCE}(\d+)", k)))
        if ms:
            out[n["NodeID"]] = ms
    return out


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
        reads: device -> the reads its Trainers counted in the warm-up epochs (until planned).
        read_epochs: the warm-up epochs whose reads :attr:`reads` holds.
        owners_from: what the owners came from: ``measured`` (the Trainers' reads per node),
            ``even split`` (no reads: the global hotness over M) or None (``hash``).
        node_reads: reads per node per warm-up epoch (the planner's input summed), when measured.
    """

    def __init__(self, strategy: str, replicate_ratio: float) -> None:
        self.strategy, self.replicate_ratio = strategy, float(replicate_ratio)
        self.partition: Any = None
        self.servers: list[Any] = []
        self.node_of: dict[str, int] = {}
        self.server_info: list[dict[str, Any]] = []
        self.epochs: list[list[dict[str, Any]]] = []
        self.reads: dict[int, torch.Tensor] = {}
        self.read_epochs = 0
        self.owners_from: Optional[str] = None
        self.node_reads: Optional[list[float]] = None
        self._ref: Any = None

    @property
    def counts_reads(self) -> bool:
        """Whether the Trainers count their reads now: a ``hotness`` partition not yet planned."""
        return self.strategy == "hotness" and self.partition is None

    def add_reads(self, reads: dict[int, Optional[torch.Tensor]]) -> None:
        """One warm-up epoch's reads, device -> the ``(N,)`` counts of its Trainer (None: it
        counted nothing)."""
        got = {d: c for d, c in reads.items() if c is not None}
        for d, c in got.items():
            self.reads[d] = c.clone() if d not in self.reads else self.reads[d] + c
        self.read_epochs += bool(got)

    def start(self, hotness: Optional[torch.Tensor], num_rows: int, features: Any,
              bundle_nodes: dict[int, str], trainers: list[Any],
              say: Callable[[str], None] = lambda line: None) -> None:
        """Assign ``trainers`` (``_Exec``) to nodes, plan the partition, start the servers.

        Args:
            hotness: ``(N,)`` scores of the cache policy (``hotness`` needs them: they pick the
                replicated rows).
            num_rows: N.
            features: the features' object-store ref, or a ``MemmapFeatures`` descriptor.
            bundle_nodes: device (bundle index) -> Ray node id.
            trainers: the Trainer and standby executors.
            say: prints one line (the job's), used when no reads were counted.

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
        self.node_of = self._assign(bundle_nodes, trainers, node_hosts(ray.nodes()))
        counts = self.planner_input(hotness, num_rows, m,
                                    {e.device: self.node_of[e.name] for e in trainers}, say)
        self.partition = partition_rows(self.strategy, num_rows, m, counts=counts,
                                        budget=int(self.replicate_ratio * num_rows),
                                        hotness=hotness)
        source = getattr(features, "path", features)  # a file: each server maps its rows
        self.servers = start_feature_servers(self.partition, source, NODE_RESOURCE)
        self.server_info = ray.get([s.info.remote() for s in self.servers])
        self._ref = ray.put(self.partition)

    def planner_input(self, hotness: Optional[torch.Tensor], num_rows: int, num_nodes: int,
                      node_of_device: dict[int, int],
                      say: Callable[[str], None] = lambda line: None
                      ) -> Optional[torch.Tensor]:
        """The ``(M, N)`` counts the ``hotness`` planner gets (None under ``hash``): the warm-up
        reads summed per node (:func:`~fgnn.cache.node_counts.node_access_counts`; a device
        without a Trainer now is left out), else ``hotness`` split evenly over the nodes, said
        in one line. Frees :attr:`reads`."""
        from fgnn.cache.node_counts import node_access_counts

        if self.strategy != "hotness":
            return None
        counts = node_access_counts(self.reads, node_of_device, num_nodes, num_rows,
                                    max(1, self.read_epochs))
        self.reads = {}
        if counts is None:
            self.owners_from = "even split"
            say(f"feature partition: no Trainer counted a read in the warm-up, so each node's "
                f"access counts are the global hotness over {num_nodes} nodes and the rows not "
                f"replicated are owned row mod {num_nodes}")
            return (hotness.float() / num_nodes).repeat(num_nodes, 1)
        self.owners_from = "measured"
        self.node_reads = [float(v) for v in counts.sum(1)]
        return counts

    def _assign(self, bundle_nodes: dict[int, str], trainers: list[Any],
                hosts: dict[str, list[int]]) -> dict[str, int]:
        """Each Trainer's node: one on the Trainer's Ray node (``hosts``: Ray node id -> the
        nodes it offers; in turn, by device, when one Ray node offers several, e.g. simulated
        nodes on one machine)."""
        out, turn = {}, {}
        for e in sorted(trainers, key=lambda e: e.device):
            ray_node = bundle_nodes.get(e.device)
            nodes = hosts.get(ray_node)
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
                "trainers": dict(self.node_of), "owners_from": self.owners_from,
                "node_reads": self.node_reads, "traffic": self.epochs}
