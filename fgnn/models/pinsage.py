"""PinSAGE (Ying et al., KDD 2018) on random-walk blocks.

The random-walk sampler keeps, for every vertex, the ``top_k`` vertices most visited by its
random walks and stores the visit counts in ``Block.weights``. Each layer is the paper's
CONVOLVE (Alg. 1) with importance pooling (§3.2):

    n_v  = sum_u a_uv · act(Q h_u + q) / sum_u a_uv          (line 1, importance-weighted mean)
    z_v  = act(W · [h_v ; n_v] + w)                           (line 2, concatenate with self)
    h_v' = z_v / ||z_v||_2                                     (line 3, L2 normalisation)

with ``a_uv`` the visit counts (1 when ``Block.weights`` is ``None``). After the last layer a
linear head maps the embedding to class logits (the final dense layer of Alg. 2, line 17).
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch
from torch import nn

from fgnn.models.aggregate import (Activation, SparseAwareDropout, check_hparams, check_inputs,
                                   resolve_activation, weighted_mean)
from fgnn.sampling.base import Block

__all__ = ["PinSAGEConv", "PinSAGE"]


class PinSAGEConv(nn.Module):
    """One PinSAGE CONVOLVE layer (Alg. 1) on a block.

    Args:
        in_dim: input feature size F_in.
        out_dim: output feature size F_out (also the size of the pooled neighbour message).
        activation: the non-linearity of lines 1 and 2 (ReLU in the paper).
        normalize: apply the L2 normalisation of line 3.

    Shapes:
        h ``(S, F_in)`` with ``S >= block.num_src`` -> ``(block.num_dst, F_out)``.
    """

    def __init__(self, in_dim: int, out_dim: int, activation: Activation = "relu",
                 normalize: bool = True) -> None:
        super().__init__()
        self.in_dim, self.out_dim, self.normalize = in_dim, out_dim, normalize
        self.Q = nn.Linear(in_dim, out_dim)
        self.W = nn.Linear(in_dim + out_dim, out_dim)
        self.activation = resolve_activation(activation)

    def forward(self, block: Block, h: torch.Tensor) -> torch.Tensor:
        h = h[:block.num_src]
        msg = self.activation(self.Q(h))  # (S, F_out)
        n = weighted_mean(msg, block.src, block.dst, block.num_dst, block.weights)
        z = self.activation(self.W(torch.cat([h[:block.num_dst], n], dim=-1)))
        if self.normalize:
            norm = z.norm(dim=-1, keepdim=True)
            z = z / torch.where(norm > 0, norm, torch.ones_like(norm))
        return z

    def extra_repr(self) -> str:
        return f"{self.in_dim}, {self.out_dim}, aggr='importance', normalize={self.normalize}"


class PinSAGE(nn.Module):
    """A multi-layer PinSAGE network with a linear classification head (FGNN §7.1: 3 layers of
    random-walk neighbourhoods, 4 walks of length 3, top 5, hidden 256).

    Args:
        in_dim: feature dimension F of the input features.
        num_classes: number of output classes C.
        num_layers: number of CONVOLVE layers = number of blocks the sampler must produce.
        hidden: embedding size of every layer.
        dropout: dropout probability in ``[0, 1)``, applied to the input of every layer but the
            first.
        activation: the non-linearity inside each layer.
        input_dropout: dropout on the raw input features (0 by default, like PyG's and DGL's
            GraphSAGE/GCN models, which drop out only between layers; Kipf & Welling's Cora
            recipe uses 0.5; ``None`` uses ``dropout``). It is a
            :class:`~fgnn.models.aggregate.SparseAwareDropout`, cheap on sparse features.

    Shapes:
        x ``(M, F)`` features of ``sample.input_nodes`` (rows past ``blocks[0].num_src`` are
        ignored) -> ``(num_seeds, C)`` logits.
    """

    def __init__(self, in_dim: int, num_classes: int, num_layers: int = 3, hidden: int = 256,
                 dropout: float = 0.5, activation: Activation = "relu",
                 input_dropout: Optional[float] = 0.0) -> None:
        super().__init__()
        check_hparams("PinSAGE", in_dim, num_classes, num_layers, hidden, dropout, input_dropout)
        self.in_dim, self.num_classes, self.num_layers = in_dim, num_classes, num_layers
        self.hidden = hidden
        dims = [in_dim] + [hidden] * num_layers
        self.layers = nn.ModuleList(PinSAGEConv(a, b, activation)
                                    for a, b in zip(dims[:-1], dims[1:]))
        self.head = nn.Linear(hidden, num_classes)
        self.dropout = nn.Dropout(dropout)
        self.input_dropout = SparseAwareDropout(dropout if input_dropout is None
                                                else input_dropout)

    def forward(self, blocks: Sequence[Block], x: torch.Tensor) -> torch.Tensor:
        check_inputs("PinSAGE", blocks, x, self.in_dim, self.num_layers)
        h = x[:blocks[0].num_src]
        for i, (layer, block) in enumerate(zip(self.layers, blocks)):
            h = layer(block, (self.input_dropout if i == 0 else self.dropout)(h))
        return self.head(h)
