"""The sampler API: a ``Sampler`` turns seed vertices into a ``Sample`` (FGNN Fig. 7).

Local ids. All layers of a sample share one numbering, the positions in ``Sample.input_nodes``:
seeds come first, then the vertices each hop discovers in order (deduplicated, §2 Fig. 1). The
vertices a layer aggregates *into* are a prefix of those it reads *from*, so a block stores
``num_dst <= num_src`` and edge endpoints as local ids below those bounds (DGL's block layout).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Optional

import torch

from fgnn.graph import CSRGraph

__all__ = ["Block", "Sample", "Sampler"]


@dataclass
class Block:
    """One message-passing layer of a sample.

    Attributes:
        src: ``(E_l,)`` int64 local ids of message senders, each ``< num_src``.
        dst: ``(E_l,)`` int64 local ids of receivers, each ``< num_dst``.
        num_src: number of vertices whose features this layer reads (a prefix of input_nodes).
        num_dst: number of vertices this layer outputs (a prefix of the src vertices).
        weights: optional ``(E_l,)`` float edge weights for aggregation (1/q importance weights of
            locality-aware sampling, random-walk visit counts for PinSAGE).
    """

    src: torch.Tensor
    dst: torch.Tensor
    num_src: int
    num_dst: int
    weights: Optional[torch.Tensor] = None

    @property
    def num_edges(self) -> int:
        """Number of sampled edges E_l."""
        return int(self.src.numel())

    def to(self, device: torch.device | str) -> "Block":
        """Copy to ``device``."""
        w = None if self.weights is None else self.weights.to(device)
        return Block(self.src.to(device), self.dst.to(device), self.num_src, self.num_dst, w)


@dataclass
class Sample:
    """The result of sampling one mini-batch.

    Attributes:
        seeds: ``(B,)`` int64 global ids of the mini-batch's target vertices.
        blocks: one block per layer, input layer first (``blocks[0]`` reads input features).
        input_nodes: ``(M,)`` int64 global ids, seeds first, no repeats; position = local id.
        cached: optional ``(M,)`` bool mask, True where the input vertex's feature row is in the
            trainer's device cache (the "M" step of FGNN Table 5, filled by the cache layer).
        task_id: optional id of the mini-batch task within its epoch (set by the runtime).
        pairs: optional ``(3, P)`` int64 of a link-prediction sample (:mod:`fgnn.link.task`):
            local ids (positions in ``seeds``) of each scored pair's source and destination,
            and its 0/1 label.
    """

    seeds: torch.Tensor
    blocks: list[Block]
    input_nodes: torch.Tensor
    cached: Optional[torch.Tensor] = None
    task_id: Optional[int] = None
    pairs: Optional[torch.Tensor] = None

    @property
    def num_layers(self) -> int:
        """Number of blocks."""
        return len(self.blocks)

    @property
    def num_edges(self) -> int:
        """Sampled edges over all layers."""
        return sum(b.num_edges for b in self.blocks)

    def to(self, device: torch.device | str) -> "Sample":
        """Copy every tensor to ``device``."""
        return Sample(self.seeds.to(device), [b.to(device) for b in self.blocks],
                      self.input_nodes.to(device),
                      None if self.cached is None else self.cached.to(device), self.task_id,
                      None if self.pairs is None else self.pairs.to(device))


class Sampler(ABC):
    """Base class of graph samplers; subclass and implement :meth:`sample`.

    A sampler must be deterministic for a given ``generator`` state and must run on the device
    that holds ``graph`` (CPU or GPU) with the same code.
    """

    #: Number of layers (blocks) the sampler produces; models check it.
    num_layers: int

    @abstractmethod
    def sample(self, graph: CSRGraph, seeds: torch.Tensor,
               generator: Optional[torch.Generator] = None) -> Sample:
        """Sample the multi-layer neighbourhood of ``seeds``.

        Args:
            graph: topology on the sampling device.
            seeds: ``(B,)`` int64 global ids on ``graph.device``.
            generator: random source on ``graph.device``; ``None`` uses torch's default.
        """
