"""Which feature rows live on which cluster node: replicated hot rows and one owner per other row.

On a cluster of ``M`` nodes every node holds a part of the ``(N, F)`` feature matrix in host
memory; a Trainer reads the rows its node holds locally and the others from their owner node.
A :class:`NodePartition` says, for every row, whether it is replicated on every node and
otherwise which node owns it. Three planners share one entry point, :func:`partition_rows`:

* ``"hotness"`` (:func:`hotness_partition`) -- from the access counts measured per node in the
  PreSC / warm-up epochs (FGNN §6.3; each node's Trainers' reads summed,
  :mod:`fgnn.cache.node_counts`):

  1. *Replicated set* -- the ``budget`` rows with the most visits over all nodes (or the highest
     scores of a given ``hotness``, the cache policy's) are held by every node. This is Song &
     Jiang's Rule 1 (ICS 2022, §3.2): with no fast link between the holders, each stores the
     rows with the highest sampling probability, which maximises ``E[|S_i ∩ B_i|]`` of Eq. 5;
     a network link between hosts is the slow case.
  2. *Owners* -- every other row goes to the node whose Trainers read it most, with each node's
     owned rows capped at ``ceil((N - R) / M)`` (times ``1 + slack``) so host memory stays
     balanced. The cap and the per-node access counts as the input follow GraphLearn-for-PyTorch's
     ``FrequencyPartitioner`` (each of ``M`` partitions takes ``1/M`` of every chunk of rows, the
     partitions taking turns to pick by the score ``M p_i - sum_{j != i} p_j``). Unlike GLT's
     turn-taking, rows are assigned in one greedy pass ordered by *regret* (the best node's
     count minus the second best's): the rows that lose most by going elsewhere get their first
     choice first; a row whose first choice is full goes to its next best node with room. GLT
     caches each partition's own hottest rows; here the replicated set is the same on every
     node (step 1). Ties between nodes (a row no node read, above all) are broken by rotating
     from ``row % M``, so unread rows are hash-partitioned.

* ``"hash"`` (:func:`hash_partition`) -- ``owner = row % M`` and nothing replicated: hotness-blind,
  what WholeGraph does.
* ``"replicate"`` (:func:`replicate_partition`) -- every row on every node (fgnn before
  partitioning; a one-node run).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch

__all__ = [
    "NODE_PARTITIONS",
    "NodePartition",
    "hash_partition",
    "hotness_partition",
    "partition_rows",
    "replicate_partition",
]

#: Partition strategies accepted by :func:`partition_rows`.
NODE_PARTITIONS = ("hotness", "hash", "replicate")


@dataclass
class NodePartition:
    """Where each feature row lives across ``num_nodes`` cluster nodes.

    Attributes:
        owner: ``(N,)`` int64, the node in ``[0, M)`` that owns each row (for a replicated row,
            the node it would be read from were it not replicated: ``row % M``).
        replicated: ``(N,)`` bool, rows held by every node.
        num_nodes: M, the number of cluster nodes.
        strategy: the planner that made it (one of :data:`NODE_PARTITIONS`).
    """

    owner: torch.Tensor
    replicated: torch.Tensor
    num_nodes: int
    strategy: str = "hotness"

    def __post_init__(self) -> None:
        _check_num_nodes(self.num_nodes)
        if self.owner.dim() != 1 or self.replicated.shape != self.owner.shape:
            raise ValueError(f"owner and replicated must be (N,) tensors of one length, got "
                             f"{tuple(self.owner.shape)} and {tuple(self.replicated.shape)}")
        if self.replicated.dtype != torch.bool:
            raise TypeError(f"replicated must be a bool tensor, got {self.replicated.dtype}")
        if self.owner.numel() and (int(self.owner.min()) < 0
                                   or int(self.owner.max()) >= self.num_nodes):
            raise ValueError(f"owner holds a node outside [0, {self.num_nodes})")

    @property
    def num_rows(self) -> int:
        """N, the number of feature rows."""
        return int(self.owner.numel())

    def _check_node(self, node: int) -> None:
        if not isinstance(node, int) or not 0 <= node < self.num_nodes:
            raise ValueError(f"node must be an int in [0, {self.num_nodes}), got {node!r}")

    def holds(self, node: int) -> torch.Tensor:
        """``(N,)`` bool: the rows in ``node``'s host memory (owned or replicated)."""
        self._check_node(node)
        return self.replicated | (self.owner == node)

    def rows_of(self, node: int) -> torch.Tensor:
        """The ids (ascending) of the rows ``node`` holds."""
        return torch.nonzero(self.holds(node)).flatten()

    def host_rows(self) -> list[int]:
        """Rows held in host memory by each node (owned plus replicated)."""
        return [int(self.holds(m).sum()) for m in range(self.num_nodes)]

    def owned_rows(self) -> list[int]:
        """Rows each node owns that are not replicated."""
        own = self.owner[~self.replicated]
        return torch.bincount(own, minlength=self.num_nodes).tolist()

    def summary(self) -> dict:
        """The report's view: strategy, nodes, replicated rows and each node's host rows."""
        return {"strategy": self.strategy, "num_nodes": self.num_nodes,
                "num_rows": self.num_rows, "replicated_rows": int(self.replicated.sum()),
                "owned_rows": self.owned_rows(), "host_rows": self.host_rows()}


