"""The sampler API: a ``Sampler`` turns seed vertices into a ``Sample`` (FGNN Fig. 7).

Local ids. All layers of a sample share one numbering, the positions in ``Sample.input_nodes``:
seeds come first, then the vertices each hop discovers in order (deduplicated, §2 Fig. 1). The
vertices a layer aggregates *into* are a prefix of those it reads *from*, so a block stores
``num_dst <= num_src`` and edge endpoints as local ids below those bounds (DGL's block layout).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, Optional, Union

import torch

from fgnn.graph import CSRGraph

__all__ = ["Block", "HeteroBlock", "EdgeType", "Sample", "Sampler", "per_type",
           "per_type_zip"]


#: A relation ``(src_type, rel, dst_type)`` of a typed graph (PyG's ``EdgeType``).
EdgeType = tuple[str, str, str]
#: A tensor, or one tensor per node type of a typed sample.
PerType = Union[torch.Tensor, dict[str, torch.Tensor]]
Move = Callable[[torch.Tensor], torch.Tensor]


def per_type(value: Any, f: Callable[[torch.Tensor], Any]) -> Any:
    """``f(value)``, or for a per-type dict ``{t: f(v)}`` (None stays None)."""
    if value is None:
        return None
    if isinstance(value, dict):
        return {t: f(v) for t, v in value.items()}
    return f(value)


def per_type_zip(a: Any, b: Any, f: Callable[[torch.Tensor, torch.Tensor], Any]) -> Any:
    """``f(a, b)``, or for per-type dicts ``{t: f(a[t], b[t])}`` over ``b``'s types."""
    if isinstance(b, dict):
        return {t: f(a[t], v) for t, v in b.items()}
    return f(a, b)


def per_type_tensors(value: Any) -> list[torch.Tensor]:
    """The tensors of a tensor or per-type dict (none for None)."""
    if value is None:
        return []
    return list(value.values()) if isinstance(value, dict) else [value]


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

    @property
    def edge_index(self) -> torch.Tensor:
        """PyG's ``edge_index``: ``(2, E_l)``, row 0 the senders' local ids (``src``, among the
        ``num_src`` source vertices), row 1 the receivers' (``dst``, among the ``num_dst``
        destinations), so a PyG layer runs on the block as it is:
        ``conv((h, h[:b.num_dst]), b.edge_index, size=b.size)``."""
        return torch.stack([self.src, self.dst])

    @property
    def size(self) -> tuple[int, int]:
        """PyG's bipartite ``size``: ``(num_src, num_dst)``."""
        return (int(self.num_src), int(self.num_dst))

    def tensors(self) -> list[torch.Tensor]:
        """Edges (and weights)."""
        return [self.src, self.dst] + ([] if self.weights is None else [self.weights])

    def map(self, f: Move) -> "Block":
        """The block with every tensor passed through ``f``."""
        return Block(f(self.src), f(self.dst), self.num_src, self.num_dst,
                     None if self.weights is None else f(self.weights))

    def to(self, device: torch.device | str) -> "Block":
        """Copy to ``device``."""
        return self.map(lambda t: t.to(device))

    def pack(self, f: Callable[[torch.Tensor], Any]) -> tuple:
        """``(src, dst, num_src, num_dst, weights)`` with tensors through ``f``."""
        w = None if self.weights is None else f(self.weights)
        return (f(self.src), f(self.dst), self.num_src, self.num_dst, w)


@dataclass
class HeteroBlock:
    """One layer of a typed sample.

    Attributes:
        edges: relation -> ``(src, dst)`` int64 local ids (``src`` of the relation's source type,
            each ``< num_src[s]``; ``dst`` of its destination type, each ``< num_dst[d]``).
        num_src: node type -> rows this layer reads (a prefix of ``input_nodes[t]``).
        num_dst: node type -> rows this layer outputs (a prefix of its src rows).
    """

    edges: dict[EdgeType, tuple[torch.Tensor, torch.Tensor]]
    num_src: dict[str, int]
    num_dst: dict[str, int]

    @property
    def num_edges(self) -> int:
        """Sampled edges over all relations."""
        return sum(int(s.numel()) for s, _ in self.edges.values())

    def tensors(self) -> list[torch.Tensor]:
        """Every relation's edges."""
        return [t for pair in self.edges.values() for t in pair]

    def map(self, f: Move) -> "HeteroBlock":
        """The block with every tensor passed through ``f``."""
        return HeteroBlock({et: (f(s), f(d)) for et, (s, d) in self.edges.items()},
                           dict(self.num_src), dict(self.num_dst))

    def to(self, device: torch.device | str) -> "HeteroBlock":
        """Copy to ``device``."""
        return self.map(lambda t: t.to(device))

    def pack(self, f: Callable[[torch.Tensor], Any]) -> dict:
        """``{"edges", "num_src", "num_dst"}`` with tensors through ``f``."""
        return {"edges": {et: (f(s), f(d)) for et, (s, d) in self.edges.items()},
                "num_src": dict(self.num_src), "num_dst": dict(self.num_dst)}


