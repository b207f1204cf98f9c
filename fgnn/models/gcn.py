"""GCN (Kipf & Welling, ICLR 2017) on sampled blocks.

Normalisation. Kipf & Welling propagate ``D^-1/2 (A + I) D^-1/2 X W`` (Eq. 2). On a sampled block
the sender's degree in the full graph is not known to the trainer, so this layer uses the
*right* (row) normalisation of the self-looped adjacency with sampled degrees, DGL's
``GraphConv(norm='right')`` on a block with self-loops and the "GCN aggregator" of GraphSAGE
(Hamilton et al., 2017, §3.3)::

    h_v' = W · (h_v + sum_{u in N_s(v)} w_uv h_u) / (1 + sum_{u in N_s(v)} w_uv) + b

where ``N_s(v)`` is the sampled in-neighbourhood of ``v`` in the block and ``w_uv`` the block's
edge weights (1 when ``Block.weights`` is ``None``). With the 1/q importance weights of
locality-aware sampling, ``sum w_uv`` estimates the full degree, so the self loop keeps its
``1 / (deg + 1)`` share.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from fgnn.models.aggregate import Activation, edge_weight_sum, weighted_sum
from fgnn.models.stack import BlockStack
from fgnn.sampling.base import Block

__all__ = ["GCNConv", "GCN"]


class GCNConv(nn.Module):
    """One GCN layer on a block: self-looped, row-normalised weighted sum, then a linear map.

    Args:
        in_dim: input feature size F_in.
        out_dim: output feature size F_out.
        bias: add a learnable bias.

    Shapes:
        h ``(S, F_in)`` with ``S >= block.num_src`` -> ``(block.num_dst, F_out)``.
    """

    def __init__(self, in_dim: int, out_dim: int, bias: bool = True) -> None:
        super().__init__()
        self.in_dim, self.out_dim = in_dim, out_dim
        self.linear = nn.Linear(in_dim, out_dim, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_dim)) if bias else None

    def forward(self, block: Block, h: torch.Tensor) -> torch.Tensor:
        h = h[:block.num_src]
        if self.in_dim > self.out_dim:
            # Multiply first: W is linear, so W·mean(h) == mean(W·h), on fewer columns.
            h = self.linear(h)
        total = weighted_sum(h, block.src, block.dst, block.num_dst, block.weights)
        total = total + h[:block.num_dst]  # self loop, weight 1
        denom = edge_weight_sum(block.dst, block.num_dst, block.weights, dtype=total.dtype) + 1.0
        out = total / denom.unsqueeze(-1)
        if self.in_dim <= self.out_dim:
            out = self.linear(out)
        if self.bias is not None:
            out = out + self.bias
        return out

    def extra_repr(self) -> str:
        return f"{self.in_dim}, {self.out_dim}, norm='right', self_loop=True"


class GCN(BlockStack):
    """A multi-layer GCN on the blocks of a :class:`~fgnn.sampling.Sample` (FGNN §7.1: 3 layers,
    fanouts 15, 10, 5, hidden 256).

    The activation follows every layer but the last, which returns class logits; dropout is
    applied to the input of every layer but the first (``input_dropout`` for that one).

    Args:
        in_dim: feature dimension F of the input features.
        num_classes: number of output classes C.
        num_layers: number of GCN layers = number of blocks the sampler must produce.
        hidden: hidden size.
        dropout: dropout probability in ``[0, 1)``.
        activation: name or callable (see :func:`fgnn.models.aggregate.resolve_activation`).
        input_dropout: dropout on the raw input features (0 by default, like PyG's and DGL's
            GraphSAGE/GCN models, which drop out only between layers; Kipf & Welling's Cora
            recipe uses 0.5; ``None`` uses ``dropout``). It is a
            :class:`~fgnn.models.aggregate.SparseAwareDropout`, cheap on sparse features.

    Shapes:
        x ``(M, F)`` features of ``sample.input_nodes`` (rows past ``blocks[0].num_src`` are
        ignored) -> ``(num_seeds, C)`` logits.
    """

    conv = GCNConv

    def __init__(self, in_dim: int, num_classes: int, num_layers: int = 3, hidden: int = 256,
                 dropout: float = 0.5, activation: Activation = "relu",
                 input_dropout: Optional[float] = 0.0) -> None:
        super().__init__(in_dim, num_classes, num_layers, hidden, dropout, activation,
                         input_dropout)