def _check_counts(counts: torch.Tensor, num_nodes: int) -> torch.Tensor:
    c = torch.as_tensor(counts)
    if c.dim() != 2 or c.shape[0] != num_nodes:
        raise ValueError(f"counts must be (num_nodes={num_nodes}, N), got shape "
                         f"{tuple(c.shape)}")
    c = c.to(torch.float64)
    if c.numel() and (bool(torch.isnan(c).any()) or float(c.min()) < 0):
        raise ValueError("counts must be non-negative access counts (no NaN)")
    return c


def _check_num_nodes(num_nodes: int) -> None:
    if isinstance(num_nodes, bool) or not isinstance(num_nodes, int) or num_nodes < 1:
        raise ValueError(f"num_nodes must be a positive int, got {num_nodes!r}")


def _check_num_rows(num_rows: int) -> None:
    if isinstance(num_rows, bool) or not isinstance(num_rows, int) or num_rows < 0:
        raise ValueError(f"num_rows must be a non-negative int, got {num_rows!r}")


def replicate_partition(num_rows: int, num_nodes: int) -> NodePartition:
    """Every row on every node (no partitioning)."""
    _check_num_nodes(num_nodes)
    _check_num_rows(num_rows)
    owner = torch.arange(num_rows, dtype=torch.int64) % num_nodes
    return NodePartition(owner, torch.ones(num_rows, dtype=torch.bool), num_nodes, "replicate")


def hash_partition(num_rows: int, num_nodes: int) -> NodePartition:
    """``owner = row % M``, nothing replicated (WholeGraph's hotness-blind layout)."""
    _check_num_nodes(num_nodes)
    _check_num_rows(num_rows)
    owner = torch.arange(num_rows, dtype=torch.int64) % num_nodes
    return NodePartition(owner, torch.zeros(num_rows, dtype=torch.bool), num_nodes, "hash")


