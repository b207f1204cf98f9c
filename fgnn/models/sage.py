"""GraphSAGE with the mean aggregator (Hamilton, Ying & Leskovec, NeurIPS 2017, Alg. 1) on blocks.

Each layer combines a vertex's own representation with the (weighted) mean of its sampled
in-neighbours; concatenation followed by one linear map (Alg. 1, line 5) is written as the sum of
two linear maps, as in DGL's ``SAGEConv('mean')`` and PyG's ``SAGEConv``::

    h_v' = W_self · h_v + W_neigh · (sum_u w_uv h_u / sum_u w_uv) + b

``w_uv`` are the block's edge weights (1 when ``Block.weights`` is ``None``): the 1/q importance
weights of locality-aware sampling give a self-normalised importance estimate of the mean.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch
from torch import nn

from fgnn.models.aggregate import (Activation, SparseAwareDropout, check_hparams, check_inputs,
                                   resolve_activation, weighted_mean)
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


class GraphSAGE(nn.Module):
    """A multi-layer GraphSAGE-mean network (FGNN §7.1: 2 layers, fanouts 25, 10, hidden 256).

    Dropout is applied to the input of every layer and the activation after every layer but the
    last, which returns class logits.

    Args:
        in_dim: feature dimension F of the input features.
        num_classes: number of output classes C.
        num_layers: number of layers = number of blocks the sampler must produce.
        hidden: hidden size.
        dropout: dropout probability in ``[0, 1)``.
        activation: name or callable (see :func:`fgnn.models.aggregate.resolve_activation`).
        input_dropout: dropout on the raw input features; ``None`` uses ``dropout``
            (:class:`~fgnn.models.aggregate.SparseAwareDropout`, cheap on sparse features).

    Shapes:
        x ``(M, F)`` features of ``sample.input_nodes`` (rows past ``blocks[0].num_src`` are
        ignored) -> ``(num_seeds, C)`` logits.
    """

    def __init__(self, in_dim: int, num_classes: int, num_layers: int = 2, hidden: int = 256,
                 dropout: float = 0.5, activation: Activation = "relu",
                 input_dropout: Optional[float] = None) -> None:
        super().__init__()
        check_hparams("GraphSAGE", in_dim, num_classes, num_layers, hidden, dropout, input_dropout)
        self.in_dim, self.num_classes, self.num_layers = in_dim, num_classes, num_layers
        self.hidden = hidden
        dims = [in_dim] + [hidden] * (num_layers - 1) + [num_classes]
        self.layers = nn.ModuleList(SAGEConv(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.dropout = nn.Dropout(dropout)
        self.input_dropout = SparseAwareDropout(dropout if input_dropout is None
                                                else input_dropout)
        self.activation = resolve_activation(activation)

    def forward(self, blocks: Sequence[Block], x: torch.Tensor) -> torch.Tensor:
        check_inputs("GraphSAGE", blocks, x, self.in_dim, self.num_layers)
        h = x[:blocks[0].num_src]
        for i, (layer, block) in enumerate(zip(self.layers, blocks)):
            h = layer(block, (self.input_dropout if i == 0 else self.dropout)(h))
            if i < self.num_layers - 1:
                h = self.activation(h)
        return h
