"""GAT (Veličković et al., ICLR 2018) on sampled blocks: multi-head attention over each
destination's sampled in-neighbours and itself.

One layer, per head ``k`` (PyG's ``GATConv`` with its default self loops)::

    z_u = W_k h_u
    e_uv = LeakyReLU_0.2(a_src_k · z_u + a_dst_k · z_v)       for u in N_s(v) ∪ {v}
    α_uv = softmax_u(e_uv)                                  (dropout on α while training)
    h_v' = Σ_u α_uv z_u                                      heads concatenated, or averaged

A block's destinations are a prefix of its sources, so the self loop of destination ``v`` is the
edge ``v -> v`` in the block's local ids. ``Block.weights`` (locality-aware 1/q importance
weights, walk counts) scale each neighbour's ``exp(e_uv)`` before normalising; the self loop
weighs 1. The model: ``num_layers`` layers, ``heads`` heads of ``hidden`` features each in the
hidden layers (concatenated, ELU after), ``out_heads`` averaged heads of class logits last;
dropout on every layer's input (``input_dropout`` on the raw features) and on the attention
coefficients (Veličković et al.'s Cora recipe: 8 heads × 8 features, dropout 0.6 everywhere,
1 output head; :data:`fgnn.recipes.VELICKOVIC_RECIPE`).
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn
from torch.nn import functional as F

from fgnn.models.aggregate import Activation
from fgnn.models.stack import BlockStack
from fgnn.sampling.base import Block

__all__ = ["GATConv", "GAT"]


class GATConv(nn.Module):
    """One multi-head graph attention layer on a block.

    Args:
        in_dim: input feature size F_in.
        out_dim: features per head F_out.
        heads: attention heads H.
        concat: concatenate the heads (``(D, H·F_out)``), else average them (``(D, F_out)``).
        negative_slope: of the LeakyReLU on the attention logits.
        attn_dropout: dropout on the attention coefficients while training.
        bias: add a learnable bias.

    Shapes:
        h ``(S, F_in)`` with ``S >= block.num_src`` -> ``(block.num_dst, H·F_out or F_out)``.
    """

    def __init__(self, in_dim: int, out_dim: int, heads: int = 1, concat: bool = True,
                 negative_slope: float = 0.2, attn_dropout: float = 0.0,
                 bias: bool = True) -> None:
        super().__init__()
        self.in_dim, self.out_dim, self.heads, self.concat = in_dim, out_dim, heads, concat
        self.negative_slope = negative_slope
        self.linear = nn.Linear(in_dim, heads * out_dim, bias=False)
        self.att_src = nn.Parameter(torch.empty(1, heads, out_dim))
        self.att_dst = nn.Parameter(torch.empty(1, heads, out_dim))
        self.attn_dropout = nn.Dropout(attn_dropout)
        width = heads * out_dim if concat else out_dim
        self.bias = nn.Parameter(torch.zeros(width)) if bias else None
        nn.init.xavier_uniform_(self.linear.weight)
        nn.init.xavier_uniform_(self.att_src)
        nn.init.xavier_uniform_(self.att_dst)

    def forward(self, block: Block, h: torch.Tensor) -> torch.Tensor:
        n_src, n_dst, heads = block.num_src, block.num_dst, self.heads
        z = self.linear(h[:n_src]).view(n_src, heads, self.out_dim)
        loops = torch.arange(n_dst, device=z.device, dtype=block.src.dtype)
        src = torch.cat([block.src, loops])
        dst = torch.cat([block.dst, loops])
        logits = F.leaky_relu((z * self.att_src).sum(-1)[src]
                              + (z[:n_dst] * self.att_dst).sum(-1)[dst], self.negative_slope)
        alpha = _edge_softmax(logits, dst, n_dst, _loop_weights(block, n_dst, logits.dtype))
        alpha = self.attn_dropout(alpha)
        out = z.new_zeros(n_dst, heads, self.out_dim)
        out.index_add_(0, dst, z[src] * alpha.unsqueeze(-1))
        out = out.reshape(n_dst, heads * self.out_dim) if self.concat else out.mean(1)
        return out if self.bias is None else out + self.bias

    def extra_repr(self) -> str:
        return (f"{self.in_dim}, {self.out_dim}, heads={self.heads}, concat={self.concat}, "
                f"self_loop=True")


def _loop_weights(block: Block, n_dst: int, dtype: torch.dtype) -> Optional[torch.Tensor]:
    """The block's edge weights followed by 1 for each self loop (None without weights)."""
    if block.weights is None:
        return None
    w = block.weights.to(dtype)
    return torch.cat([w, w.new_ones(n_dst)])


def _edge_softmax(logits: torch.Tensor, dst: torch.Tensor, n_dst: int,
                  weights: Optional[torch.Tensor]) -> torch.Tensor:
    """``(E, H)`` attention logits -> coefficients summing to 1 over each destination's edges
    (each ``exp`` scaled by its edge weight first, when there are weights)."""
    idx = dst.unsqueeze(-1).expand_as(logits)
    peak = logits.new_full((n_dst, logits.shape[1]), float("-inf"))
    peak = peak.scatter_reduce(0, idx, logits, reduce="amax", include_self=True)
    ex = torch.exp(logits - peak[dst])
    if weights is not None:
        ex = ex * weights.unsqueeze(-1)
    total = logits.new_zeros(n_dst, logits.shape[1]).index_add_(0, dst, ex)
    return ex / total[dst].clamp_min(torch.finfo(ex.dtype).tiny)


class GAT(BlockStack):
    """A multi-layer GAT on the blocks of a :class:`~fgnn.sampling.Sample`.

    Args:
        in_dim: feature dimension F of the input features.
        num_classes: number of output classes C.
        num_layers: layers = blocks the sampler must produce.
        hidden: features per head in the hidden layers.
        dropout: on every hidden layer's input and on the attention coefficients, in ``[0, 1)``.
        activation: after every layer but the last (ELU, as Veličković et al.).
        input_dropout: on the raw input features; None: ``dropout``.
        heads: attention heads of the hidden layers (concatenated).
        out_heads: attention heads of the output layer (averaged).

    Shapes:
        x ``(M, F)`` features of ``sample.input_nodes`` -> ``(num_seeds, C)`` logits.
    """

    def __init__(self, in_dim: int, num_classes: int, num_layers: int = 2, hidden: int = 8,
                 dropout: float = 0.6, activation: Activation = "elu",
                 input_dropout: Optional[float] = None, heads: int = 8,
                 out_heads: int = 1) -> None:
        if heads < 1 or out_heads < 1:
            raise ValueError(f"GAT: heads and out_heads must be >= 1, got {heads}, {out_heads}")
        self.heads, self.out_heads = heads, out_heads
        super().__init__(in_dim, num_classes, num_layers, hidden, dropout, activation,
                         input_dropout)

    def _layers(self, dropout: float) -> list[nn.Module]:
        """Hidden layers of ``heads`` concatenated heads, an output layer of ``out_heads``
        averaged ones; attention dropout ``dropout``."""
        dims = [self.in_dim] + [self.hidden * self.heads] * (self.num_layers - 1)
        return ([GATConv(d, self.hidden, self.heads, concat=True, attn_dropout=dropout)
                 for d in dims[:-1]]
                + [GATConv(dims[-1], self.num_classes, self.out_heads, concat=False,
                           attn_dropout=dropout)])
