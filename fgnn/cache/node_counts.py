"""Measured per-node access counts: the input of the ``hotness`` node partition.

Before a cluster job plans which node owns which feature row
(:func:`~fgnn.cache.node_partition.hotness_partition`), each Trainer counts the rows it reads
during the warm-up epochs with a :class:`ReadCounter` (one ``index_add_`` per mini-batch into an
``(N,)`` int32 tensor), and the driver sums the Trainers' counts per node with
:func:`node_access_counts`: row ``m`` of the ``(M, N)`` result is what node ``m``'s Trainers
read, per epoch. This is the input GraphLearn-for-PyTorch's ``FrequencyPartitioner`` takes (one
access-probability vector per partition, each measured by sampling from that partition's
training seeds) at node level, and the sampling probability ``p`` of Song & Jiang (ICS 2022,
§3.2) estimated from the same epochs PreSC counts (FGNN §6.3); ``bench/partition.py`` builds its
planner input with the same function from its simulated Trainers' counts.
"""

from __future__ import annotations

from typing import Hashable, Mapping, Optional

import torch

__all__ = ["ReadCounter", "node_access_counts"]


class ReadCounter:
    """How often one Trainer read each of ``num_rows`` feature rows.

    Args:
        num_rows: N, the rows of the feature matrix.

    Raises:
        ValueError: for a negative ``num_rows``.
    """

    def __init__(self, num_rows: int) -> None:
        if isinstance(num_rows, bool) or not isinstance(num_rows, int) or num_rows < 0:
            raise ValueError(f"num_rows must be a non-negative int, got {num_rows!r}")
        self.counts = torch.zeros(num_rows, dtype=torch.int32)

    def record(self, ids: torch.Tensor) -> None:
        """Count one read of each of ``ids`` (the input rows of a mini-batch; the counter moves
        once to the device the ids are on)."""
        if self.counts.device != ids.device:
            self.counts = self.counts.to(ids.device)
        self.counts.index_add_(0, ids, torch.ones(ids.numel(), dtype=torch.int32,
                                                  device=ids.device))

    def take(self) -> torch.Tensor:
        """The counts so far, on the CPU; counting starts again from zero."""
        out = self.counts.cpu()
        self.counts = torch.zeros_like(self.counts)
        return out


def node_access_counts(reads: Mapping[Hashable, torch.Tensor], node_of: Mapping[Hashable, int],
                       num_nodes: int, num_rows: int, epochs: int = 1
                       ) -> Optional[torch.Tensor]:
    """``(M, N)`` float32: each node's reads per epoch, its Trainers' counts summed.

    Args:
        reads: Trainer (any key) -> its ``(N,)`` counts over the measured epochs.
        node_of: Trainer -> its node in ``[0, M)``; a Trainer without one (it no longer trains
            after the warm-up) is left out.
        num_nodes: M.
        num_rows: N.
        epochs: the measured epochs (the counts are divided by it).

    Returns:
        The counts, or None when no Trainer with a node counted a read (nothing measured).

    Raises:
        ValueError: on counts of another length, a node outside ``[0, M)`` or ``epochs < 1``.
    """
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs!r}")
    out = torch.zeros(num_nodes, num_rows, dtype=torch.float32)
    for key, got in reads.items():
        if key not in node_of:
            continue
        m = node_of[key]
        if not 0 <= m < num_nodes:
            raise ValueError(f"node_of[{key!r}] must be in [0, {num_nodes}), got {m!r}")
        if got.shape != (num_rows,):
            raise ValueError(f"reads[{key!r}] must be ({num_rows},) counts, got "
                             f"{tuple(got.shape)}")
        out[m] += got.float()
    if not bool(out.any()):
        return None
    return out / epochs