def _unpack_block(packed: Any, f: Move) -> Union[Block, HeteroBlock]:
    """Inverse of :meth:`Block.pack` (a tuple) and :meth:`HeteroBlock.pack` (a dict)."""
    if isinstance(packed, dict):
        return HeteroBlock({tuple(et): (f(s), f(d)) for et, (s, d) in packed["edges"].items()},
                           dict(packed["num_src"]), dict(packed["num_dst"]))
    src, dst, ns, nd, w = packed
    return Block(f(src), f(dst), int(ns), int(nd), None if w is None else f(w))


@dataclass
class Sample:
    """One mini-batch, for every task and graph kind (GraphBolt's ``MiniBatch`` idea): what a
    Sampler draws, the transport carries and a Trainer trains on.

    On a typed graph ``input_nodes`` (and ``cached``) hold one tensor per node type, the blocks
    are :class:`HeteroBlock` and ``seed_type`` names the seeds' type; local ids are then per
    node type.

    Attributes:
        seeds: ``(B,)`` int64 ids of the mini-batch's target vertices (global; a typed sample's
            are local ids of ``seed_type``).
        blocks: one block per layer, input layer first (``blocks[0]`` reads input features).
        input_nodes: ``(M,)`` int64 global ids, seeds first, no repeats; position = local id
            (typed: node type -> ``(M_t,)``).
        cached: optional holder bits of each input vertex (the "M" step of FGNN Table 5,
            :meth:`mark`), per node type on a typed sample.
        task_id: optional id of the mini-batch task within its epoch (set by the runtime).
        pairs: optional ``(R, P)`` int64 scored pairs of a link or recommendation sample
            (:mod:`fgnn.tasks`): local ids (positions in ``seeds``) of each pair's endpoints and
            its label.
        seed_type: node type of the seeds on a typed graph; None on a homogeneous one.
    """

    seeds: torch.Tensor
    blocks: list[Any]
    input_nodes: PerType
    cached: Optional[PerType] = None
    task_id: Optional[int] = None
    pairs: Optional[torch.Tensor] = None
    seed_type: Optional[str] = None

    @property
    def num_layers(self) -> int:
        """Number of blocks."""
        return len(self.blocks)

    @property
    def num_edges(self) -> int:
        """Sampled edges over all layers."""
        return sum(b.num_edges for b in self.blocks)

    def tensors(self) -> list[torch.Tensor]:
        """Every tensor of the sample: seeds, input nodes, marks, pairs, the blocks' edges."""
        ts = [self.seeds, *per_type_tensors(self.input_nodes), *per_type_tensors(self.cached)]
        if self.pairs is not None:
            ts.append(self.pairs)
        for b in self.blocks:
            ts += b.tensors()
        return ts

    def nbytes(self) -> int:
        """Bytes of the sample's tensors (what the transport copies)."""
        return int(sum(t.numel() * t.element_size() for t in self.tensors()))

    def map(self, f: Move) -> "Sample":
        """The sample with every tensor passed through ``f`` (a device copy, a copy stream's
        upload)."""
        return Sample(f(self.seeds), [b.map(f) for b in self.blocks],
                      per_type(self.input_nodes, f), per_type(self.cached, f), self.task_id,
                      None if self.pairs is None else f(self.pairs), self.seed_type)

    def to(self, device: torch.device | str) -> "Sample":
        """Copy every tensor to ``device``."""
        return self.map(lambda t: t.to(device))

    def mark(self, cache_map: Optional[torch.Tensor]) -> "Sample":
        """The M step: ``cached = cache_map[input_nodes]``, the holder bits of each input
        vertex (``(N,)`` integer map, bit ``d`` = device ``d`` caches the row); None: nothing
        is cached, every mark 0 (a typed sample's rows are known to its Trainer's typed store:
        its runtime marks nothing)."""
        if cache_map is None:
            self.cached = per_type(self.input_nodes, lambda v: torch.zeros(
                v.numel(), dtype=torch.uint8, device=v.device))
        else:
            self.cached = per_type(self.input_nodes,
                                   lambda v: cache_map[v.to(cache_map.device)])
        return self

    def pack(self, f: Callable[[torch.Tensor], Any]) -> dict[str, Any]:
        """The sample as a dict of ``f(tensor)`` (numpy arrays for the object store, or the
        tensors themselves for a direct tensor transport); :meth:`unpack` inverts it."""
        return {"seeds": f(self.seeds), "input_nodes": per_type(self.input_nodes, f),
                "cached": per_type(self.cached, f), "task_id": self.task_id,
                "pairs": None if self.pairs is None else f(self.pairs),
                "seed_type": self.seed_type, "blocks": [b.pack(f) for b in self.blocks]}

    @classmethod
    def unpack(cls, packed: dict[str, Any], f: Move) -> "Sample":
        """Inverse of :meth:`pack`, every array made a tensor by ``f``."""
        return cls(f(packed["seeds"]), [_unpack_block(b, f) for b in packed["blocks"]],
                   per_type(packed["input_nodes"], f), per_type(packed["cached"], f),
                   packed["task_id"], None if packed["pairs"] is None else f(packed["pairs"]),
                   packed["seed_type"])


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