def _preferences(c: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """``(M, K)``: for column ``k`` (row ``ids[k]``), the nodes from most to least read; ties
    rotate from ``ids[k] % M``."""
    m = c.shape[0]
    rot = (torch.arange(m).unsqueeze(1) - ids.unsqueeze(0)) % m  # tie rank
    by_tie = torch.argsort(rot, dim=0, stable=True)
    by_count = torch.argsort(-c.gather(0, by_tie), dim=0, stable=True)
    return by_tie.gather(0, by_count)


def _assign_owners(c: torch.Tensor, rows: torch.Tensor, cap: int) -> torch.Tensor:
    """Owners of ``rows`` (regret-ordered greedy, at most ``cap`` rows per node)."""
    m = c.shape[0]
    sub = c[:, rows]
    pref = _preferences(sub, rows)
    best = sub.gather(0, pref[:1]).squeeze(0)
    second = sub.gather(0, pref[1:2]).squeeze(0) if m > 1 else torch.zeros_like(best)
    # priority: regret desc, then total reads desc, then id asc (stable sorts, last key first)
    order = torch.arange(rows.numel())
    order = order[torch.argsort(-sub.sum(0)[order], stable=True)]
    order = order[torch.argsort(-(best - second)[order], stable=True)]
    owner = torch.full((rows.numel(),), -1, dtype=torch.int64)
    room = torch.full((m,), cap, dtype=torch.int64)
    for r in range(m):  # every rejection fills a node, so M rounds place every row
        todo = order[owner[order] < 0]
        if todo.numel() == 0:
            break
        cand = pref[r, todo]
        rank = torch.nn.functional.one_hot(cand, m).cumsum(0).gather(1, cand[:, None])[:, 0] - 1
        take = rank < room[cand]
        owner[todo[take]] = cand[take]
        room -= torch.bincount(cand[take], minlength=m)
    return owner


def hotness_partition(counts: torch.Tensor, num_nodes: int, budget: int, *,
                      slack: float = 0.0, hotness: Optional[torch.Tensor] = None
                      ) -> NodePartition:
    """Replicate the ``budget`` globally hottest rows, give every other row to its top reader.

    Args:
        counts: ``(M, N)`` access counts: row ``m`` is what node ``m``'s Trainers read (their
            counts summed, :func:`~fgnn.cache.node_counts.node_access_counts`).
        num_nodes: M.
        budget: rows replicated on every node (clipped to N); rows with zero hotness are never
            replicated.
        slack: owned rows per node may reach ``ceil((N - R) / M * (1 + slack))``.
        hotness: ``(N,)`` scores that pick the replicated rows (a cache policy's hotness);
            None: ``counts`` summed over the nodes.

    Returns:
        The :class:`NodePartition` (``strategy="hotness"``).

    Raises:
        ValueError: on a bad shape, negative counts, budget or slack.
    """
    _check_num_nodes(num_nodes)
    c = _check_counts(counts, num_nodes)
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
        raise ValueError(f"budget must be a non-negative int (rows per node), got {budget!r}")
    if not slack >= 0:
        raise ValueError(f"slack must be >= 0, got {slack!r}")
    n = c.shape[1]
    total = c.sum(0) if hotness is None else torch.as_tensor(hotness).to(torch.float64)
    if total.shape != (n,):
        raise ValueError(f"hotness must be ({n},) scores, got {tuple(total.shape)}")
    hot = torch.argsort(-total, stable=True)[:min(budget, n)]
    hot = hot[total[hot] > 0]
    replicated = torch.zeros(n, dtype=torch.bool)
    replicated[hot] = True
    owner = torch.arange(n, dtype=torch.int64) % num_nodes
    rest = torch.nonzero(~replicated).flatten()
    if rest.numel():
        cap = math.ceil(rest.numel() / num_nodes * (1.0 + slack))
        owner[rest] = _assign_owners(c, rest, cap)
    return NodePartition(owner, replicated, num_nodes, "hotness")


def partition_rows(strategy: str, num_rows: int, num_nodes: int, *,
                   counts: Optional[torch.Tensor] = None, budget: int = 0,
                   slack: float = 0.0, hotness: Optional[torch.Tensor] = None
                   ) -> NodePartition:
    """One entry point for the node partitions of :data:`NODE_PARTITIONS`.

    Args:
        strategy: ``"hotness"``, ``"hash"`` or ``"replicate"``.
        num_rows: N.
        num_nodes: M.
        counts: ``(M, N)`` per-node access counts (``"hotness"`` only).
        budget: replicated rows per node (``"hotness"`` only).
        slack: owner balance slack (``"hotness"`` only).
        hotness: ``(N,)`` scores of the replicated rows (``"hotness"`` only; None: ``counts``
            summed).

    Raises:
        ValueError: on an unknown strategy, or ``"hotness"`` without counts of N rows.
    """
    if strategy == "replicate":
        return replicate_partition(num_rows, num_nodes)
    if strategy == "hash":
        return hash_partition(num_rows, num_nodes)
    if strategy != "hotness":
        raise ValueError(f"strategy must be one of {', '.join(NODE_PARTITIONS)}, "
                         f"got {strategy!r}")
    if counts is None:
        raise ValueError("strategy='hotness' needs counts, the (M, N) per-node access counts")
    if torch.as_tensor(counts).dim() != 2 or torch.as_tensor(counts).shape[1] != num_rows:
        raise ValueError(f"counts must be (num_nodes, num_rows={num_rows}), got shape "
                         f"{tuple(torch.as_tensor(counts).shape)}")
    return hotness_partition(counts, num_nodes, budget, slack=slack, hotness=hotness)
