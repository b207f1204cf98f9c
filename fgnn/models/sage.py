"""GraphSAGE with the mean aggregator (Hamilton, Ying & Leskovec, NeurIPS 2017, Alg. 1) on blocks.

Each layer combines a vertex's own representation with the (weighted) mean of its sampled
in-neighbours; concatenation followed by one linear map (Alg. 1, line 5) is written as the sum of
two linear maps, as in DGL's ``SAGEConv('mean')`` and PyG's ``SAGEConv``::

    h_v' = W_self · h_v + W_neigh · (sum_u w_uv h_u / sum_u w_uv) + b

``w_uv`` are the block's edge weights (1 when ``Block.weights`` is ``None``): the 1/q importance
weights of locality-aware sampling give a self-normalised importance estimate of the mean.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from fgnn.models.aggregate import Activation, weighted_mean
from fgnn.models.stack import BlockStack
from fgnn.sampling.base import Block

__all__ = ["SAGEConv", "GraphSAGE"]


class SAGEConv(nn.Module):
    """One GraphSAGE-mean layer on a block.

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
        self.lin_self = nn.Linear(in_dim, out_dim, bias=bias)
        self.lin_neigh = nn.Linear(in_dim, out_dim, bias=False)

    def forward(self, block: Block, h: torch.Tensor) -> torch.Tensor:
        h = h[:block.num_src]
        h_neigh = h
        if self.in_dim > self.out_dim:
            h_neigh = self.lin_neigh(h)  # mean(W h) == W mean(h), on fewer columns
        neigh = weighted_mean(h_neigh, block.src, block.dst, block.num_dst, block.weights)
        if self.in_dim <= self.out_dim:
            neigh = self.lin_neigh(neigh)
        return self.lin_self(h[:block.num_dst]) + neigh

    def extra_repr(self) -> str:
        return f"{self.in_dim}, {self.out_dim}, aggr='mean'"


class GraphSAGE(BlockStack):
    """A multi-layer GraphSAGE-mean network (FGNN §7.1: 2 layers, fanouts 25, 10, hidden 256).

    The activation follows every layer but the last, which returns class logits; dropout is
    applied to the input of every layer but the first (``input_dropout`` for that one), as in
    PyG's ``torch_geometric.nn.GraphSAGE``.

    Args:
        in_dim: feature dimension F of the input features.
        num_classes: number of output classes C.
        num_layers: number of layers = number of blocks the sampler must produce.
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

    conv = SAGEConv

    def __init__(self, in_dim: int, num_classes: int, num_layers: int = 2, hidden: int = 256,
                 dropout: float = 0.5, activation: Activation = "relu",
                 input_dropout: Optional[float] = 0.0) -> None:
        super().__init__(in_dim, num_classes, num_layers, hidden, dropout, activation,
                         input_dropout)
